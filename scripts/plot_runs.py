"""Training curves of one or more runs side by side, in one PNG (QAE against DAPO, say).

    python scripts/plot_runs.py runs/tiny_qae runs/tiny_dapo --labels QAE DAPO --smooth 5 --out runs/qae_vs_dapo.png

Each run is the metrics.jsonl train.py writes (or the run folder holding it). The panels are those
of a run's own metrics.png, one colour per run (infra/plots.py, whose choices apply): by default
held-out pass@1 and pass@k against the training steps behind the evaluated weights, then
reward/mean, reward/acc, policy/entropy, adv/zero_frac and response/len_mean against step
(plots.DEFAULT_PLOT; their meaning: logger.METRICS), each a trailing mean over `--smooth` steps
drawn over the faint raw points (1 = raw lines only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the flat modules at the repo root

from infra.logger import read_metrics  # noqa: E402
from infra.plots import DEFAULT_PLOT, plot_metrics  # noqa: E402


def plot_runs(runs: dict[str, list[dict]], out_png: Path, keys=DEFAULT_PLOT, window: int = 1) -> None:
    """One panel per metric, one colour per run (label -> metrics rows)."""
    out_png.parent.mkdir(parents=True, exist_ok=True)
    plot_metrics(runs, out_png, keys, window)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Training curves of runs side by side (see the module docstring).")
    p.add_argument("runs", nargs="+", help="metrics.jsonl files, or run folders holding one")
    p.add_argument("--labels", nargs="+", help="one label per run (default: the run folder's name)")
    p.add_argument("--keys", nargs="+", default=list(DEFAULT_PLOT), help="metrics to plot, one panel each")
    p.add_argument("--smooth", type=int, default=1, help="trailing-mean window in logged steps (1 = raw)")
    p.add_argument("--out", default="runs/compare.png", help="PNG to write")
    args = p.parse_args(argv)
    paths = [Path(r) / "metrics.jsonl" if Path(r).is_dir() else Path(r) for r in args.runs]
    labels = args.labels or [path.parent.name for path in paths]
    problems = [f"run `{path}` not found (give a metrics.jsonl or a run folder holding one)"
                for path in paths if not path.is_file()]
    if len(labels) != len(paths):
        problems.append(f"--labels gives {len(labels)} labels for {len(paths)} runs")
    if len(set(labels)) != len(labels):
        problems.append(f"runs share a label ({', '.join(labels)}): give one each with --labels")
    if args.smooth < 1:
        problems.append(f"--smooth must be >= 1, got {args.smooth}")
    if problems:
        print(f"error: {problems[0]}", file=sys.stderr)
        sys.exit(2)
    plot_runs({label: read_metrics(path) for label, path in zip(labels, paths)}, Path(args.out), args.keys, args.smooth)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
