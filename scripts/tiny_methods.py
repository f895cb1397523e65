"""Table 2's methods at CPU scale (docs/tiny_methods.md): each policy loss of Table 2 with the mean baseline and
with QAE, on the tiny task as the demo trains it, and a table of what each run did.

    python scripts/tiny_methods.py                    # trains what is missing under runs/tiny_methods, writes the doc
    python scripts/tiny_methods.py --table-only       # the table from the runs already there

A run is `train.py --config tiny_dapo.yaml` (mean baseline) or `tiny_qae.yaml` (QAE) with the policy loss and its
settings of the method's paper-scale config (`policy_loss_overrides`: clip-higher from configs/qwen3_8b_qae.yaml,
Clip-Cov and KL-Cov from their Qwen3-8B-Base configs, GSPO from configs/qwen3_30b_a3b_gspo_qae.yaml), so the tiny
run exercises exactly the settings the GPU run would. One seed each (trainer.seed 1, the demo's): this shows that
each method runs and does what its metrics say on a 0.6M-parameter model; it is no claim about the paper's numbers.
About 5 minutes on 2 idle cores for the eight runs.

The table (between the doc's BEGIN and END lines, which it replaces): held-out pass@1 at step 0 (the starting
policy) and after the last step, pass@4 after it, the training accuracy of the first and last 10% of steps, the
mean entropy and zero-advantage fraction over the run, and the method's own loss metrics (loss.POLICY_LOSSES'
`metrics`), each averaged over the steps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import config  # noqa: E402 - the repo's root, put on the path above
import loss  # noqa: E402

METHODS = {"clip-higher": "qwen3_8b_qae.yaml", "clip-cov": "qwen3_8b_clip_cov_qae.yaml",
           "kl-cov": "qwen3_8b_kl_cov_qae.yaml", "gspo": "qwen3_30b_a3b_gspo_qae.yaml"}
BASELINES = {"mean": "tiny_dapo.yaml", "QAE": "tiny_qae.yaml"}
BEGIN, END = "<!-- BEGIN tiny_methods table -->", "<!-- END tiny_methods table -->"


def policy_loss_overrides(config_name: str) -> list[str]:
    """The policy loss, its aggregation and every loss setting of a config, as `algorithm.key=value` overrides."""
    algo = config.load(config_name).algorithm
    value = lambda v: "null" if v is None else v  # noqa: E731
    return [f"algorithm.{k}={value(getattr(algo, k))}" for k in ("policy_loss", "loss_agg", *loss.SETTINGS)]


def train(run: Path, method: str, baseline: str) -> None:
    """Train one run unless its metrics hold the last step."""
    if run.joinpath("metrics.jsonl").exists() and '"step": 40' in run.joinpath("metrics.jsonl").read_text():
        return
    subprocess.run(["rm", "-rf", str(run)], check=True)
    subprocess.run([sys.executable, "train.py", "--config", BASELINES[baseline], f"trainer.output_dir={run}",
                    "trainer.save_every=0", *policy_loss_overrides(METHODS[method])], cwd=ROOT, check=True)


def mean(values: list) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def summary(rows: list[dict], method: str) -> dict:
    """One run's row of the table, from its metrics.jsonl rows."""
    tenth = max(1, len(rows) // 10)
    evals = [r for r in rows if "eval/test/pass@1" in r]
    own = loss.POLICY_LOSSES[method].metrics
    return {"pass@1 start": evals[0]["eval/test/pass@1"], "pass@1 end": evals[-1]["eval/test/pass@1"],
            "pass@4 end": evals[-1]["eval/test/pass@4"],
            "acc first": mean([r["reward/acc"] for r in rows[:tenth]]),
            "acc last": mean([r["reward/acc"] for r in rows[-tenth:]]),
            "entropy": mean([r["policy/entropy"] for r in rows]), "zero adv": mean([r["adv/zero_frac"] for r in rows]),
            **{f"loss/{m}": mean([r[f"loss/{m}"] for r in rows]) for m in own}}


def table(runs: Path) -> str:
    """The markdown table of every run under `runs` (<method>_<baseline>/metrics.jsonl)."""
    lines = ["| method | baseline | held-out pass@1, step 0 -> 40 | pass@4, step 40 | train acc, first -> last 10% "
             "| entropy | A = 0 | the method's own metrics, mean over steps |", "|---|---|---|---|---|---|---|---|"]
    for method in METHODS:
        for baseline in BASELINES:
            path = runs / f"{method}_{baseline}" / "metrics.jsonl"
            if not path.exists():
                continue
            s = summary([json.loads(line) for line in path.read_text().splitlines()], method)
            own = ", ".join(f"{k[5:]} {v:.3g}" for k, v in s.items() if k.startswith("loss/"))
            lines.append(f"| {method} | {baseline} | {s['pass@1 start']:.3f} -> {s['pass@1 end']:.3f} | "
                         f"{s['pass@4 end']:.3f} | {s['acc first']:.3f} -> {s['acc last']:.3f} | {s['entropy']:.3f} | "
                         f"{s['zero adv']:.2f} | {own} |")
    return "\n".join(lines)


def put_into(doc: Path, text: str) -> None:
    """Replace the lines between BEGIN and END of `doc` with `text`."""
    head, rest = doc.read_text().split(BEGIN, 1)
    doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/tiny_methods", help="folder of the runs")
    parser.add_argument("--doc", default="docs/tiny_methods.md", help="the doc whose table is replaced")
    parser.add_argument("--table-only", action="store_true", help="write the table from the runs there, train none")
    args = parser.parse_args(argv)
    runs = ROOT / args.out
    if not args.table_only:
        for method in METHODS:
            for baseline in BASELINES:
                train(runs / f"{method}_{baseline}", method, baseline)
    text = table(runs)
    put_into(ROOT / args.doc, text)
    print(text)


if __name__ == "__main__":
    main()
