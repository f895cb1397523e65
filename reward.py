r"""Reward: each response's verdict (is its final answer the gold?) and score, by the entry of the REWARDS
registry that `reward.mode` names. Two entries ship, both DAPO's +1.0 if correct, else -1.0.

    score(response, gold, mode="verify", truncated=False, answer_format="any", strict_format=False)
                                                    -> RewardResult(acc, score, pred, timeout)
    score_batch(responses, golds, *, timeout_s=2.0, workers=None, mode="verify", truncated=None,
                answer_format="any", strict_format=False) -> list[RewardResult]     # time-bounded
    bounded_verdict(pred, gold) -> bool     # the math check an entry calls; bounded under score_batch
    overlong_penalty(len, max_len, buffer_len, factor) -> float in [-factor, 0]   # DAPO shaping
    shaped_rewards(responses, golds, lengths, truncated, reward_cfg, max_response_len)
                                                    -> ShapedRewards   # one step's: score + penalty, acc

DAPO's reward (the DAPO paper, arXiv 2503.14476, section 2.4 "rule-based reward modeling", and
its recipe in verl, `verl/utils/reward_score/math_dapo.py`) takes the last `Answer: ...` line of
the last 300 characters, normalises it and compares strings. The two entries (docs/reward.md compares
them on the benchmark golds):

    mode="dapo"    exactly verl's compute_score: same acc, score and pred on every string input
                   (verifier/dapo.py, with its departures). The paper configs use it, so that a
                   reproduction trains on the paper's signal.
    mode="verify"  (default) DAPO's +1/-1; the answer may be boxed, on DAPO's `Answer:` line or in the
                   R1-Zero `<answer>` tag (reward.answer_format says which the prompt asks for, and
                   reward.strict_format whether another is refused), and equality is decided
                   mathematically, under choices 1-7 and 9 below (docs/reward.md has a table of
                   answer forms, accepted and refused).

    >>> score(r"... so the total is $\boxed{1{,}000}$.", "1000").acc
    True
    >>> [score(r"... so the total is $\boxed{%s}$." % p, "1000").acc for p in ("10^3", "about 10^3")]
    [True, False]
    >>> [score("Answer: 0.5", r"\frac{1}{2}", mode=m).score for m in ("verify", "dapo")]
    [1.0, -1.0]

A fork adds a reward with one function and one REWARDS entry (README, "Forking: a new reward"); the
contract an entry keeps is written beside the registry.

Files: this one holds the entries and their registry, score and score_batch, which call an entry, the
overlong shaping, and shaped_rewards, the training step's one call: every response's verdict, score,
penalty and reward. The verify mode's internals are in verifier/: extract.py finds the final answer
(choice 1; boxes.py reads boxes, prose.py sentences), normalize.py strips formatting, verdict.py decides
(choices 2 and 3: string work first, then parse.py, with tokens.py and values.py, parses and equal.py
compares), pool.py bounds the time and memory of each check (choice 4).

Of the choices below, 1-7 and 9 are mode="verify"'s (5-7 its departures from verl's DAPO reward and from
Math-Verify 0.9.0) and 8 holds in both modes.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. The final answer (verifier/extract.py) is the last marker (box group, `Answer:` line, `<answer>` tag, JSON field,
   "the answer is (X)") before a made-up next turn; else a closing sentence or a lone value; else no answer.
2. Integer golds: a number literal equal to the gold once formatting is stripped (verifier/normalize.py), or closed
   arithmetic (`10^3`, `\sqrt{3^2 + 4^2}`) whose exact value is the gold.
3. Other golds: exact mathematical equality (verifier/equal.py), with no numeric tolerance besides a rounded
   decimal gold of 3 or more significant digits; hedges are incorrect.
4. Model text is never passed to eval, exec, sympify or parse_expr (verifier/parse.py), and score_batch
   runs the sympy path in killable, memory-capped worker processes (verifier/pool.py).
5. A departure from verl's DAPO reward: boxed answers count besides the `Answer:` line, and equality is
   mathematical, not string equality.
6. A departure from Math-Verify: the time bound is a process boundary and nothing is evaluated, where
   Math-Verify uses signal.alarm and parse_expr.
7. Exactness without sympy.simplify (verifier/equal.py): sympy's canonical form, then agreement to 80+
   significant digits.
8. overlong_penalty (both modes) clips at -penalty_factor past max_response_len, which DAPO never reaches.
9. The verify mode reads the answer format the prompt asks for first, else any marker; strict_format scores a response
   without the asked format -1 (a format reward).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from verifier import pool
from verifier.dapo import dapo_verdict
from verifier.extract import ANSWER_FORMATS, TAIL_CHARS, extract_answer  # noqa: F401 - choice 1, re-exported
from verifier.verdict import fast_verdict, gold_text, sympy_verdict


@dataclass(frozen=True)
class RewardResult:
    acc: bool  # the entry's verdict: the final answer is correct
    score: float  # the entry's score (+1.0 if acc else -1.0 in both shipped modes)
    pred: str | None  # the final answer (verify: None if there is none or on timeout;
    #                   dapo: verl's normalised prediction, "[INVALID]" if there is none)
    timeout: bool = False  # score_batch killed a check at timeout_s (counted; the check is unequal)


# ----------------------------------------------------------------------------------------------
# The math check an entry calls: string work here, the sympy path bounded under score_batch (choice 4)
# ----------------------------------------------------------------------------------------------


class _NotChecked(BaseException):
    """Raised by bounded_verdict inside score_batch for a (pred, gold) pair the pool has not checked yet:
    score_batch sends the pair to the pool and calls the entry again. A BaseException, so that an entry's
    own `except Exception` (score_verify's) does not take it for a bad input."""

    def __init__(self, pair: tuple[str, str]):
        self.pair = pair


@dataclass
class _PoolVerdicts:
    """What score_batch knows while it calls entries: the pool's verdicts by (pred, gold), None for a
    check killed at timeout_s, and whether the entry being called read such a check."""

    known: dict[tuple[str, str], bool | None] = field(default_factory=dict)
    timed_out: bool = False


_IN_BATCH: ContextVar[_PoolVerdicts | None] = ContextVar("reward_in_batch", default=None)  # set by score_batch


def bounded_verdict(pred: str, gold: str) -> bool:
    """Whether the extracted answer `pred` equals the gold (verifier/verdict.py), for any entry. The string
    work (choices 2 and 3) runs here; the sympy path runs here under score(), and under score_batch in
    verifier/pool.py's killable workers, where a check killed at timeout_s is unequal (choice 4)."""
    gold = gold_text(gold)
    fast = fast_verdict(pred, gold)
    batch = _IN_BATCH.get()
    if fast is not None or batch is None:
        return fast if fast is not None else sympy_verdict(pred, gold)
    if (pred, gold) not in batch.known:
        raise _NotChecked((pred, gold))
    batch.timed_out |= batch.known[(pred, gold)] is None
    return bool(batch.known[(pred, gold)])


# ----------------------------------------------------------------------------------------------
# The entries: mode="verify" (verifier/) and mode="dapo" (verifier/dapo.py)
# ----------------------------------------------------------------------------------------------


def score_verify(response: str, ground_truth: str, truncated: bool = False, answer_format: str = "any",
                 strict_format: bool = False) -> tuple[bool, float, str | None]:
    """mode="verify" (choices 1-4): the final answer (verifier/extract.py) equal to the gold (bounded_verdict);
    a truncated response (cut at the length limit) is never read from its closing sentence. answer_format: the
    marker the prompt asks for, read first; strict_format: a response without it scores -1 (choice 9).
    Never raises."""
    try:
        pred = extract_answer(response, truncated, answer_format, strict_format)
        ok = pred is not None and bounded_verdict(pred, ground_truth)
    except Exception:  # noqa: BLE001 - an unforeseen input is an incorrect answer, not a crash
        return False, -1.0, None
    return ok, 1.0 if ok else -1.0, pred


def score_dapo(response: str, ground_truth: str, truncated: bool = False) -> tuple[bool, float, str | None]:
    """mode="dapo": verl's compute_score (verifier/dapo.py), which reads no `truncated`; the gold is read as
    text, as in verify mode. String work on 300 characters, never the pool. Never raises (dapo_verdict)."""
    ok, pred = dapo_verdict(response, gold_text(ground_truth))
    return ok, 1.0 if ok else -1.0, pred


# The registry score and score_batch look a mode up in: name -> entry(response, gold, truncated) returning
# (verdict, score), or (verdict, score, pred) to show the answer it read (eval.py's generations.jsonl; else None).
#   verdict  a bool, True when the answer is correct. The step relies on it being binary and meaning "correct":
#            dynamic sampling (rollout.dynamic_sampling_keep) drops a group whose verdicts all agree, and the POS /
#            NEG masks (advantage.masked_baseline) split a group into its correct and incorrect responses and
#            its prompt into hard or easy by them.
#   score    the scalar the advantage sees, plus the overlong penalty (shaped_rewards): +1 / -1 here. The
#            baseline of `algorithm.quantile_of: verdict` is taken over the scores: QAE's exact gate needs a
#            score that is a function of the verdict, higher when correct.
# An entry runs in the trainer's process: string work on a capped tail, model text never executed. Its math
# check goes through bounded_verdict, which score_batch runs in verifier/pool.py's killable, memory-capped
# workers (they run verifier.verdict.sympy_verdict on (pred, gold) strings, never the entry: nothing is
# pickled, so an entry needs no importable name). An entry is a pure function of its inputs: score_batch
# calls it again once the pool has answered. It never raises on string input; an error is a bug, and stops.
REWARDS: dict[str, Callable[[str, str, bool], tuple]] = {"verify": score_verify, "dapo": score_dapo}


def check_mode(mode: str, key: str = "config key `reward.mode`") -> None:
    """Raises ValueError naming `key` and the registered modes unless `mode` is one (config.py, eval.py)."""
    if not isinstance(mode, str) or mode not in REWARDS:
        raise ValueError(f"{key} must be one of {sorted(REWARDS)}, got {mode!r} (the names in reward.REWARDS)")


def entry_for(mode: str, answer_format: str = "any", strict_format: bool = False) -> Callable[[str, str, bool], tuple]:
    """REWARDS[mode] with the answer format the prompt asks for bound (choice 9); ValueError for a format
    the entry cannot read (only an entry with an `answer_format` parameter reads one)."""
    check_mode(mode)
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"config key `reward.answer_format` must be one of {list(ANSWER_FORMATS)}, "
                         f"got {answer_format!r}")
    if (answer_format, strict_format) == ("any", False):
        return REWARDS[mode]
    if "answer_format" not in inspect.signature(REWARDS[mode]).parameters:
        raise ValueError(f"reward mode {mode!r} reads one answer format of its own: set reward.answer_format: any and "
                         f"reward.strict_format: false, or use reward.mode: verify")
    if strict_format and answer_format == "any":
        raise ValueError("reward.strict_format: true needs the format the prompt asks for in reward.answer_format "
                         f"(one of {list(ANSWER_FORMATS[1:])})")
    return functools.partial(REWARDS[mode], answer_format=answer_format, strict_format=strict_format)


def held_to_contract(mode: str, out) -> tuple[bool, float, str | None]:
    """An entry's return value as (verdict, score, pred), or TypeError naming the entry and what it broke."""
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise TypeError(f"reward entry {mode!r} must return (verdict, score) or (verdict, score, pred), got {out!r}")
    verdict, value, pred = (*out, None)[:3]
    if not isinstance(verdict, bool):
        raise TypeError(f"reward entry {mode!r} returned the verdict {verdict!r}; it must be a bool (True: correct)")
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"reward entry {mode!r} returned the score {value!r}; it must be a finite number")
    return verdict, float(value), pred


# ----------------------------------------------------------------------------------------------
# The public API: score and score_batch, for any mode
# ----------------------------------------------------------------------------------------------


def score(response: str, ground_truth: str, mode: str = "verify", truncated: bool = False,
          answer_format: str = "any", strict_format: bool = False) -> RewardResult:
    """The reward of one response, in this process (no timeout on the math check; use score_batch for
    untrusted text at scale); truncated: the response hit the length limit (rollout.Rollout.truncated).
    Never raises on its inputs; raises ValueError on an unknown mode, TypeError on an entry's bad return."""
    entry = entry_for(mode, answer_format, strict_format)
    return RewardResult(*held_to_contract(mode, entry(response, ground_truth, truncated)))


def score_batch(responses: list[str], ground_truths: list[str], *, timeout_s: float = 2.0,
                workers: int | None = None, mode: str = "verify", truncated: list[bool] | None = None,
                answer_format: str = "any", strict_format: bool = False) -> list[RewardResult]:
    """score() for each pair (truncated: one flag per response, default none truncated), with every math
    check bounded: the entry runs here (string work), and each (pred, gold) pair its bounded_verdict cannot
    decide by string work goes to verifier/pool.py's `workers` processes (default min(4, CPUs)), each check
    killed at timeout_s; then the entry is called again with the pool's answers. An item whose check was
    killed has timeout=True and pred=None, the check counting as unequal (-1 in the shipped modes). A mode
    that makes no such check (dapo) starts no pool. Never raises on string input.
    """
    entry = entry_for(mode, answer_format, strict_format)
    if len(responses) != len(ground_truths):
        raise ValueError(f"score_batch needs one ground truth per response, got "
                         f"{len(responses)} responses and {len(ground_truths)} ground truths")
    if truncated is not None and len(truncated) != len(responses):
        raise ValueError(f"score_batch needs one truncated flag per response, got {len(truncated)} flags "
                         f"for {len(responses)} responses")
    cut, batch = truncated or [False] * len(responses), _PoolVerdicts()
    results: list[RewardResult | None] = [None] * len(responses)
    todo = list(range(len(responses)))
    token = _IN_BATCH.set(batch)
    try:
        while todo:  # a round per check an entry makes in turn: one round for verify
            waiting: dict[int, tuple[str, str]] = {}  # item -> the pair its entry needs from the pool
            for i in todo:
                batch.timed_out = False
                try:
                    verdict, value, pred = held_to_contract(mode, entry(responses[i], ground_truths[i], cut[i]))
                except _NotChecked as need:
                    waiting[i] = need.pair
                    continue
                results[i] = RewardResult(verdict, value, None if batch.timed_out else pred, batch.timed_out)
            pairs = list(dict.fromkeys(waiting.values()))  # each distinct pair checked once
            if pairs:
                answers = pool.run_checks(dict(enumerate(pairs)), timeout_s, workers)  # choice 4: killable workers
                batch.known.update({pair: answers.get(k) for k, pair in enumerate(pairs)})  # missing: not checked
            todo = list(waiting)
    finally:
        _IN_BATCH.reset(token)
    return results  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------
# Overlong reward shaping (DAPO paper section 3.4), added to any mode's score
# ----------------------------------------------------------------------------------------------


def overlong_penalty(response_len: int, max_response_len: int, buffer_len: int,
                     penalty_factor: float) -> float:
    """DAPO's soft overlong punishment, added to the score:

        expected = max_response_len - buffer_len        # 20480 - 4096 = 16384
        penalty  = min(-(len - expected) / buffer_len * penalty_factor, 0)   in [-factor, 0]

    >>> overlong_penalty(16384, 20480, 4096, 1.0), overlong_penalty(18432, 20480, 4096, 1.0)
    (0.0, -0.5)
    """
    if buffer_len <= 0 or buffer_len > max_response_len:
        raise ValueError(f"overlong buffer_len must be in (0, max_response_len={max_response_len}]"
                         f", got {buffer_len}")
    expected = max_response_len - buffer_len
    penalty = min(-(response_len - expected) / buffer_len * penalty_factor, 0.0)
    return max(penalty, -penalty_factor) + 0.0  # choice 8: clip past the max; no -0.0


# ----------------------------------------------------------------------------------------------
# A generation batch's shaped rewards: the training step's one call into this module
# ----------------------------------------------------------------------------------------------


@dataclass
class ShapedRewards:
    """Per response, in order: the verdict, its score, the overlong penalty and their sum."""

    acc: list[bool]  # the verifier's verdict
    score: list[float]  # the entry's score: +1 / -1 in the shipped modes
    penalty: list[float]  # DAPO's overlong penalty, in [-factor, 0]; 0 when the shaping is off
    reward: list[float]  # the shaped reward: score + penalty (DAPO section 3.4)
    timeouts: int  # verifications that overran reward_cfg.timeout_s (scored -1)


def shaped_rewards(responses: list[str], ground_truths: list[str], lengths: list[int], truncated: list[bool],
                   reward_cfg, max_response_len: int) -> ShapedRewards:
    """score_batch under `reward_cfg` (mode, answer_format, strict_format, timeout_s, workers), plus
    overlong_penalty of each response's `lengths` (in tokens) when reward_cfg.overlong_buffer_len > 0.

    >>> from config import RewardConfig
    >>> cfg = RewardConfig(mode="dapo", overlong_buffer_len=4, overlong_penalty_factor=1.0)
    >>> r = shaped_rewards(["Answer: 3", "Answer: 4"], ["3", "3"], [2, 10], [False, True], cfg, max_response_len=10)
    >>> r.acc, r.reward
    ([True, False], [1.0, -2.0])
    """
    results = score_batch(responses, ground_truths, timeout_s=reward_cfg.timeout_s, workers=reward_cfg.workers,
                          mode=reward_cfg.mode, truncated=truncated, answer_format=reward_cfg.answer_format,
                          strict_format=reward_cfg.strict_format)
    buffer, factor = reward_cfg.overlong_buffer_len, reward_cfg.overlong_penalty_factor
    penalty = [overlong_penalty(n, max_response_len, buffer, factor) if buffer else 0.0 for n in lengths]
    return ShapedRewards([r.acc for r in results], [r.score for r in results], penalty,
                         [r.score + p for r, p in zip(results, penalty)], sum(r.timeout for r in results))
