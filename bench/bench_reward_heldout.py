"""The verify mode's accuracy on held-out sets of real completions, against Math-Verify 0.9.0's verdicts.

    python bench/bench_reward_heldout.py --set eval_runs --pool POOL.jsonl

A set (bench/heldout/README.md) is a pool of (gold, response) pairs that models wrote in public evaluation
runs. bench/heldout/NAME.jsonl holds, per pair, the verdict of the verify mode when the set was sampled
(`ours_before`) and Math-Verify's (`mathverify`), and for the labelled pairs a label written by hand; the
responses are not redistributed, so POOL.jsonl (id, gold, response, truncated per pair) is built from the
sources in NAME.meta.json. The labelled part is every pair on which the two graders disagreed at sampling
time, plus a random sample of the pairs where they agreed (`stratum`: disagree, agree_correct,
agree_wrong), plus every pair whose verdict a later change flipped (`stratum`: changed).

Estimates, reweighted to the pool (a stratum's labelled pairs stand for all its pool pairs):

    at sampling:  accuracy, false positives (accepted, labelled wrong), misses of ours_before and of Math-Verify
    today:        the sampling-time estimate plus, for every pair today's verdict flips, +1 or -1 by its label

The last line is exact about the flips only when every flipped pair is labelled; the script lists the
flipped pairs without a label (label them, stratum "changed", before quoting a number) and exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import reward  # noqa: E402
from verifier import pool  # noqa: E402


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pair_sha(row: dict) -> str:
    """The label's check that it names the same (gold, response) pair."""
    return hashlib.sha256((row["gold"] + "\x00" + row["response"]).encode()).hexdigest()[:16]


def sampling_stratum(row: dict) -> str:
    if row["ours_before"] != row["mathverify"]:
        return "disagree"
    return "agree_correct" if row["ours_before"] else "agree_wrong"


def estimate(rows: list[dict], labels: dict[str, dict], verdict) -> tuple[float, float, float]:
    """(accuracy, false positives, misses) of verdict(row), reweighted from the sampled strata to the pool."""
    pool_n = Counter(sampling_stratum(r) for r in rows)
    sampled = [r for r in rows if labels.get(r["id"], {}).get("stratum") in pool_n]
    lab_n = Counter(labels[r["id"]]["stratum"] for r in sampled)
    right = fp = miss = 0.0
    for r in sampled:
        stratum, y, v = labels[r["id"]]["stratum"], labels[r["id"]]["label"], verdict(r)
        w = pool_n[stratum] / lab_n[stratum]
        right, fp, miss = right + w * (v == y), fp + w * (v and not y), miss + w * (y and not v)
    return right / len(rows), fp, miss


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", required=True, help="a set's name (bench/heldout/NAME.jsonl) or a set file's path")
    p.add_argument("--pool", type=Path, required=True, help="its pairs' text, built from NAME.meta.json's sources")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    texts = {r["id"]: r for r in read_jsonl(args.pool)}
    set_file = Path(args.set) if args.set.endswith(".jsonl") else ROOT / "bench" / "heldout" / f"{args.set}.jsonl"
    rows = read_jsonl(set_file)
    stale = [r["id"] for r in rows if r["id"] not in texts or pair_sha(texts[r["id"]]) != r["sha"]]
    if stale:
        sys.exit(f"error: {len(stale)} pairs of set {args.set} are missing from {args.pool} or differ there "
                 f"(first: {stale[0]}): build the pool from the sources in bench/heldout/{args.set}.meta.json")
    rows = [r | {k: texts[r["id"]][k] for k in ("gold", "response")} | {"truncated": texts[r["id"]].get("truncated")}
            for r in rows]
    labels = {r["id"]: r for r in rows if r["label"] is not None}
    results = reward.score_batch([r["response"] for r in rows], [r["gold"] for r in rows], workers=args.workers,
                                 truncated=[bool(r.get("truncated")) for r in rows])
    pool.shutdown()
    today = {r["id"]: res.acc for r, res in zip(rows, results)}
    print(f"{args.set}: {len(rows)} pairs, {len(labels)} labelled")
    graders = (("verify at sampling", lambda r: r["ours_before"]), ("Math-Verify 0.9.0", lambda r: r["mathverify"]))
    for name, verdict in graders:
        acc, fp, miss = estimate(rows, labels, verdict)
        print(f"  {name:20s} accuracy {acc:.3f}  false positives {fp:5.1f}  misses {miss:6.1f}")
    acc, fp, miss = estimate(rows, labels, lambda r: r["ours_before"])
    flipped = [r for r in rows if today[r["id"]] != r["ours_before"]]
    unlabelled = [r for r in flipped if r["id"] not in labels]
    for r in flipped:
        if r["id"] in labels:
            y, v = labels[r["id"]]["label"], today[r["id"]]
            acc += (1 if v == y else -1) / len(rows)
            fp += (v and not y) - (r["ours_before"] and not y)
            miss += (y and not v) - (y and not r["ours_before"])
    print(f"  {'verify today':20s} accuracy {acc:.3f}  false positives {fp:5.1f}  misses {miss:6.1f}"
          f"   ({len(flipped)} verdicts flipped since sampling, {len(unlabelled)} of them unlabelled)")
    for r in unlabelled:
        print(f"  unlabelled flip: {r['id']} -> {today[r['id']]} (gold {r['gold']!r})")
    return 1 if unlabelled else 0


if __name__ == "__main__":
    sys.exit(main())
