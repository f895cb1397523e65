"""Throughput and latency of reward.score_batch against Math-Verify 0.9.0 on the same cases.

    python bench/bench_reward.py [--repeat 1] [--batch 64] [--workers N]

Cases: the hand-labelled table tests/reward_cases.py (reward.py's verify mode, rule by rule; expectations
written by hand), repeated --repeat times. Both verifiers see exactly the same (response, gold) pairs:

    reward:       score_batch(responses, golds) in batches of --batch (the trainer's call)
    math_verify:  verify(parse("\\boxed{" + gold + "}"), parse(response)), one pair at a time,
                  in this process (how it is used in trainers; its signal.alarm timeouts need
                  the main thread)

Metrics:
    throughput  = pairs / wall seconds over all batches (math_verify: over all pairs)
    p50/p99/max = latency of one pair: reward times score_batch([response], [gold]) per pair
                  (worker round trip included); math_verify times parse + parse + verify
    accuracy    = fraction of the table where the verdict equals the hand label
A second line repeats the comparison on the pairs with a non-integer gold alone (all of them go
through score_batch's worker processes). The last line is
`speedup_vs_math_verify=<reward throughput / math_verify throughput>` over all pairs.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import reward  # noqa: E402
from reward_cases import CASES  # noqa: E402
from verifier import pool  # noqa: E402
from verifier.normalize import normalize  # noqa: E402
from verifier.verdict import integer_literal  # noqa: E402


def percentiles(latencies_s: list[float]) -> str:
    ms = sorted(x * 1000 for x in latencies_s)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    return f"p50={statistics.median(ms):.3f}ms p99={p99:.3f}ms max={ms[-1]:.3f}ms"


def cold_pool(workers: int | None) -> None:
    """A fresh worker pool and empty caches, warmed on one pair that is not in the table, so no
    case is timed against a cache that an earlier pass filled."""
    pool.shutdown()
    normalize.cache_clear()
    reward.score_batch([r"\boxed{y+1}"], ["x"], workers=workers)


def bench_reward(pairs, batch: int, workers: int | None):
    cold_pool(workers)
    start = time.perf_counter()
    verdicts = []
    for i in range(0, len(pairs), batch):
        chunk = pairs[i : i + batch]
        results = reward.score_batch([p[0] for p in chunk], [p[1] for p in chunk], workers=workers)
        verdicts += [r.acc for r in results]
    throughput = len(pairs) / (time.perf_counter() - start)
    cold_pool(workers)
    latencies = []
    for response, gold in pairs:
        t = time.perf_counter()
        reward.score_batch([response], [gold], workers=workers)
        latencies.append(time.perf_counter() - t)
    return throughput, latencies, verdicts


def bench_math_verify(pairs):
    from math_verify import parse, verify

    logging.disable(logging.CRITICAL)  # Math-Verify logs every parse failure

    def one(response: str, gold: str) -> bool:
        try:
            return bool(verify(parse("\\boxed{" + gold + "}"), parse(response)))
        except Exception:  # noqa: BLE001 - a crash is a wrong verdict, as in a trainer wrapper
            return False

    one(r"\boxed{y+1}", "x")  # warm up imports on a pair that is not in the table
    latencies, verdicts = [], []
    start = time.perf_counter()
    for response, gold in pairs:
        t = time.perf_counter()
        verdicts.append(one(response, gold))
        latencies.append(time.perf_counter() - t)
    return len(pairs) / (time.perf_counter() - start), latencies, verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=1,
                        help="copies of the case table (copies after the first hit caches)")
    parser.add_argument("--batch", type=int, default=64, help="pairs per score_batch call")
    parser.add_argument("--workers", type=int, default=None, help="score_batch workers")
    args = parser.parse_args()

    pairs = [(response, gold) for _, gold, response, _ in CASES] * args.repeat
    labels = [expected for *_, expected in CASES] * args.repeat
    print(f"cases={len(CASES)} pairs={len(pairs)} batch={args.batch} "
          f"workers={args.workers or pool.default_workers()}")

    ours = bench_reward(pairs, args.batch, args.workers)
    theirs = bench_math_verify(pairs)
    for name, (throughput, latencies, verdicts) in (("reward", ours), ("math_verify", theirs)):
        accuracy = sum(v == y for v, y in zip(verdicts, labels)) / len(labels)
        print(f"{name:12s} throughput={throughput:8.1f}/s {percentiles(latencies)} "
              f"accuracy={accuracy:.3f}")
    # The same for the pairs whose gold is not an integer: every one of these goes through a
    # worker process (parse + sympy), none through the in-process integer path.
    symbolic = [p for p in pairs if integer_literal(normalize(p[1])) is None]
    sym_ours, sym_theirs = bench_reward(symbolic, args.batch, args.workers), bench_math_verify(symbolic)
    print(f"non-integer golds only ({len(symbolic)} pairs): reward {sym_ours[0]:.1f}/s "
          f"{percentiles(sym_ours[1])}; math_verify {sym_theirs[0]:.1f}/s "
          f"{percentiles(sym_theirs[1])}; speedup {sym_ours[0] / sym_theirs[0]:.2f}")
    print(f"speedup_vs_math_verify={ours[0] / theirs[0]:.2f}")


if __name__ == "__main__":
    main()
