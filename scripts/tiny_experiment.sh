#!/usr/bin/env bash
# The CPU-scale QAE-versus-DAPO experiment of docs/tiny_experiment.md, end to end:
#
#     bash scripts/tiny_experiment.sh            # SEEDS="1 2 3" by default; about 20 min on 2 idle cores
#
# For each seed, tiny_qae and tiny_dapo train from the same committed policy (tiny/model) with
# the same data order and sampling seeds; the two configs differ only in algorithm.K. Each final
# checkpoint, and the starting policy, is then evaluated by eval.py on all 500 held-out problems
# of tiny/test.jsonl (n = 8 samples, T = 1.0 as in training). Writes, under runs/tiny_experiment/:
# one run folder per (method, seed), eval/<name>/results.json, curves.png and summary.md; and
# docs/tiny_experiment/curves.png.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-"1 2 3"}
OUT=${OUT:-runs/tiny_experiment}
EVAL=(--benchmarks tiny/test.jsonl --limit 500 --n 8 --temperature 1.0 --top-p 1.0 --seed 0)
mkdir -p "$OUT/eval"
export WANDB_SILENT=true

for seed in $SEEDS; do
  for method in qae dapo; do
    run="$OUT/${method}_seed$seed"
    if [ ! -f "$run/checkpoints/step_000040/trainer_state.pt" ]; then
      rm -rf "$run"
      "$PY" train.py --config "tiny_$method.yaml" "trainer.seed=$seed" "trainer.output_dir=$run" trainer.save_every=0
    fi
    [ -f "$OUT/eval/${method}_seed$seed/results.json" ] ||
      "$PY" eval.py --config "tiny_$method.yaml" --model "$run/checkpoints/step_000040/model" "${EVAL[@]}" --out "$OUT/eval/${method}_seed$seed"
  done
done
[ -f "$OUT/eval/start/results.json" ] ||
  "$PY" eval.py --config tiny_qae.yaml --model tiny/model "${EVAL[@]}" --out "$OUT/eval/start"

runs=(); labels=()
for seed in $SEEDS; do for method in qae dapo; do runs+=("$OUT/${method}_seed$seed"); labels+=("${method^^} seed $seed"); done; done
"$PY" scripts/plot_runs.py "${runs[@]}" --labels "${labels[@]}" --smooth 5 --out "$OUT/curves.png"
mkdir -p docs/tiny_experiment  # the committed figure: the same plot with a 64-colour palette (~75 KB)
"$PY" -c "from PIL import Image; Image.open('$OUT/curves.png').convert('RGB').quantize(colors=64).save('docs/tiny_experiment/curves.png', optimize=True)"

"$PY" - "$OUT" $SEEDS <<'EOF'
"""summary.md: per run, the training-curve averages and the held-out pass@k."""
import json, statistics, sys
from pathlib import Path

out, seeds = Path(sys.argv[1]), sys.argv[2:]
def rows(run): return [json.loads(line) for line in (out / run / "metrics.jsonl").read_text().splitlines()]
def mean(rs, key): return statistics.fmean(r[key] for r in rs)
def test(name):  # the one benchmark's metrics
    return next(iter(json.loads((out / "eval" / name / "results.json").read_text())["benchmarks"].values()))["metrics"]

lines = ["| run | reward first 10% -> last 10% of steps | entropy first 10% -> last 10% | entropy min / max | "
         "zero-adv fraction | test pass@1 | test pass@8 |", "|---|---|---|---|---|---|---|"]
start = test("start")
lines.append(f"| starting policy | | | | | {start['pass@1']:.3f} | {start['pass@8']:.3f} |")
for seed in seeds:
    for method in ("qae", "dapo"):
        rs, name = rows(f"{method}_seed{seed}"), f"{method}_seed{seed}"
        k = max(1, len(rs) // 10)
        ent = [r["policy/entropy"] for r in rs]
        t = test(name)
        lines.append(f"| {method.upper()} seed {seed} | {mean(rs[:k], 'reward/mean'):+.3f} -> {mean(rs[-k:], 'reward/mean'):+.3f} | "
                     f"{mean(rs[:k], 'policy/entropy'):.3f} -> {mean(rs[-k:], 'policy/entropy'):.3f} | {min(ent):.3f} / {max(ent):.3f} | "
                     f"{mean(rs, 'adv/zero_frac'):.3f} | {t['pass@1']:.3f} | {t['pass@8']:.3f} |")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
