#!/usr/bin/env bash
# The real-model entropy experiment of docs/smollm2_experiment.md, end to end:
#
#     bash scripts/smollm2_experiment.sh        # about 4.5 hours on 2 cores (docs/smollm2_experiment.md, Cost)
#
# Converts SmolLM2-135M-Instruct (scripts/smollm2.py), writes the addition problems
# (scripts/arith_task.py, seed 0), trains configs/smollm2_qae.yaml and configs/smollm2_dapo.yaml with
# seeds 1, 2, 3, measures the starting model and every checkpoint on the probe prompts
# (scripts/probe_entropy.py), and writes the figure and the tables into the doc
# (scripts/smollm2_report.py).
#
# Choices, numbered:
# 1. The two runs of one seed train side by side, each on one thread (OMP_NUM_THREADS=1), as
#    scripts/k_sweep.sh measured best on this 2-core machine; PAR=1 runs one at a time.
# 2. Resumable across sessions: a run whose last checkpoint exists is not trained again, one with
#    checkpoints resumes from the newest (--resume), and a model already in a run's probe.jsonl is not
#    measured again; the report is always rewritten. Delete $OUT to redo.
# 3. The mean-baseline runs, about twice as long per step, go first, so the last hour does not leave a
#    core idle beside one long run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-"1 2 3"}
export STEPS=${STEPS:-30}
PAR=${PAR:-2}
export OUT=${OUT:-runs/smollm2_experiment}
export WANDB_SILENT=true OMP_NUM_THREADS=1 MKL_NUM_THREADS=1  # choice 1
mkdir -p "$OUT/logs"
"$PY" scripts/smollm2.py runs/smollm2
"$PY" scripts/arith_task.py runs/arith

run_one() {  # $1 = qae or mean, $2 = seed: train (or resume), then measure every checkpoint on the probe set
  local config run last
  config=$([ "$1" = qae ] && echo smollm2_qae.yaml || echo smollm2_dapo.yaml)
  run="$OUT/$1_seed$2"
  last="$run/checkpoints/step_$(printf %06d "$STEPS")"
  if [ ! -f "$last/trainer_state.pt" ]; then  # choice 2
    local resume=()
    [ -d "$run/checkpoints" ] && resume=(--resume)
    echo "$(date +%T) train $1 seed $2 ${resume[*]}" >&2
    nice -n 5 "$PY" train.py --config "$config" "trainer.seed=$2" "trainer.total_steps=$STEPS" \
      "trainer.output_dir=$run" "${resume[@]}" >> "$OUT/logs/$1_seed$2.log" 2>&1 ||
      { echo "train $1 seed $2 failed: see $OUT/logs/$1_seed$2.log" >&2; return 1; }
  fi
  nice -n 5 "$PY" scripts/probe_entropy.py "$run" --probe runs/arith/probe.jsonl --base runs/smollm2 \
    >> "$OUT/logs/$1_seed$2.log" 2>&1 || { echo "probe $1 seed $2 failed: see $OUT/logs/$1_seed$2.log" >&2; return 1; }
}
export -f run_one

for arm in mean qae; do for seed in $SEEDS; do echo "$arm $seed"; done; done |  # choice 3
  xargs -P "$PAR" -n 2 bash -c 'run_one "$@"' _
"$PY" scripts/smollm2_report.py "$OUT" --doc docs/smollm2_experiment.md --figure docs/smollm2_experiment.png \
  --seeds "$(echo "$SEEDS" | tr ' ' ,)" --wall-s "$SECONDS"
