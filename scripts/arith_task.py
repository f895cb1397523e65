"""The addition task of docs/smollm2_experiment.md: problems a real pretrained chat model
(SmolLM2-135M-Instruct, scripts/smollm2.py) can learn on a CPU, written from a seed.

    python scripts/arith_task.py runs/arith          # train.jsonl, probe.jsonl; same seed, same files

Each problem is asked as chat messages after one system line and one worked turn, so the model
answers in the `Answer: N` form that reward.py reads; a row's `problem` is that message list, which
infra.data.build_messages uses as it is.

Choices, numbered:
1. Sizes: a third each of 1+1-digit, 2+1-digit and 2+2-digit additions, 2000 training problems; only
   the 100 1+1-digit pairs (operands 0-9) repeat. The model starts right on ~0.4, ~0.1 and ~0.0 of them.
2. The probe set (the experiment's fixed prompts for the entropy measure) is 64 problems in the same
   thirds, drawn first; the training set holds none of them.
3. One system line and one worked turn (52-54 prompt tokens with SmolLM2's chat template, against
   85 for two worked turns): the update's cost is dominated by the prompt at this size.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SYSTEM = "Give only the sum."  # the worked turn shows the `Answer: N` form
SHOT = [{"role": "user", "content": "What is 12 + 7?"}, {"role": "assistant", "content": "Answer: 19"}]
SIZES = [(1, 1), (2, 1), (2, 2)]  # digits of a and b, a third each (choice 1)
TRAIN, PROBE = 2000, 64


def pool(digits_a: int, digits_b: int) -> list[tuple[int, int]]:
    """Every (a, b) with those digit counts (one digit: 0-9; two: 10-99)."""
    span = {1: range(10), 2: range(10, 100)}
    return [(a, b) for a in span[digits_a] for b in span[digits_b]]


def problems(seed: int, count: int, taken: set[tuple[int, int]] = frozenset()) -> list[tuple[int, int]]:
    """`count` (a, b) pairs, a third of each size in SIZES, none in `taken` nor the worked turn's; within a
    size no pair repeats until its pool is used up (choice 1). Shuffled.

    >>> problems(0, 6)
    [(2, 3), (94, 38), (63, 1), (41, 98), (0, 8), (89, 3)]
    """
    rng, out = random.Random(seed), []
    for k, size in enumerate(SIZES):
        want = count // len(SIZES) + (k < count % len(SIZES))
        choices = [p for p in pool(*size) if p not in taken and p != (12, 7)]
        rng.shuffle(choices)
        out += [choices[i % len(choices)] for i in range(want)]
    rng.shuffle(out)
    return out


def row(a: int, b: int) -> dict:
    messages = [{"role": "system", "content": SYSTEM}, *SHOT, {"role": "user", "content": f"What is {a} + {b}?"}]
    return {"problem": messages, "answer": str(a + b)}


def write(out_dir: Path, seed: int = 0) -> tuple[Path, Path]:
    """train.jsonl and probe.jsonl in `out_dir`, from `seed` (choice 2: the probe set is disjoint)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    probe = problems(seed + 1, PROBE)
    train = problems(seed, TRAIN, taken=set(probe))
    paths = out_dir / "train.jsonl", out_dir / "probe.jsonl"
    for path, pairs in zip(paths, (train, probe)):
        path.write_text("".join(json.dumps(row(a, b)) + "\n" for a, b in pairs))
    return paths


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in write(args.out_dir, args.seed):
        print(f"{path}: {sum(1 for _ in path.open())} problems")


if __name__ == "__main__":
    main()
