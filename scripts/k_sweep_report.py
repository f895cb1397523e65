r"""The K sweep's figure and tables (docs/tiny_experiment.md, "Entropy against K"), from the runs
scripts/k_sweep.sh trains:

    python scripts/k_sweep_report.py runs/k_sweep --doc docs/tiny_experiment.md \
        --figure docs/tiny_experiment/k_sweep.png

Reads every run folder under the sweep folder (metrics.jsonl, config.yaml, eval_final/results.json)
and the starting policy's evaluation (eval_start/results.json). A run's baseline and seed come
from its resolved config.yaml (algorithm.baseline, algorithm.K, trainer.seed), not from its
folder's name. Writes:
- the figure: one panel per metric of PANELS against step; per baseline the mean over seeds
  (line) and the smallest to largest seed (band), each seed's curve first smoothed;
- two markdown tables, put into the doc between BEGIN and END (the lines in between are
  replaced, so the doc shows what the last run of the report wrote):
  1. per seed, the second-half mean entropy of every baseline and the Spearman rank correlation
     between K and that entropy over the quantile runs (the mean baseline is reported beside it,
     not ranked: it has no K);
  2. per baseline, mean +- standard deviation over seeds of the second-half means of entropy (and
     by advantage sign), zero-advantage and hard-prompt fractions, the entropy-covariance parts,
     accuracy and length, and the held-out pass@1 / pass@n of the final policy.

Choices, numbered:
1. "Second half" = steps n // 2 + 1 .. n of an n-step run (51-100 of 100): past the warm-start
   transient, in which entropy falls from ~0.3 to ~0.1 within ~20 steps under every baseline.
   "Peak" = the largest smoothed value after the first fifth of the steps (a surge shows there).
2. Spearman's rho = the Pearson correlation of the ranks, tied values given their mean rank
   (as scipy.stats.spearmanr); nan when either side is constant. With four K values a seed's rho
   is one of few values (1.0, 0.8, 0.6, 0.4, 0.2, 0.0, ...; 1.0 has chance 1/24 under no effect).
3. Spread over seeds: the sample standard deviation (divisor n - 1); 0 for a single seed.
4. A value a run logged as null or NaN (policy/entropy_zero has no tokens under the mean baseline,
   which gives no response exactly zero advantage) is left out of that run's means.
5. Smoothing is infra.plots.smooth (a trailing mean, so no point uses later steps); the band is
   drawn over the steps every seed of a baseline logged.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: infra.plots
from infra.plots import curve, smooth  # noqa: E402

BEGIN, END = "<!-- k_sweep:begin -->", "<!-- k_sweep:end -->"
PANELS = ("policy/entropy", "policy/entropy_pos", "policy/entropy_neg", "entropy_cov/pos",
          "reward/acc", "response/len_mean", "adv/zero_frac", "adv/hard_frac")


@dataclasses.dataclass
class Run:
    """One training run of the sweep."""

    name: str
    """its folder's name (for messages only)"""
    K: float | None
    """the quantile baseline's K, or None for the mean baseline"""
    seed: int
    """trainer.seed: data order and sampling seeds, shared by every baseline"""
    rows: list[dict]
    """metrics.jsonl, one dict per step"""
    test: dict | None
    """eval_final/results.json's metrics of its one benchmark (pass@1, pass@n, n, ...), or None"""


def label(K: float | None) -> str:
    return "mean (DAPO)" if K is None else f"K = {K:g}"


def test_metrics(results_json: Path) -> dict | None:
    """The metrics of the one benchmark in an eval.py results.json, or None if it is missing."""
    if not results_json.is_file():
        return None
    benchmarks = json.loads(results_json.read_text())["benchmarks"]
    return next(iter(benchmarks.values()))["metrics"]


def load_runs(sweep: Path) -> list[Run]:
    """Every run folder under `sweep` (one holding metrics.jsonl and config.yaml)."""
    runs = []
    for metrics in sorted(sweep.glob("*/metrics.jsonl")):
        cfg = yaml.safe_load((metrics.parent / "config.yaml").read_text())
        algo = cfg["algorithm"]
        if algo["baseline"] not in ("mean", "quantile"):
            raise SystemExit(f"error: run {metrics.parent} has algorithm.baseline {algo['baseline']!r}; "
                             "the sweep compares `mean` and `quantile` only")
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        runs.append(Run(metrics.parent.name, algo["K"] if algo["baseline"] == "quantile" else None,
                        cfg["trainer"]["seed"], rows, test_metrics(metrics.parent / "eval_final" / "results.json")))
    if not runs:
        raise SystemExit(f"error: no run folders (metrics.jsonl + config.yaml) under {sweep}; "
                         "run scripts/k_sweep.sh first")
    return runs


# ----------------------------------------------------------------------------------------------
# Numbers
# ----------------------------------------------------------------------------------------------


def finite_mean(values) -> float:
    """Mean of the finite values (choice 4); nan if there are none."""
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.fmean(values) if values else math.nan


def second_half(rows: list[dict], key: str) -> float:
    """Mean of `key` over steps n // 2 + 1 .. n (choice 1).

    >>> second_half([{"x": 1.0}, {"x": 2.0}, {"x": 4.0}, {"x": 6.0}], "x")
    5.0
    """
    return finite_mean(r.get(key) for r in rows[len(rows) // 2 :])


def peak(rows: list[dict], key: str, window: int) -> float:
    """Largest trailing-mean value of `key` after the first fifth of the steps (choice 1)."""
    steps, values = curve(rows, key)
    late = [v for s, v in zip(steps, smooth(values, window)) if s > len(rows) // 5]
    return max(late) if late else math.nan


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties given their mean rank (choice 2).

    >>> ranks([0.3, 0.1, 0.3, 0.2])
    [3.5, 1.0, 3.5, 2.0]
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation: Pearson's r of the ranks (choice 2).

    >>> spearman([0.2, 0.4, 0.6, 0.8], [0.10, 0.12, 0.11, 0.13])  # 1 - 6 * (0+1+1+0) / (4 * 15)
    0.8
    """
    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return round(sxy / math.sqrt(sxx * syy), 12) if sxx and syy else math.nan


def spread(values: list[float]) -> tuple[float, float]:
    """(mean, sample standard deviation) over seeds (choice 3)."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def pm(values: list[float], digits: int = 3) -> str:
    mean, sd = spread(values)
    return "n/a" if math.isnan(mean) else f"{mean:.{digits}f} ± {sd:.{digits}f}"


# ----------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------


def by_baseline(runs: list[Run]) -> dict[float | None, list[Run]]:
    """Runs grouped by K (None = mean baseline), quantile runs in increasing K, the mean last; seeds sorted."""
    keys = sorted({r.K for r in runs if r.K is not None}) + ([None] if any(r.K is None for r in runs) else [])
    return {K: sorted((r for r in runs if r.K == K), key=lambda r: r.seed) for K in keys}


def seed_table(runs: list[Run]) -> str:
    """Table 1: second-half entropy per seed and baseline, Spearman rho(K, entropy) per seed."""
    groups = by_baseline(runs)
    Ks = [K for K in groups if K is not None]
    seeds = sorted({r.seed for r in runs})
    H = {(r.K, r.seed): second_half(r.rows, "policy/entropy") for r in runs}
    head = ["seed", *(label(K) for K in Ks), "Spearman ρ(K, entropy)"]
    head += [label(None)] if None in groups else []
    head += ["mean − (K = 0.4)"] if None in groups and 0.4 in Ks else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rhos = []
    for seed in seeds + ["mean over seeds"]:
        if seed == "mean over seeds":
            ent = {K: finite_mean(H.get((K, s), math.nan) for s in seeds) for K in groups}
        else:
            ent = {K: H.get((K, seed), math.nan) for K in groups}
        have = [K for K in Ks if math.isfinite(ent[K])]
        rho = spearman(have, [ent[K] for K in have]) if len(have) >= 2 else math.nan
        if seed != "mean over seeds":
            rhos.append(rho)
        cells = [str(seed), *(f"{ent[K]:.4f}" for K in Ks), "n/a" if math.isnan(rho) else f"{rho:+.2f}"]
        if None in groups:
            cells.append(f"{ent[None]:.4f}")
            if 0.4 in Ks:
                cells.append(f"{ent[None] - ent[0.4]:+.4f}")
        lines.append("| " + " | ".join(cells) + " |")
    finite = [r for r in rhos if math.isfinite(r)]
    note = (f"\nPer-seed ρ: {', '.join(f'{r:+.2f}' for r in rhos)}; mean {statistics.fmean(finite):+.2f} "
            "(ρ = +1 means entropy rises strictly with K).") if finite else ""
    return "\n".join(lines) + "\n" + note + "\n"


def baseline_table(runs: list[Run], start: dict | None) -> str:
    """Table 2: per baseline, mean ± std over seeds of each run's second-half means and final pass@k."""
    groups = by_baseline(runs)
    n = next((r.test["n"] for r in runs if r.test), None)
    head = ["baseline", "seeds", "entropy, 2nd half", "entropy peak after first fifth", "entropy A>0 / A<0, 2nd half",
            "zero-adv frac", "hard frac", "entropy_cov pos / neg", "acc, 2nd half", "len, 2nd half",
            "test pass@1", f"test pass@{n}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if start:
        cells = ["starting policy", *[""] * (len(head) - 3), f"{start['pass@1']:.3f}", f"{start[f'pass@{n}']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    for K, group in groups.items():
        def half(key: str, group=group) -> list[float]:  # one value per seed
            return [second_half(r.rows, key) for r in group]

        tests = [r.test for r in group if r.test]
        cells = [label(K), ",".join(str(r.seed) for r in group), pm(half("policy/entropy"), 4),
                 pm([peak(r.rows, "policy/entropy", 5) for r in group]),
                 f"{pm(half('policy/entropy_pos'))} / {pm(half('policy/entropy_neg'))}",
                 pm(half("adv/zero_frac"), 2), pm(half("adv/hard_frac"), 2),
                 f"{pm(half('entropy_cov/pos'))} / {pm(half('entropy_cov/neg'))}",
                 pm(half("reward/acc")), pm(half("response/len_mean"), 1),
                 pm([t["pass@1"] for t in tests]), pm([t[f"pass@{n}"] for t in tests])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def provenance(runs: list[Run], wall_s: float | None, load_file: Path | None, trained: int | None) -> str:
    """One line: when, how many runs and steps, and (when given) the wall time and the machine's load."""
    steps = sorted({len(r.rows) for r in runs})
    parts = [(f"Written {datetime.now(UTC):%Y-%m-%d} by scripts/k_sweep_report.py from {len(runs)} runs "
              f"of {'/'.join(map(str, steps))} steps")]
    if wall_s is not None:
        reused = (f" ({len(runs) - trained} reused from an earlier call)"
                  if trained is not None and trained < len(runs) else "")
        took = f"{wall_s / 60:.1f} min" if wall_s >= 60 else f"{wall_s:.0f} s"
        parts.append(f"`bash scripts/k_sweep.sh` took {took}"
                     + (f" and trained {trained} of them{reused}" if trained is not None else ""))
    if load_file and load_file.is_file():
        load = [float(line.split()[1]) for line in load_file.read_text().splitlines() if line.strip()]
        if load:
            parts.append(f"1-minute load average during it {statistics.fmean(load):.1f} on average, "
                         f"{min(load):.1f}-{max(load):.1f} (sampled every 30 s, {len(load)} samples)")
    return "; ".join(parts) + "."


def replace_block(doc: str, block: str) -> str:
    """`doc` with the lines between BEGIN and END replaced by `block`."""
    if doc.count(BEGIN) != 1 or doc.count(END) != 1 or doc.index(BEGIN) > doc.index(END):
        raise SystemExit(f"error: the doc needs one `{BEGIN}` line followed by one `{END}` line "
                         "where the K-sweep tables go; add them")
    head, rest = doc.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block.strip()}\n{END}{tail}"


# ----------------------------------------------------------------------------------------------
# Figure
# ----------------------------------------------------------------------------------------------


def plot(runs: list[Run], out_png: Path, window: int) -> None:
    """One panel per PANELS metric; per baseline the seeds' mean (line) and min-max (band) (choice 5)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    groups = by_baseline(runs)
    Ks = [K for K in groups if K is not None]
    colors = {K: plt.cm.viridis(0.9 * i / max(len(Ks) - 1, 1)) for i, K in enumerate(Ks)} | {None: "crimson"}
    n_steps = max(len(r.rows) for r in runs)
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.6))
    for ax, key in zip(axes.flat, PANELS):
        for K, group in groups.items():
            curves = [dict(zip(s, smooth(v, window))) for s, v in (curve(r.rows, key) for r in group)]
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            if not steps:
                continue
            values = [[c[s] for c in curves] for s in steps]  # (steps, seeds)
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], color=colors[K],
                            alpha=0.18, lw=0)
            ax.plot(steps, [statistics.fmean(v) for v in values], color=colors[K], lw=1.4, label=label(K))
        ax.axvline(n_steps // 2 + 0.5, color="grey", lw=0.6, ls=":")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7)
    seeds = sorted({r.seed for r in runs})
    fig.suptitle(f"K sweep, seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}: mean over seeds (line), "
                 f"smallest to largest seed (band); each seed a trailing mean over {window} steps; "
                 "dotted: start of the second half", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=90)
    plt.close(fig)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    Image.open(buf).convert("RGB").quantize(colors=64).save(out_png, optimize=True)  # a committed figure: ~100 KB


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="The K sweep's figure and tables (see the module docstring).")
    p.add_argument("sweep", help="folder of run folders, e.g. runs/k_sweep")
    p.add_argument("--doc", help="markdown file whose k_sweep block is replaced (default: print the tables)")
    p.add_argument("--figure", help="PNG to write (default: <sweep>/k_sweep.png)")
    p.add_argument("--smooth", type=int, default=5, help="trailing-mean window of the figure, in steps")
    p.add_argument("--wall-s", type=float, help="wall time of the sweep command, quoted in the tables' note")
    p.add_argument("--load", help="load samples ('epoch load1 load5 load15' per line), quoted in the note")
    p.add_argument("--trained", type=int, help="runs trained by this call of the sweep (the rest reused)")
    args = p.parse_args(argv)
    sweep = Path(args.sweep)
    runs = load_runs(sweep)
    start = test_metrics(sweep / "eval_start" / "results.json")
    block = "\n".join([
        "Second-half mean entropy (`policy/entropy`, steps n/2+1..n) per seed and baseline:", "",
        seed_table(runs),
        ("Per baseline, mean ± standard deviation over seeds (second-half means; test = the final policy "
         "on tiny/test.jsonl):"), "",
        baseline_table(runs, start),
        provenance(runs, args.wall_s, Path(args.load) if args.load else None, args.trained)])
    new_doc = replace_block(Path(args.doc).read_text(), block) if args.doc else None  # fails before the figure
    figure = Path(args.figure) if args.figure else sweep / "k_sweep.png"
    plot(runs, figure, args.smooth)
    (sweep / "k_sweep.md").write_text(block + "\n")
    if args.doc:
        Path(args.doc).write_text(new_doc)
    print(block)
    print(f"wrote {figure}, {sweep / 'k_sweep.md'}" + (f", {args.doc}" if args.doc else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
