r"""Reward: +1.0 if a response's final answer equals the gold, else -1.0, in one of two modes.

    score(response, gold, mode="verify", truncated=False) -> RewardResult(acc, score, pred, timeout)
    score_batch(responses, golds, *, timeout_s=2.0, workers=None, mode="verify", truncated=None)
                                                    -> list[RewardResult]     # time-bounded
    overlong_penalty(len, max_len, buffer_len, factor) -> float in [-factor, 0]   # DAPO shaping
    shaped_rewards(responses, golds, lengths, truncated, reward_cfg, max_response_len)
                                                    -> ShapedRewards   # one step's: score + penalty, acc

DAPO's reward (the DAPO paper, arXiv 2503.14476, section 2.4 "rule-based reward modeling", and
its recipe in verl, `verl/utils/reward_score/math_dapo.py`) takes the last `Answer: ...` line of
the last 300 characters, normalises it and compares strings. Two modes (docs/reward.md compares
them on the benchmark golds):

    mode="dapo"    exactly verl's compute_score: same acc, score and pred on every string input
                   (verifier/dapo.py, with its departures). The paper configs use it, so that a
                   reproduction trains on the paper's signal.
    mode="verify"  (default) DAPO's +1/-1 and its `Answer:` format, but boxed answers count too
                   and equality is decided mathematically, under choices 1-7 below (docs/reward.md
                   has a table of answer forms, accepted and refused).

    >>> score(r"... so the total is $\boxed{1{,}000}$.", "1000").acc
    True
    >>> score(r"... so the total is $\boxed{10^3}$.", "1000").acc  # do the arithmetic
    False
    >>> [score("Answer: 0.5", r"\frac{1}{2}", mode=m).score for m in ("verify", "dapo")]
    [1.0, -1.0]

Files: this one holds score and score_batch, which dispatch both modes, the overlong shaping, and
shaped_rewards, the training step's one call: every response's verdict, score, penalty and reward.
The verify mode's internals are in verifier/: extract.py finds the final answer (choice 1),
normalize.py strips formatting, verdict.py decides (choices 2 and 3: string work first, then
parse.py, with tokens.py and values.py, parses and equal.py compares), pool.py bounds the time
and memory of each check (choice 4).

Of the choices below, 1-7 are mode="verify"'s (5-7 its departures from verl's DAPO reward and from
Math-Verify 0.9.0) and 8 holds in both modes.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. The final answer (verifier/extract.py) is the last box group, `Answer:` line or JSON field, whichever comes
   last, in the last TAIL_CHARS characters; else a finished solution's closing sentence; else no answer.
2. Integer golds: the prediction must be a number literal equal to the gold once formatting is stripped
   (verifier/normalize.py); an unevaluated expression such as `10^3` is incorrect.
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
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier import pool
from verifier.dapo import dapo_verdict
from verifier.extract import TAIL_CHARS, extract_answer  # noqa: F401 - choice 1, re-exported
from verifier.verdict import fast_verdict, gold_text, verdict

MODES = ("verify", "dapo")


@dataclass(frozen=True)
class RewardResult:
    acc: bool  # the final answer equals the gold
    score: float  # +1.0 if acc else -1.0 (DAPO)
    pred: str | None  # the final answer (verify: None if there is none or on timeout;
    #                   dapo: verl's normalised prediction, "[INVALID]" if there is none)
    timeout: bool = False  # score_batch killed the check at timeout_s (counted, scored -1)


def _result(acc: bool, pred: str | None, timeout: bool = False) -> RewardResult:
    return RewardResult(acc=acc, score=1.0 if acc else -1.0, pred=pred, timeout=timeout)


def score_verify(response: str, ground_truth: str, truncated: bool = False) -> RewardResult:
    """mode="verify": the reward of one response (choices 1-4), in this process; a truncated response
    (cut at the length limit) is never read from its closing sentence. Never raises."""
    try:
        pred = extract_answer(response, truncated)
        if pred is None:
            return _result(False, None)
        return _result(verdict(pred, ground_truth), pred)
    except Exception:  # noqa: BLE001 - an unforeseen input is an incorrect answer, not a crash
        return _result(False, None)


# ----------------------------------------------------------------------------------------------
# mode="dapo": verl's DAPO reward (verifier/dapo.py)
# ----------------------------------------------------------------------------------------------


def score_dapo(response: str, ground_truth: str) -> RewardResult:
    """mode="dapo": verl's compute_score (verifier/dapo.py); the gold is read as text, as in verify
    mode. Never raises (verifier.dapo.dapo_verdict)."""
    return _result(*dapo_verdict(response, gold_text(ground_truth)))


# ----------------------------------------------------------------------------------------------
# The public API: score and score_batch, for either mode
# ----------------------------------------------------------------------------------------------


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"reward mode must be one of {MODES} (config key `reward.mode`), "
                         f"got {mode!r}")


def score(response: str, ground_truth: str, mode: str = "verify", truncated: bool = False) -> RewardResult:
    """The reward of one response, in this process (verify mode: no timeout; use score_batch
    for untrusted text at scale); truncated: the response hit the length limit (rollout.Rollout.truncated).
    Never raises on its inputs; raises ValueError on a bad mode."""
    _check_mode(mode)
    if mode == "dapo":
        return score_dapo(response, ground_truth)
    return score_verify(response, ground_truth, truncated)


def score_batch(responses: list[str], ground_truths: list[str], *, timeout_s: float = 2.0,
                workers: int | None = None, mode: str = "verify",
                truncated: list[bool] | None = None) -> list[RewardResult]:
    """score() for each pair (truncated: one flag per response, default none truncated). mode="dapo"
    is string work on 300 characters: it runs here.

    mode="verify": extraction and the integer/text paths run here (string work on a capped
    tail); the rest goes to verifier/pool.py's `workers` processes (default min(4, CPUs)), each
    check bounded by timeout_s. An item whose worker overruns scores -1 with pred=None and
    timeout=True. Never raises on string input.
    """
    _check_mode(mode)
    if len(responses) != len(ground_truths):
        raise ValueError(f"score_batch needs one ground truth per response, got "
                         f"{len(responses)} responses and {len(ground_truths)} ground truths")
    if truncated is not None and len(truncated) != len(responses):
        raise ValueError(f"score_batch needs one truncated flag per response, got {len(truncated)} flags "
                         f"for {len(responses)} responses")
    if mode == "dapo":
        return [score_dapo(r, g) for r, g in zip(responses, ground_truths)]
    cut = truncated or [False] * len(responses)
    results: list[RewardResult | None] = [None] * len(responses)
    preds: list[str | None] = [None] * len(responses)
    jobs: dict[int, tuple[str, str]] = {}
    for i, (response, gold) in enumerate(zip(responses, ground_truths)):
        try:
            preds[i], gold = extract_answer(response, cut[i]), gold_text(gold)
            fast = None if preds[i] is None else fast_verdict(preds[i], gold)
        except Exception:  # noqa: BLE001 - a non-string input is an incorrect answer
            preds[i], fast = None, False
        if preds[i] is None or fast is not None:
            results[i] = _result(bool(fast), preds[i])
        else:
            jobs[i] = (preds[i], gold)  # choice 4: the sympy path, in a killable worker
    for i, ok in pool.run_checks(jobs, timeout_s, workers).items():
        results[i] = _result(False, None, True) if ok is None else _result(ok, preds[i])
    return results  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------
# Overlong reward shaping (DAPO paper section 3.4), added to either mode's score
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
    score: list[float]  # +1 / -1
    penalty: list[float]  # DAPO's overlong penalty, in [-factor, 0]; 0 when the shaping is off
    reward: list[float]  # the shaped reward: score + penalty (DAPO section 3.4)
    timeouts: int  # verifications that overran reward_cfg.timeout_s (scored -1)


def shaped_rewards(responses: list[str], ground_truths: list[str], lengths: list[int], truncated: list[bool],
                   reward_cfg, max_response_len: int) -> ShapedRewards:
    """score_batch under `reward_cfg` (mode, timeout_s, workers), plus overlong_penalty of each response's
    `lengths` (in tokens) when reward_cfg.overlong_buffer_len > 0.

    >>> from config import RewardConfig
    >>> cfg = RewardConfig(mode="dapo", overlong_buffer_len=4, overlong_penalty_factor=1.0)
    >>> r = shaped_rewards(["Answer: 3", "Answer: 4"], ["3", "3"], [2, 10], [False, True], cfg, max_response_len=10)
    >>> r.acc, r.reward
    ([True, False], [1.0, -2.0])
    """
    results = score_batch(responses, ground_truths, timeout_s=reward_cfg.timeout_s, workers=reward_cfg.workers,
                          mode=reward_cfg.mode, truncated=truncated)
    buffer, factor = reward_cfg.overlong_buffer_len, reward_cfg.overlong_penalty_factor
    penalty = [overlong_penalty(n, max_response_len, buffer, factor) if buffer else 0.0 for n in lengths]
    return ShapedRewards([r.acc for r in results], [r.score for r in results], penalty,
                         [r.score + p for r, p in zip(results, penalty)], sum(r.timeout for r in results))
