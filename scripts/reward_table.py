r"""Print docs/reward.md's table: how often each reward mode accepts a right answer, by format.

    python scripts/reward_table.py            # markdown on stdout; paste it into docs/reward.md

For every gold of the bundled benchmarks (data/aime24.jsonl, aime25, amc23, math500; each
`answer` field exactly as stored, e.g. "073", "27.0", "\frac{14}{3}") it writes one response
per row format below, scores it with reward.score_batch in mode="dapo" and mode="verify", and
reports the fraction of golds accepted:

    cell = 100 * (golds whose response scored acc=True) / n,   n = golds the row applies to

The first five rows write the gold exactly as stored; the next four write an equal value
differently (only golds where that rewriting applies count); the last row is a wrong answer
(the gold's first digit changed), which both modes should reject. tests/test_reward_dapo.py
checks that the table in docs/reward.md equals this script's output.
"""

from __future__ import annotations

import json
import re
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import reward  # noqa: E402

BENCHMARKS = ("aime24", "aime25", "amc23", "math500")
INTRO = "Let me check the computation once more.\n"  # the reasoning before the final answer


def plain_integer(gold: str) -> str | None:
    """73 for "073", 27 for "27.0", -1 for "-1.0"; None if gold is not such a padded integer."""
    if not re.fullmatch(r"-?\d+(?:\.0+)?", gold):
        return None
    plain = str(int(float(gold)))
    return plain if plain != gold else None


def thousands(gold: str) -> str | None:
    """1,000 for "1000"; None unless gold is written as a plain integer >= 1000."""
    if not re.fullmatch(r"-?\d+", gold) or abs(int(gold)) < 1000:
        return None
    return f"{int(gold):,}"


def as_decimal(gold: str) -> str | None:
    r"""0.5 for \frac{1}{2}, 0.0125 for \frac{1}{80}; None unless gold is one fraction of integers
    whose decimal expansion terminates."""
    m = re.fullmatch(r"(-?)\\d?frac\{(\d+)\}\{(\d+)\}", gold)
    if m is None or int(m.group(3)) == 0:
        return None
    value = Fraction(int(m.group(2)), int(m.group(3)))
    q = value.denominator
    for p in (2, 5):
        while q % p == 0:
            q //= p
    if q != 1 or value.denominator == 1:
        return None
    digits = len(str(value.denominator))  # 10^k is a multiple of the denominator for some k
    while (value * 10**digits).denominator != 1:
        digits += 1
    whole, frac = divmod(int(value * 10**digits), 10**digits)
    return f"{m.group(1)}{whole}.{str(frac).rjust(digits, '0').rstrip('0')}"


def swap_frac(gold: str) -> str | None:
    r"""\dfrac for \frac and \frac for \dfrac (the same value, another TeX command)."""
    if "\\dfrac" in gold:
        return gold.replace("\\dfrac", "\\frac")
    if "\\frac" in gold:
        return gold.replace("\\frac", "\\dfrac")
    return None


def wrong(gold: str) -> str | None:
    r"""The gold with its first digit changed (d -> d+1 mod 10); None if it has no digit. (The
    first, not the last: in `15\mbox{ cm}^2` the last digit belongs to the unit.)"""
    for i in range(len(gold)):
        if gold[i].isdigit():
            return gold[:i] + str((int(gold[i]) + 1) % 10) + gold[i + 1 :]
    return None


# (row label, gold -> response or None where the row does not apply)
ROWS = [
    ("`...\\nAnswer: G`", lambda g: f"{INTRO}Answer: {g}"),
    ("`...\\nAnswer: $G$`", lambda g: f"{INTRO}Answer: ${g}$"),
    ("`...\\nAnswer: G.` (trailing period)", lambda g: f"{INTRO}Answer: {g}."),
    ("`...\\nAnswer: \\boxed{G}`", lambda g: f"{INTRO}Answer: \\boxed{{{g}}}"),
    ("`... the answer is $\\boxed{G}$.` (no Answer line)",
     lambda g: f"{INTRO}So the answer is $\\boxed{{{g}}}$."),
    ("`Answer: 73` for `073`, `27` for `27.0`", lambda g: _answer(plain_integer(g))),
    ("`Answer: 1,000` for `1000`", lambda g: _answer(thousands(g))),
    ("`Answer: 0.5` for `\\frac{1}{2}`", lambda g: _answer(as_decimal(g))),
    ("`Answer: \\dfrac{a}{b}` for `\\frac{a}{b}` and back", lambda g: _answer(swap_frac(g))),
    ("a wrong answer: `Answer: G` with its first digit changed", lambda g: _answer(wrong(g))),
]


def _answer(text: str | None) -> str | None:
    return None if text is None else f"{INTRO}Answer: {text}"


def load_golds(data_dir: Path = ROOT / "data") -> dict[str, list[str]]:
    return {name: [json.loads(line)["answer"] for line in (data_dir / f"{name}.jsonl").open()]
            for name in BENCHMARKS}


def accepted(responses: list[str], golds: list[str], mode: str, workers: int | None) -> int:
    results = reward.score_batch(responses, golds, timeout_s=10.0, workers=workers, mode=mode)
    return sum(r.acc for r in results)


def table(golds_by_benchmark: dict[str, list[str]], workers: int | None = None) -> str:
    """The markdown table: one row per response format, one column per benchmark plus all."""
    columns = list(golds_by_benchmark) + ["all"]
    lines = ["| response (G = the gold as stored) | " + " | ".join(columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for label, make in ROWS:
        cells, total = [], {"n": 0, "dapo": 0, "verify": 0}
        for golds in golds_by_benchmark.values():
            pairs = [(make(g), g) for g in golds if make(g) is not None]
            counts = {"n": len(pairs)}
            for mode in ("dapo", "verify"):
                counts[mode] = accepted([p[0] for p in pairs], [p[1] for p in pairs], mode, workers)
            cells.append(_cell(counts))
            total = {k: total[k] + counts[k] for k in total}
        lines.append(f"| {label} | " + " | ".join(cells + [_cell(total)]) + " |")
    return "\n".join(lines)


def _cell(counts: dict[str, int]) -> str:
    """"dapo% / verify% (n)", or "-" where the row applies to no gold."""
    n = counts["n"]
    if n == 0:
        return "-"
    return f"{_percent(counts['dapo'], n)} / {_percent(counts['verify'], n)} ({n})"


def _percent(k: int, n: int) -> str:
    """100 * k / n to one decimal, without trailing zeros; 100 and 0 only when exact."""
    return f"{100 * k / n:.1f}".rstrip("0").rstrip(".") if 0 < k < n else str(100 * k // n)


if __name__ == "__main__":
    print(table(load_golds()))
