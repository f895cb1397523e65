"""The results of docs/smollm2_experiment.md from its runs: the pre-registered rule applied to each
run's probe entropy, per seed and overall, the figure, and the tables written into the doc.

    python scripts/smollm2_report.py runs/smollm2_experiment --doc docs/smollm2_experiment.md \
        --figure docs/smollm2_experiment.png

Reads RUN/probe.jsonl (scripts/probe_entropy.py) and RUN/metrics.jsonl of the runs `qae_seedS` and
`mean_seedS` under the folder given, and replaces what stands between the doc's results markers.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
ARMS = {"mean": "mean baseline (DAPO)", "qae": "K = 0.4 (QAE)"}


def outcome(entropy: dict[int, float]) -> str:
    """The rule of the doc's test: `surges`, `band` or `collapses`, from E(s) by step (step 0 = E0).

    >>> outcome({0: 0.2, 5: 0.25, 10: 0.41}), outcome({0: 0.2, 5: 0.3, 10: 0.39}), outcome({0: 0.2, 5: 0.09})
    ('surges', 'band', 'collapses')
    >>> outcome({0: 1.0, 5: 1.9, 10: 2.0}), outcome({0: 0.2, 5: 0.09, 10: 0.5})
    ('surges', 'surges')
    """
    e0 = entropy[0]
    ceiling = max(2 * e0, e0 + 0.2)
    later = [e for s, e in entropy.items() if s >= 5]
    if any(e >= ceiling for e in later):
        return "surges"
    return "band" if all(e >= 0.5 * e0 for e in later) else "collapses"


def pair(mean: str, qae: str) -> str:
    """One seed's pair: `supports`, `contradicts` or `neither`.

    >>> pair("surges", "band"), pair("band", "surges"), pair("surges", "surges"), pair("band", "collapses")
    ('supports', 'contradicts', 'neither', 'neither')
    """
    if mean == "surges" and qae == "band":
        return "supports"
    return "contradicts" if qae == "surges" and mean != "surges" else "neither"


def verdict(pairs: list[str], outcomes: list[tuple[str, str]]) -> str:
    """The doc's verdict over the seeds.

    >>> verdict(["supports", "supports", "neither"], [("surges", "band")] * 2 + [("band", "band")])
    'supported'
    >>> verdict(["neither"] * 3, [("band", "band")] * 3), verdict(["supports", "neither", "neither"], [])
    ('refuted', 'mixed')
    """
    if pairs.count("supports") >= 2 and "contradicts" not in pairs:
        return "supported"
    if pairs.count("contradicts") >= 2 or (outcomes and all(m == q for m, q in outcomes)):
        return "refuted"
    return "mixed"


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def cost(step_s: list[float]) -> str:
    """One arm's training time from its runs' `time/step` values: the median step and the total.

    >>> cost([100.0, 110.0, 200.0, 90.0])
    'median 105 s per step, 8.3 min over 4 steps'
    """
    return f"median {statistics.median(step_s):.0f} s per step, {sum(step_s) / 60:.1f} min over {len(step_s)} steps"


def secondary(rows: list[dict]) -> str:
    """One run's training metrics as table cells: batch entropy at the first step, its peak from step 5
    on (where the rule looks for a surge) and at the last step, the entropy covariance by advantage sign
    averaged over the steps, and the mean response length first -> last.

    >>> secondary([{"step": 1, "policy/entropy": 1.3, "entropy_cov/pos": 0.2, "entropy_cov/neg": 0.4,
    ...   "response/len_mean": 8.0}, {"step": 5, "policy/entropy": 0.4, "entropy_cov/pos": 0.0,
    ...   "entropy_cov/neg": -0.2, "response/len_mean": 6.0}, {"step": 6, "policy/entropy": 0.1,
    ...   "entropy_cov/pos": 0.1, "entropy_cov/neg": 0.1, "response/len_mean": 6.0}])
    '1.30, 0.40 (step 5), 0.10 | 0.100 / 0.100 | 8.0 -> 6.0'
    """
    ent = [(r["policy/entropy"], r["step"]) for r in rows]
    peak = max((e for e in ent if e[1] >= 5), default=(float("nan"), "-"))
    cov = {sign: statistics.mean(r[f"entropy_cov/{sign}"] for r in rows) for sign in ("pos", "neg")}
    return (f"{ent[0][0]:.2f}, {peak[0]:.2f} (step {peak[1]}), {ent[-1][0]:.2f} | "
            f"{cov['pos']:.3f} / {cov['neg']:.3f} | "
            f"{rows[0]['response/len_mean']:.1f} -> {rows[-1]['response/len_mean']:.1f}")


def tables(root: Path, seeds: list[int]) -> tuple[str, dict, dict]:
    """The markdown between the doc's markers, and the probe rows and the training metrics by
    (arm, seed) for the figure."""
    probes = {(arm, s): read(root / f"{arm}_seed{s}" / "probe.jsonl") for arm in ARMS for s in seeds}
    logged = {(arm, s): read(root / f"{arm}_seed{s}" / "metrics.jsonl") for arm in ARMS for s in seeds}
    metrics = {run: [r for r in rows if "policy/entropy" in r] for run, rows in logged.items()}
    lines = ["| seed | arm | E(s), s = 0, 5, ..., 30 (nats) | outcome | unclean at the end | probe acc, start -> end |",
             "|---|---|---|---|---|---|"]
    pairs, outcomes = {}, []
    for s in seeds:
        got = {}
        for arm in ARMS:
            rows = sorted(probes[(arm, s)], key=lambda r: r["step"])
            if not rows:
                continue
            got[arm] = outcome({r["step"]: r["entropy"] for r in rows})
            curve = ", ".join(f"{r['entropy']:.3f}" for r in rows)
            lines.append(f"| {s} | {ARMS[arm]} | {curve} | {got[arm]} | "
                         f"{rows[-1]['unclean']:.2f} | {rows[0]['acc']:.2f} -> {rows[-1]['acc']:.2f} |")
        if len(got) == 2:
            outcomes.append((got["mean"], got["qae"]))
            pairs[s] = pair(got["mean"], got["qae"])
    lines += ["", "Secondary, from train.py's metrics (the batch of each step):", "",
              "| seed | arm | batch entropy: step 1, peak from step 5, last | entropy_cov pos / neg, mean over steps "
              "| response length, first -> last |", "|---|---|---|---|---|"]
    lines += [f"| {s} | {ARMS[arm]} | {secondary(rows)} |" for s in seeds for arm in ARMS
              if (rows := metrics[(arm, s)])]
    step_s = {arm: [r["time/step"] for s in seeds for r in logged[(arm, s)] if "time/step" in r] for arm in ARMS}
    lines += ["", "Training time (the runs' `time/step`, two runs side by side on one thread each): "
              + "; ".join(f"{ARMS[arm]}: {cost(t)}" for arm, t in step_s.items() if t) + ".",
              "", "Per seed: " + ", ".join(f"seed {s}: {p}" for s, p in pairs.items()) + ".",
              f"Verdict under the rule fixed above: **{verdict(list(pairs.values()), outcomes)}**."
              if len(pairs) == len(seeds) else
              f"Verdict: not yet decided, {len(pairs)} of {len(seeds)} seeds complete (the rule needs them all)."]
    return "\n".join(lines), probes, metrics


def figure(probes: dict, metrics: dict, path: Path) -> None:
    """Top: probe entropy, junk tails and probe accuracy against checkpoint step; bottom: the batch
    entropy and the entropy covariance by advantage sign against training step. Each arm's mean over
    seeds as a line, the band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(probes, "entropy", "probe entropy (nats)"), (probes, "unclean", "share not ending after the answer"),
              (probes, "acc", "probe accuracy"), (metrics, "policy/entropy", "batch entropy (nats)"),
              (metrics, "entropy_cov/pos", "entropy_cov, positive advantages"),
              (metrics, "entropy_cov/neg", "entropy_cov, negative advantages")]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (source, key, title) in zip(axes.flat, panels):
        for arm, label in ARMS.items():
            runs = [rows for (a, _), rows in source.items() if a == arm and rows]
            steps = sorted({r["step"] for rows in runs for r in rows})
            vals = [[r[key] for rows in runs for r in rows if r["step"] == s] for s in steps]
            ax.plot(steps, [sum(v) / len(v) for v in vals], marker="o" if source is probes else None, label=label)
            ax.fill_between(steps, [min(v) for v in vals], [max(v) for v in vals], alpha=0.2)
        ax.set_title(title)
        ax.set_xlabel("step")
    e0 = [r["entropy"] for rows in probes.values() for r in rows if r["step"] == 0]
    if e0:  # the rule's floor; the ceiling, max(2 E0, E0 + 0.2), is off the chart unless a run surges
        axes[0, 0].axhline(0.5 * statistics.mean(e0), color="grey", linestyle="--", label="0.5 E0: below collapses")
    axes[0, 0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--doc", type=Path, required=True)
    parser.add_argument("--figure", type=Path, required=True)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--wall-s", type=float, default=None, help="the experiment's wall time, quoted in the doc")
    args = parser.parse_args(argv)
    text, probes, metrics = tables(args.root, [int(s) for s in args.seeds.split(",")])
    figure(probes, metrics, args.figure)
    wall = (f"\n\nWall time of the last `bash scripts/smollm2_experiment.sh`: {args.wall_s / 60:.0f} min (one that "
            "resumed counts only its own part)." if args.wall_s else "")
    doc = args.doc.read_text()
    head, rest = doc.split(BEGIN, 1)
    args.doc.write_text(f"{head}{BEGIN}\n![probe entropy]({args.figure.name})\n\n{text}{wall}\n{END}"
                        f"{rest.split(END, 1)[1]}")


if __name__ == "__main__":
    main()
