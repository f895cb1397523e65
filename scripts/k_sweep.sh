#!/usr/bin/env bash
# The CPU-scale K sweep of docs/tiny_experiment.md ("Entropy against K"), end to end:
#
#     bash scripts/k_sweep.sh        # measured: 34 min on 2 cores that other jobs kept at a load average of ~5
#
# Trains 15 runs from the committed tiny policy (tiny/model): the quantile baseline at
# K = 0.2, 0.4, 0.6, 0.8 and the mean baseline (DAPO), seeds 1, 2, 3. Every run uses
# configs/tiny_qae.yaml with the same overrides (below); runs differ ONLY in
# algorithm.baseline / algorithm.K, and for a given seed they share the data order and the
# sampling seeds (trainer.seed). Each final policy, and the starting one, is evaluated by
# eval.py on the first 100 problems of tiny/test.jsonl (n = 8, T = 1.0, top_p = 1.0, the
# training sampler). scripts/k_sweep_report.py then writes docs/tiny_experiment/k_sweep.png
# and the tables between the k_sweep markers of docs/tiny_experiment.md.
#
# Choices, numbered:
# 1. The shape is the one the search in docs/tiny_experiment.md settled on (its block C/F):
#    G = 16 responses (the paper's), 8 prompts per step, one prompt per mini-batch -> 8
#    optimizer steps per rollout (the paper has 16), lr 1e-4 constant, 100 steps.
# 2. Two runs at a time, each on one thread (OMP_NUM_THREADS=1). Measured on this 2-core
#    machine under a load average of 5-7: one run with torch's default 2 threads took 22 s/step
#    (threads spin-waiting for a core), one single-threaded run 2.4 s/step, two single-threaded
#    runs side by side 3.2 s/step each (1.5x the throughput of one at a time). PAR=1 runs them
#    one after another.
# 3. Resumable: a run whose final checkpoint exists is not trained again, an evaluation whose
#    results.json exists is not run again; the report is always rewritten. Delete $OUT to redo.
# 4. The 1-minute load average is sampled every 30 s into $OUT/load.txt (this call's samples
#    only); the report quotes it with the wall time, since other jobs on a shared machine change
#    the time, not the results.
set -euo pipefail
cd "$(dirname "$0")/.."
export PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-"1 2 3"}
BASELINES=${BASELINES:-"mean 0.2 0.4 0.6 0.8"}  # "mean" = the group mean (DAPO); a number = the quantile baseline's K
export STEPS=${STEPS:-100}
PAR=${PAR:-2}
export OUT=${OUT:-runs/k_sweep}
export WANDB_SILENT=true OMP_NUM_THREADS=1 MKL_NUM_THREADS=1  # choice 2
mkdir -p "$OUT/logs"

# The one shape every run shares (choice 1). Only algorithm.baseline / algorithm.K are added per run.
export COMMON="rollout.n=16 trainer.train_batch_size=8 trainer.gen_batch_size=16 trainer.mini_batch_size=1 \
optim.lr=1e-4 trainer.total_steps=$STEPS eval.every=0 trainer.save_every=0 logging.num_completions=0"
export EVAL="--benchmarks tiny/test.jsonl --limit 100 --n 8 --temperature 1.0 --top-p 1.0 --seed 0"

: > "$OUT/load.txt"  # this call's samples only
(while true; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"; sleep 30; done) > /dev/null 2>&1 &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT  # choice 4
: > "$OUT/trained.txt"

run_one() {  # $1 = mean or K, $2 = seed: train (unless done), then evaluate the final policy
  local name run ckpt
  if [ "$1" = mean ]; then name="mean_seed$2"; set -- "$1" "$2" algorithm.baseline=mean algorithm.K=null algorithm.quantile_of=shaped
  else name="K$1_seed$2"; set -- "$1" "$2" algorithm.baseline=quantile "algorithm.K=$1"; fi
  run="$OUT/$name"
  ckpt="$run/checkpoints/step_$(printf %06d "$STEPS")"
  if [ ! -f "$ckpt/trainer_state.pt" ]; then
    rm -rf "$run"
    echo "$(date +%T) train $name" >&2
    # shellcheck disable=SC2086  # $COMMON is a list of overrides
    nice -n 5 "$PY" train.py --config tiny_qae.yaml $COMMON "trainer.seed=$2" "${@:3}" "trainer.output_dir=$run" \
      > "$OUT/logs/$name.log" 2>&1 || { echo "train $name failed: see $OUT/logs/$name.log" >&2; return 1; }
    echo "$name" >> "$OUT/trained.txt"
  fi
  if [ ! -f "$run/eval_final/results.json" ]; then
    # shellcheck disable=SC2086
    nice -n 5 "$PY" eval.py --config tiny_qae.yaml --model "$ckpt/model" $EVAL --out "$run/eval_final" \
      >> "$OUT/logs/$name.log" 2>&1 || { echo "eval $name failed: see $OUT/logs/$name.log" >&2; return 1; }
  fi
}
export -f run_one

# shellcheck disable=SC2086
[ -f "$OUT/eval_start/results.json" ] ||  # the starting policy, evaluated the same way
  nice -n 5 "$PY" eval.py --config tiny_qae.yaml --model tiny/model $EVAL --out "$OUT/eval_start" \
    > "$OUT/logs/eval_start.log" 2>&1
for seed in $SEEDS; do for base in $BASELINES; do echo "$base $seed"; done; done |
  xargs -P "$PAR" -n 2 bash -c 'run_one "$@"' _

"$PY" scripts/k_sweep_report.py "$OUT" --doc docs/tiny_experiment.md --figure docs/tiny_experiment/k_sweep.png \
  --wall-s "$SECONDS" --load "$OUT/load.txt" --trained "$(wc -l < "$OUT/trained.txt")"
