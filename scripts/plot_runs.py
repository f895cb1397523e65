"""Training curves of one or more runs side by side, in one PNG (QAE against DAPO, say).

    python scripts/plot_runs.py runs/tiny_qae runs/tiny_dapo --labels QAE DAPO --smooth 5 --out runs/qae_vs_dapo.png

Each run is the metrics.jsonl train.py writes (or the run folder holding it). One panel per
metric, against step, one line per run; by default reward/mean, reward/acc, policy/entropy,
adv/zero_frac and response/len_mean (logger.DEFAULT_PLOT; their meaning: logger.METRICS).

Choices, numbered:
1. Smoothing is a trailing mean over the last `--smooth` logged points (fewer at the start), so
   no point uses later steps; the raw curve is drawn faintly behind the smoothed one.
2. A value a run did not log, or logged as null or NaN, is left out of that run's line.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the flat modules at the repo root

from infra.logger import DEFAULT_PLOT, read_metrics  # noqa: E402


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last `window` values (choice 1).

    >>> smooth([1.0, 2.0, 3.0, 4.0], 2)
    [1.0, 1.5, 2.5, 3.5]
    """
    return [sum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def curve(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping steps that lack it (choice 2)."""
    points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [s for s, _ in points], [v for _, v in points]


def plot_runs(runs: dict[str, list[dict]], out_png: Path, keys=DEFAULT_PLOT, window: int = 1) -> None:
    """One panel per metric, one line per run (label -> metrics rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cols = min(3, len(keys))
    n_rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(4.0 * cols, 3.0 * n_rows), squeeze=False)
    for ax in axes.flat[len(keys) :]:
        ax.axis("off")
    for ax, key in zip(axes.flat, keys):
        for color, (label, rows) in enumerate(runs.items()):
            steps, values = curve(rows, key)
            if window > 1:
                ax.plot(steps, values, color=f"C{color}", alpha=0.25, linewidth=0.8)
            ax.plot(steps, smooth(values, window), color=f"C{color}", label=label, linewidth=1.4)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=8)
    if window > 1:
        fig.suptitle(f"trailing mean over {window} steps (raw faint)", fontsize=8)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)


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
