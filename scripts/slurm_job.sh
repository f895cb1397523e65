#!/bin/bash
# SLURM batch script for a run longer than one job: from the repo root, `sbatch scripts/slurm_job.sh --config
# qwen3_8b_qae.yaml [overrides]`. Each job starts the run or resumes its newest complete checkpoint, has it stop at a
# step boundary 45 min before the time limit, and requeues itself only when the next job can get further; any other
# end is one line saying what it found and what to do (docs/gpu.md, "Stopping, preemption, and resuming on other GPUs").
#SBATCH --nodes=1 --gpus-per-node=8 --time=24:00:00
#SBATCH --signal=B:USR1@2700        # 45 min before the limit: the longest step + a save + margin
#SBATCH --requeue
#
# Decisions, from the run folder (trainer.output_dir of the resolved config) before and after train.py:
#   before: the final checkpoint (step trainer.total_steps) is there         -> done: nothing launched
#           a complete checkpoint (checkpoints/step_N with trainer_state.pt)  -> resume it (--resume)
#           metrics.jsonl or a checkpoints/ entry, no complete checkpoint     -> stop: nothing to resume
#           nothing of a run                                                  -> start it (no --resume)
#   after:  the final checkpoint                                              -> done
#           a checkpoint newer than the job started from, after a crash or
#           after this job's own time-limit warning                           -> requeue: the next job resumes it
#           anything else: no newer checkpoint (a requeue would end alike),
#           or a stop asked for some other way (a STOP file by hand)          -> stop
# Progress decides, not the exit status: `accelerate launch` reports any worker's failure as exit 1, so train.py's
# exit 2 for refused input looks like a crash, and a requeue after a job that wrote no newer checkpoint can loop.

PYTHON=${PYTHON:-python}
ARGS=("$@")
[ $# -gt 0 ] || ARGS=(--config qwen3_8b_qae.yaml)

say() { echo "slurm_job.sh: $*" >&2; }  # in the job's log next to train.py's own error lines

step_of() { echo $((10#${1##*step_})); }  # checkpoints/step_000040 -> 40

newest_checkpoint() {  # the newest complete checkpoint in run folder $1, or nothing: a step_N folder holding
    local dir newest=""  # trainer_state.pt, as infra/checkpoint.py's checkpoint_dirs counts them
    for dir in "$1"/checkpoints/step_*; do
        [[ ${dir##*/step_} =~ ^[0-9]+$ && -f $dir/trainer_state.pt ]] || continue
        [[ -n $newest ]] && (( $(step_of "$dir") <= $(step_of "$newest") )) || newest=$dir
    done
    echo "$newest"
}

traces() {  # what run folder $1 holds of a run besides complete checkpoints, as a list in words; nothing if none
    local dir last found=()
    if [[ -f $1/metrics.jsonl ]]; then
        last=$(tail -n 1 "$1/metrics.jsonl" | grep -o '"step": [0-9]*' | grep -o '[0-9]*$')
        found+=("metrics.jsonl${last:+ (last step $last)}")
    fi
    for dir in "$1"/checkpoints/.tmp-step_* "$1"/checkpoints/step_*; do
        if [[ -d $dir && ${dir##*/} == .tmp-* ]]; then
            found+=("checkpoints/${dir##*/} (a save cut short)")
        elif [[ -d $dir && ! -f $dir/trainer_state.pt ]]; then
            found+=("checkpoints/${dir##*/} (no trainer_state.pt)")
        fi
    done
    printf '%s, ' "${found[@]}" | sed 's/, $//'
}

# The final step and the run folder, from the config as train.py resolves it.
if ! RESOLVED=$("$PYTHON" config.py "${ARGS[@]}"); then
    say "not started, not requeued: config.py refused \`${ARGS[*]}\` (its error line is above); fix it and sbatch again"
    exit 2
fi
{ read -r FINAL; read -r OUT; } < <("$PYTHON" -c 'import sys, yaml; trainer = yaml.safe_load(sys.stdin)["trainer"]
print(trainer["total_steps"], trainer["output_dir"], sep="\n")' <<<"$RESOLVED")

# Before the launch: done, resume, stop or start.
START=$(newest_checkpoint "$OUT")
START_STEP=$([[ -n $START ]] && step_of "$START" || echo 0)
FOUND=$(traces "$OUT")
RESUME=""
if [[ -n $START ]] && (( START_STEP >= FINAL )); then
    say "done, not requeued: \`$START\` is the run's final checkpoint (trainer.total_steps $FINAL); nothing to run"
    exit 0
elif [[ -n $START ]]; then
    RESUME=--resume
    say "resuming \`$OUT\` from ${START##*/} of $FINAL steps"
elif [[ -n $FOUND ]]; then
    say "not started, not requeued: \`$OUT\` holds $FOUND but no complete checkpoint to resume (the run ended" \
        "before its first save); delete \`$OUT\` (or set trainer.output_dir to a new folder) and sbatch again"
    exit 1
else
    say "starting \`$OUT\` ($FINAL steps)"
fi

# The run. The warning (SIGUSR1 to this shell, `B:`) writes the STOP file that train.py checks after every step.
ASKED=0  # warnings received
trap 'ASKED=$((ASKED + 1)); mkdir -p "$OUT" && touch "$OUT/STOP"' USR1
accelerate launch train.py "${ARGS[@]}" $RESUME &
PID=$!
while true; do  # a warning ends a wait early; the first wait that no warning ended returns train.py's exit status
    SEEN=$ASKED
    wait "$PID"; CODE=$?
    (( ASKED == SEEN )) && break
done

# After: done, requeue or stop.
NOW=$(newest_checkpoint "$OUT")
NOW_STEP=$([[ -n $NOW ]] && step_of "$NOW" || echo 0)
FOUND=$(traces "$OUT")
if [[ -n $NOW ]] && (( NOW_STEP >= FINAL )); then
    say "done, not requeued: train.py exited $CODE with \`$NOW\`, the run's final checkpoint"
    exit 0
elif (( NOW_STEP > START_STEP )) && (( CODE != 0 || ASKED )); then
    FROM=${START##*/}
    say "requeued: train.py exited $CODE after writing ${NOW##*/} (this job started from ${FROM:-no checkpoint});" \
        "the next job resumes from it"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
elif (( NOW_STEP > START_STEP )); then
    say "not requeued: train.py stopped at ${NOW##*/} when asked by something other than this job's time-limit" \
        "warning (a STOP file, a signal); sbatch again to continue from it"
    exit 0
elif [[ -n $NOW ]]; then
    say "not requeued: train.py exited $CODE without writing a checkpoint newer than ${NOW##*/}, so a requeue" \
        "would end alike; the lines above say why: fix that and sbatch again"
elif [[ -n $FOUND ]]; then
    say "not requeued: train.py exited $CODE before its first complete checkpoint, leaving $FOUND in \`$OUT\`" \
        "and nothing to resume; the lines above say why: fix that, delete \`$OUT\` (or set" \
        "trainer.output_dir to a new folder) and sbatch again"
else
    say "not requeued: train.py exited $CODE before it wrote anything in \`$OUT\`; the lines above say why: fix" \
        "that and sbatch again"
fi
exit 1
