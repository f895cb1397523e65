"""Runs' metrics as one PNG: the run's `metrics.png` (MetricsLogger.close) and scripts/plot_runs.py.

The first panel is the result, held-out pass@1 and pass@k (HELD_OUT) against the training steps
behind the evaluated weights; the others are per-step metrics (METRICS in infra/logger.py), noisy,
so each is drawn as a trailing mean over faint raw points.

    plot_metrics({"qae": rows, "dapo": rows}, "cmp.png", keys=DEFAULT_PLOT, window=5)

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. An evaluation is placed at `eval/trained_steps`, the optimizer-step count of the weights it scored
   (0 for the starting policy), not at the step whose row logs it; pass@k is the largest k logged.
2. Smoothing is a trailing mean over the last `window` logged points (fewer at the start), so no
   point uses later steps; evaluations are few and are drawn unsmoothed, every point marked.
3. A value a run did not log, or logged as null or NaN, is left out of that run's line.
"""

from __future__ import annotations

import math
import re

HELD_OUT = "eval/pass@k"  # the held-out panel: every benchmark's pass@1 and largest pass@k (choice 1)
DEFAULT_PLOT = (HELD_OUT, "reward/mean", "reward/acc", "policy/entropy", "adv/zero_frac", "response/len_mean")
SMOOTH = 5  # metrics.png's trailing-mean window, in logged steps (choice 2)


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last `window` values (choice 2).

    >>> smooth([1.0, 2.0, 3.0, 4.0], 2)
    [1.0, 1.5, 2.5, 3.5]
    """
    return [sum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def curve(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one per-step metric, skipping steps that lack it (choice 3)."""
    points = [(r["step"], r[key]) for r in rows if finite(r.get(key))]
    return [s for s, _ in points], [v for _, v in points]


def held_out_curves(rows: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """"<benchmark> pass@<k>" -> (trained steps, values) for pass@1 and the largest k of each benchmark
    (choice 1).

    >>> rows = [{"step": 1, "eval/trained_steps": 0, "eval/t/pass@1": .3, "eval/t/pass@2": .4, "eval/t/pass@4": .5},
    ...         {"step": 2}, {"step": 3, "eval/trained_steps": 3, "eval/t/pass@1": .4, "eval/t/pass@4": .6}]
    >>> held_out_curves(rows)
    {'t pass@1': ([0, 3], [0.3, 0.4]), 't pass@4': ([0, 3], [0.5, 0.6])}
    """
    ks: dict[str, set[int]] = {}  # benchmark -> the k of its logged pass@k
    for r in rows:
        for key in r:
            if m := re.fullmatch(r"eval/(.+)/pass@(\d+)", key):
                ks.setdefault(m[1], set()).add(int(m[2]))
    evals = [r for r in rows if "eval/trained_steps" in r]
    curves = {}
    for bench, logged in sorted(ks.items()):
        for k in sorted({1, max(logged)} & logged):
            points = [(r["eval/trained_steps"], r[f"eval/{bench}/pass@{k}"]) for r in evals
                      if finite(r.get(f"eval/{bench}/pass@{k}"))]
            curves[f"{bench} pass@{k}"] = ([s for s, _ in points], [v for _, v in points])
    return curves


def plot_metrics(runs: dict[str, list[dict]], out_png, keys=DEFAULT_PLOT, window: int = SMOOTH):
    """One panel per key (HELD_OUT: the held-out panel), one colour per run (label -> metrics rows).
    Writes `out_png`; returns the (closed) matplotlib figure, its axes in the order of `keys`."""
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
            if key == HELD_OUT:
                for name, (steps, values) in held_out_curves(rows).items():
                    style = "-" if name.endswith("pass@1") else "--"
                    ax.plot(steps, values, style, marker="o", markersize=3, color=f"C{color}", linewidth=1.4,
                            label=f"{label}: {name}" if len(runs) > 1 else name)
                continue
            steps, values = curve(rows, key)
            if window > 1:
                ax.plot(steps, values, ".", color=f"C{color}", alpha=0.3, markersize=3)
            ax.plot(steps, smooth(values, window), color=f"C{color}", label=label, linewidth=1.4)
        held_out = key == HELD_OUT
        ax.set_title("held-out pass@1 (solid), pass@k (dashed)" if held_out else key, fontsize=9)
        ax.set_xlabel("training steps behind the evaluated weights" if held_out else "step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        if held_out and ax.lines:
            ax.legend(fontsize=7)
        elif held_out:
            ax.text(0.5, 0.5, "no held-out evaluation\n(eval.every = 0)", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8)
    per_step = [ax for ax, key in zip(axes.flat, keys) if key != HELD_OUT]
    if per_step and len(runs) > 1:
        per_step[0].legend(fontsize=8)
    if window > 1:
        fig.suptitle(f"per-step metrics: trailing mean over {window} steps over the raw points (faint)", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return fig
