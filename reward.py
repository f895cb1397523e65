r"""Reward: +1.0 if a response's final answer equals the gold, else -1.0, in one of two modes.

    score(response, gold, mode="verify")            -> RewardResult(acc, score, pred, timeout)
    score_batch(responses, golds, *, timeout_s=2.0, workers=None, mode="verify")
                                                    -> list[RewardResult]     # time-bounded
    overlong_penalty(len, max_len, buffer_len, factor) -> float in [-factor, 0]   # DAPO shaping

DAPO's reward (the DAPO paper, arXiv 2503.14476, section 2.4 "rule-based reward modeling", and
its recipe in verl, `verl/utils/reward_score/math_dapo.py`) takes the last `Answer: ...` line of
the last 300 characters, normalises it and compares strings. Two modes (docs/reward.md compares
them on the benchmark golds):

    mode="dapo"    exactly verl's compute_score: same acc, score and pred on every string input
                   (reward_dapo.py, with its departures). The paper configs use it, so that a
                   reproduction trains on the paper's signal.
    mode="verify"  (default) DAPO's +1/-1 and its `Answer:` format, but boxed answers count too
                   and equality is decided mathematically, under the policy below.

    >>> score(r"... so the total is $\boxed{1{,}000}$.", "1000").acc
    True
    >>> score(r"... so the total is $\boxed{10^3}$.", "1000").acc  # do the arithmetic
    False
    >>> [score("Answer: 0.5", r"\frac{1}{2}", mode=m).score for m in ("verify", "dapo")]
    [1.0, -1.0]

Policy of mode="verify", numbered:
1. Final answer: the last complete `\boxed{...}` (also `\fbox{...}` and `\boxed 7`) or the last
   `Answer: ...` line (any case, markdown bold allowed, trailing period ignored), whichever comes
   last. An unclosed final `\boxed{`, or no marker at all, means no answer: incorrect, even if
   the last number in the text equals the gold. An empty `\boxed{}` (an echoed instruction) is
   skipped. Only the last TAIL_CHARS characters are scanned.
2. Integer golds (all of DAPO-Math-17k and AIME; "073" and "27.0" are integer golds): the
   prediction must be a number literal equal to the gold. Thousands separators (`1,000`,
   `1{,}000`, `1\,000`), leading zeros, a trailing `.0`, `x = `, `$`, `\text{}`, units,
   `^\circ` and `%` are formatting. An unevaluated expression (`10^3`, `2^{10}`, `10!`,
   `\frac{84}{2}`, `\binom{4}{2}`) is incorrect: the model must do the arithmetic. This path is
   string work only (no sympy), so score_batch runs it in the calling process.
3. Other golds: exact mathematical equality, no numeric tolerance (0.5 = \frac{1}{2}; 0.333 !=
   1/3; 3.14 != \pi): numbers, radicals, \pi, symbolic expressions, intervals and unions,
   ordered tuples, unordered sets and lists, matrices, equations (equal up to a nonzero factor)
   and `x = ...` forms. Hedges are incorrect (`42 \text{ or } 43`; `41, 42, 43` against one
   value; `42 \pm 1`). An inequality against an interval gold is incorrect (it restates the
   question); an interval against an inequality gold is correct when the sets are equal.
   Text golds (`\text{Evelyn}`, `\text{(C)}`) compare as case-insensitive words; base-b golds
   (`2516_8`) as digits, with or without the base. A `%` in the prediction may be read as
   formatting or as /100 (25\% answers 0.25 and 25).
4. Model text is never passed to eval, exec, sympify or parse_expr: math_parse.py is an
   allow-listed recursive-descent parser that caps digits, exponents, factorials and nesting
   before any arithmetic (math_values.py), and math_equal.py compares its output. score_batch
   runs this sympy path in worker subprocesses that are killed at timeout_s and capped in
   memory (verifier_pool.py).

Departures of mode="verify" from verl's DAPO reward and from Math-Verify 0.9.0, numbered:
1. Boxed answers are accepted besides DAPO's `Answer:` line, and equality is mathematical, not
   string equality (verl: 39% on a broad equivalence set).
2. Math-Verify times out with signal.alarm (main thread only, whole seconds, cannot interrupt
   GMP, no memory bound) and passes text to parse_expr; here the bound is a process boundary
   and nothing is evaluated. Math-Verify also accepts `10^3` for an integer gold, reads
   `1\,000` as 0, and compares numbers with a tolerance (1/2^98 == 1/2^99); this module does
   none of these.
3. Exactness without simplify (math_equal.py): rationals compare exactly; other values by
   sympy's canonical form, then by agreement to 80+ significant digits with the precision
   raised above anything a written decimal could fake (expressions with variables: at three
   generic points). sympy.simplify is never called: its cost has no bound.

Departures of mode="dapo" from verl's compute_score: reward_dapo.py's module docstring.

Departure of overlong_penalty (both modes) from DAPO's overlong shaping (DAPO paper section 3.4):
1. It clips at -penalty_factor for responses longer than max_response_len (DAPO never sees one,
   because generation stops there).

This file is longer than the others (about 500 lines) because it holds one job that does not
split without scattering the policy: mode="verify" from extraction (policy 1) through
normalisation and the string-only verdicts (policy 2) to the hand-off to the sympy path
(policies 3 and 4), plus score/score_batch, which dispatch both modes. The parser and the
equality it hands off to live in math_parse.py, math_values.py and math_equal.py.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from functools import lru_cache

import verifier_pool
from reward_dapo import dapo_verdict

TAIL_CHARS = 8192  # policy 1: only the end of a response is scanned for the final answer
MAX_ANSWER_CHARS = 2000  # a longer "final answer" is not parsed (scored incorrect)
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


# ----------------------------------------------------------------------------------------------
# Policy 1: extracting the final answer
# ----------------------------------------------------------------------------------------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_ANSWER_RE = re.compile(r"(?<![A-Za-z])answer\s*(?:\*{1,2}|_{1,2})?\s*:", re.IGNORECASE)  # **Answer**:


def _group_end(text: str, start: int) -> int:
    """Index after the `}` closing the `{` at text[start], or -1 if it never closes. Linear."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2  # \{ and \} are not grouping braces
            continue
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return i + 1
        i += 1
    return -1


def _last_box(text: str) -> tuple[int, str | None] | None:
    """(start, content) of the last \\boxed/\\fbox; content None if it is unclosed. An empty
    `\\boxed{}` (a model echoing "put your answer in \\boxed{}") is skipped."""
    for box in reversed(list(_BOX_RE.finditer(text))):
        j = box.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = _group_end(text, j)
            if end < 0:
                return box.start(), None
            content = text[j + 1 : end - 1]
        else:
            bare = re.match(r"[^\s$]+", text[j:])  # \boxed 7
            content = bare.group(0) if bare else None
        if content is None or content.strip():
            return box.start(), content
    return None


def _last_answer_line(text: str) -> tuple[int, str] | None:
    """(start, rest of the line) of the last `Answer:`; an empty rest takes the next line."""
    last = None
    for last in _ANSWER_RE.finditer(text):
        pass
    if last is None:
        return None
    lines = text[last.end() :].split("\n", 3)
    rest = next((line for line in lines[:3] if line.strip(" *_")), "").strip(" \t\r*_")
    rest = re.sub(r"(?i)\s*I hope it is correct\.?$", "", rest)  # Minerva's "Final Answer: ..."
    return last.start(), re.sub(r"(?i)^the (?:final )?answer is:?\s*", "", rest)


def extract_answer(response: str) -> str | None:
    """Policy 1. Returns the final answer text, or None if the response gives none."""
    tail = response[-TAIL_CHARS:]
    box, line = _last_box(tail), _last_answer_line(tail)
    candidates = [c for c in (box, line) if c is not None]
    if not candidates:
        return None
    pred = max(candidates, key=lambda c: c[0])[1]  # whichever marker comes last
    if pred is None:
        return None  # unclosed final \boxed{: the answer was cut off
    pred = pred.strip().rstrip(".").strip()
    return pred or None


# ----------------------------------------------------------------------------------------------
# Normalisation: formatting that never changes the value (string work, linear in the length)
# ----------------------------------------------------------------------------------------------

_UNICODE = str.maketrans({
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00d7": r"\times ", "\u22c5": r"\cdot ",
    "\u00b7": r"\cdot ", "\u00f7": r"\div ", "\u2264": r"\le ", "\u2265": r"\ge ",
    "\u2260": r"\ne ", "\u03c0": r"\pi ", "\u221e": r"\infty ", "\u221a": r"\sqrt",
    "\u222a": r"\cup ", "\u00b0": r"^\circ ", "\u2205": r"\emptyset ", "\u00a0": " ",
    "\u2009": " ", "\u202f": " ", "\uff0c": ",", "\u00b1": r"\pm ", "\u2213": r"\mp ",
    "\u2208": r"\in ", "\u00b2": "^2", "\u00b3": "^3", "\u00bd": r"\frac{1}{2}",
    "\u2153": r"\frac{1}{3}", "\u2154": r"\frac{2}{3}", "\u00bc": r"\frac{1}{4}",
    "\u00be": r"\frac{3}{4}",
})
_INVISIBLE_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_TEXT_CMD_RE = re.compile(
    r"\\(text|textbf|textit|textrm|textsf|texttt|textnormal|mbox|hbox|emph|mathrm|mathbf"
    r"|mathit|mathsf|mathtt|boldsymbol|bm|operatorname)\s*\{"
)
_MATH_FONTS = {"mathrm", "mathbf", "mathit", "mathsf", "mathtt", "boldsymbol", "bm", "operatorname"}
_HEDGE_WORDS = {"or", "and"}
_UNITS = (
    r"cm|mm|km|meters?|metres?|inch(?:es)?|feet|foot|ft|yards?|miles?|units?|degrees?|deg"
    r"|radians?|cents?|dollars?|hours?|hrs?|minutes?|mins?|seconds?|days?|weeks?|months?"
    r"|years?|mph|kg|grams?|liters?|litres?|ml|people|students|ways|times|points|sq|square"
)
_UNIT_TAIL_RE = re.compile(rf"(?<=[\d}}\s])\s*(?:(?:square|sq\.?|cubic)\s+)?(?:{_UNITS})"
                           r"(?:\s*\^\s*\{?[23]\}?)?\s*$")
_REPEATING_RE = re.compile(r"(\d{0,50})\.(\d{0,50})\\overline\{(\d{1,50})\}")


def _repeating_to_fraction(m: re.Match) -> str:
    r"""0.1\overline{6} -> \frac{15}{90}: (all digits - digits before the repeat) / (10^b (10^c - 1))."""
    whole, fixed, repeat = m.group(1), m.group(2), m.group(3)
    numerator = int(whole + fixed + repeat) - int(whole + fixed or "0")
    return rf"\frac{{{numerator}}}{{{10 ** len(fixed) * (10 ** len(repeat) - 1)}}}"


_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[+-]?\d{1,3}(?: \d{3})+")
_FUNCTION_LHS_RE = re.compile(r"^([a-zA-Z])\([^()=]{1,20}\)\s*=(?!=)")
_REPLACEMENTS = [  # (pattern, replacement), applied in order
    (re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])"), ""),  # nested boxes: keep the group
    (re.compile(r"\\(?:left|right|[bB]igg?[lr]?)(?![a-zA-Z])\s*\.?"), ""),
    (re.compile(r"\\(?:displaystyle|textstyle)(?![a-zA-Z])"), ""),
    (re.compile(r"\\[lr]?vert(?![a-zA-Z])"), "|"),
    (re.compile(r"\\langle(?![a-zA-Z])"), "("),
    (re.compile(r"\\rangle(?![a-zA-Z])"), ")"),
    (re.compile(r"\\lbrace(?![a-zA-Z])"), r"\{"),
    (re.compile(r"\\rbrace(?![a-zA-Z])"), r"\}"),
    (re.compile(r"\\mathbb\s*\{?\s*R\s*\}?"), r"(-\\infty, \\infty)"),  # the real line
    (re.compile(r"(?<=[)\]])\s*U\s*(?=[(\[])"), r" \\cup "),  # (1, 2) U (3, 4)
    (re.compile(r"\{,\}"), ","),  # 1{,}000
    (re.compile(r"(?<!\\)\\!\s*"), ""),  # 10,\!080
    (re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))"), ""),  # 1\,000
    (re.compile(r"(?<!\\)\\[,;:> ]|\\q?quad(?![a-zA-Z])|~"), " "),  # not the \\ of a matrix
    (re.compile(r"\\?\$|(?<!\\)\\[()\[\]]"), ""),  # $, \$ and the math delimiters \( \[
    (re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ(?![a-zA-Z])|\^\s*\\degree|\\degree"), ""),
    (re.compile(r"\\?%"), ""),
]


def _unwrap_text(s: str) -> tuple[str, list[str]]:
    r"""Replace each \text{...}-like group: "or"/"and" -> "," (a hedge becomes a list), words
    (no digits; in a math font, two or more letters) -> a unit marker \x01 (collected),
    anything else -> its content (\text{42} -> 42, \mathrm{e} -> e)."""
    out, words, pos = [], [], 0
    for _ in range(100):
        m = _TEXT_CMD_RE.search(s, pos)
        if m is None:
            break
        end = _group_end(s, m.end() - 1)
        if end < 0:
            break
        content = s[m.end() : end - 1].strip()
        out.append(s[pos : m.start()])
        letters = sum(ch.isalpha() for ch in content)
        min_letters = 2 if m.group(1) in _MATH_FONTS else 1
        if content.lower() in _HEDGE_WORDS:
            out.append(",")
        elif (letters >= min_letters and not re.search(r"[\d\\^_=]", content)
              and not re.fullmatch(r"\([A-Za-z]\)", content)):  # (C) is a choice, not a unit
            out.append("\x01")
            words.append(content)
        else:
            out.append(" " + content + " ")
        pos = end
    out.append(s[pos:])
    return "".join(out), words


@lru_cache(maxsize=4096)
def normalize(answer: str) -> str:
    """Strip formatting (policy 2's list) and return a canonical string for parsing."""
    s = re.sub("\u221a(\\d+)", r"\\sqrt{\1}", answer)  # unicode root of a whole number: √19
    s = _INVISIBLE_RE.sub("", s.translate(_UNICODE))
    for pattern, replacement in _REPLACEMENTS:
        s = pattern.sub(replacement, s)
    s = _REPEATING_RE.sub(_repeating_to_fraction, s)
    s, words = _unwrap_text(s)
    if not s.replace("\x01", "").strip(" ,.") and words:
        return " ".join(words)  # a text answer: \text{Evelyn}, \text{(C)}
    s = re.sub(r"\x01(?:\s*\^\s*\{?[23]\}?)?", " ", s)  # units, with their ^2 (15\mbox{ cm}^2)
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"(?<=\w)\s+(?:or|and)\s+(?=[\w\\(\[{-])", ", ", s)  # 42 or 43 -> 42, 43
    s = re.sub(r",\s*(?:,\s*)+", ", ", s)  # 1, 2, \text{and } 3
    s = _UNIT_TAIL_RE.sub("", s).strip().rstrip(".").strip()
    for _ in range(3):  # outer braces: {42}
        if s.startswith("{") and _group_end(s, 0) == len(s):
            s = s[1:-1].strip()
    if _THOUSANDS_RE.fullmatch(s):  # 1,000 / 1 000 / 1,000.5 (only when that is the whole answer)
        s = s.replace(",", "").replace(" ", "")
    return _FUNCTION_LHS_RE.sub(r"\1 =", s, count=1)  # f(x) = 2x + 3 -> f = 2x + 3


# ----------------------------------------------------------------------------------------------
# Policy 2 (integer golds), text golds and base-b golds: string work only
# ----------------------------------------------------------------------------------------------

_ASSIGN_RE = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?\s*=\s*")
_INT_RE = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.0*)?")
_HEDGE_TAIL_WORDS = {"or", "and", "to", "more", "less", "than", "about", "approximately",
                     "roughly", "nearly", "almost", "least", "most", "between", "plus", "minus",
                     "times", "not", "over", "under", "above", "below"}
_BASE_RE = re.compile(r"([0-9A-Za-z]+)_\{?(\d+)\}?")
_CHOICE_RE = re.compile(r"\(?([A-Ea-e])\)?")


def integer_literal(s: str) -> str | None:
    """Canonical integer ("-12", "73") if the normalised s is a plain number literal, else None.

    >>> integer_literal("073"), integer_literal("x = 1,000"), integer_literal("27.0")
    ('73', '1000', '27')
    >>> integer_literal("10^3") is None, integer_literal("41, 42") is None
    (True, True)
    """
    s = re.sub(r"^([+-])\s+", r"\1", _ASSIGN_RE.sub("", s, count=1).strip())  # - 5
    if len(s) > 2 and s[0] + s[-1] in ("()", "{}"):
        s = s[1:-1].strip()
    number, _, words = s.partition(" ")  # 42 handshakes: trailing words are units
    if words and all(len(w) >= 3 and w.isalpha() and w.lower() not in _HEDGE_TAIL_WORDS
                     for w in words.split()):
        s = number
    s = re.sub(r"_\{?10\}?$", "", s)  # 42_{10}
    if _INT_RE.fullmatch(s) is None:
        return None
    digits = s.lstrip("+-").split(".")[0].replace(",", "").lstrip("0")
    return ("-" if s.startswith("-") and digits else "") + (digits or "0")


def _is_text(gold: str, raw_gold: str) -> bool:
    r"""A word answer (Evelyn, even, \text{no}, (C)): compared as text, never parsed as a product
    of variables. Two letters count as a word only if the gold wrote \text{}."""
    shortest = 2 if "\\text" in raw_gold or "\\mbox" in raw_gold else 3
    return bool(re.fullmatch(rf"[A-Za-z][A-Za-z ']{{{shortest - 2},}}[A-Za-z]", gold)) or bool(
        re.fullmatch(r"\([A-Ea-e]\)|[A-E]", gold)
    )


def _text_key(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def _fast_verdict(pred: str, gold: str) -> bool | None:
    """The verdict from string work alone, or None if it needs the sympy path. Bounded: a few
    linear regex passes over at most TAIL_CHARS characters."""
    if len(pred) > MAX_ANSWER_CHARS:
        return False
    p, g = normalize(pred), normalize(gold)
    gold_int = integer_literal(g)
    if gold_int is not None:  # policy 2
        return integer_literal(p) == gold_int
    if p == g:
        return True
    base = _BASE_RE.fullmatch(g)
    if base is not None:  # 2516_8: the same digits, with or without the base
        p_base = _BASE_RE.fullmatch(p)
        return p.lower() == base.group(1).lower() or (
            p_base is not None and p_base.groups() == base.groups()
        )
    if _is_text(g, gold):
        choice = _CHOICE_RE.fullmatch(g)
        if choice is not None:  # multiple choice: (C), C, \text{(C)}, \textbf{C}, (C) 42
            p_choice = re.match(r"\(([A-Ea-e])\)", p)
            return (_text_key(p) == choice.group(1).lower()
                    or (p_choice is not None and p_choice.group(1).lower() == choice.group(1).lower()))
        return _text_key(p) == _text_key(g)
    return None


# ----------------------------------------------------------------------------------------------
# Policy 3 (other golds): parse both answers and compare them exactly (math_parse, math_equal)
# ----------------------------------------------------------------------------------------------


def sympy_verdict(pred: str, gold: str) -> bool:
    """Policy 3: parse both normalised answers and compare them. Any failure (a ParseError, or
    one of the many exception types sympy raises) is an incorrect answer."""
    from math_equal import answers_equal  # sympy is imported only on this path
    from math_parse import parse

    try:
        gold_value = parse(normalize(gold))
    except Exception:  # noqa: BLE001 - a gold outside the grammar: compare the text
        return normalize(pred).replace(" ", "") == normalize(gold).replace(" ", "")
    readings = [normalize(pred)]
    if "%" in pred and "%" not in gold:  # 25\% against 0.25: percent as formatting or as /100
        readings.append(rf"\frac{{{readings[0]}}}{{100}}")
    for reading in readings:
        try:
            if answers_equal(gold_value, parse(reading)):
                return True
        except Exception:  # noqa: BLE001
            pass
    return False


def _gold_text(gold) -> str:
    """Datasets sometimes store a gold as a number (42, 27.0, numpy.int64): read it as text."""
    return str(gold) if isinstance(gold, numbers.Real) and not isinstance(gold, bool) else gold


def _verdict(pred: str, gold: str) -> bool:
    gold = _gold_text(gold)
    fast = _fast_verdict(pred, gold)
    return fast if fast is not None else sympy_verdict(pred, gold)


def score_verify(response: str, ground_truth: str) -> RewardResult:
    """mode="verify": the reward of one response (policies 1-4), in this process. Never raises."""
    try:
        pred = extract_answer(response)
        if pred is None:
            return _result(False, None)
        return _result(_verdict(pred, ground_truth), pred)
    except Exception:  # noqa: BLE001 - an unforeseen input is an incorrect answer, not a crash
        return _result(False, None)


# ----------------------------------------------------------------------------------------------
# mode="dapo": verl's DAPO reward (reward_dapo.py)
# ----------------------------------------------------------------------------------------------


def score_dapo(response: str, ground_truth: str) -> RewardResult:
    """mode="dapo": verl's compute_score (reward_dapo.py); the gold is read as text, as in verify
    mode. Never raises (reward_dapo departure 1)."""
    return _result(*dapo_verdict(response, _gold_text(ground_truth)))


# ----------------------------------------------------------------------------------------------
# The public API: score and score_batch, for either mode
# ----------------------------------------------------------------------------------------------


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"reward mode must be one of {MODES} (config key `reward.mode`), "
                         f"got {mode!r}")


def score(response: str, ground_truth: str, mode: str = "verify") -> RewardResult:
    """The reward of one response, in this process (verify mode: no timeout; use score_batch
    for untrusted text at scale). Never raises on its inputs; raises ValueError on a bad mode."""
    _check_mode(mode)
    if mode == "dapo":
        return score_dapo(response, ground_truth)
    return score_verify(response, ground_truth)


def score_batch(responses: list[str], ground_truths: list[str], *, timeout_s: float = 2.0,
                workers: int | None = None, mode: str = "verify") -> list[RewardResult]:
    """score() for each pair. mode="dapo" is string work on 300 characters: it runs here.

    mode="verify": extraction and the integer/text paths run here (string work on a capped
    tail); the rest goes to verifier_pool's `workers` processes (default min(4, CPUs)), each
    check bounded by timeout_s. An item whose worker overruns scores -1 with pred=None and
    timeout=True. Never raises on string input.
    """
    _check_mode(mode)
    if len(responses) != len(ground_truths):
        raise ValueError(f"score_batch needs one ground truth per response, got "
                         f"{len(responses)} responses and {len(ground_truths)} ground truths")
    if mode == "dapo":
        return [score_dapo(r, g) for r, g in zip(responses, ground_truths)]
    results: list[RewardResult | None] = [None] * len(responses)
    preds: list[str | None] = [None] * len(responses)
    jobs: dict[int, tuple[str, str]] = {}
    for i, (response, gold) in enumerate(zip(responses, ground_truths)):
        try:
            preds[i], gold = extract_answer(response), _gold_text(gold)
            fast = None if preds[i] is None else _fast_verdict(preds[i], gold)
        except Exception:  # noqa: BLE001 - a non-string input is an incorrect answer
            preds[i], fast = None, False
        if preds[i] is None or fast is not None:
            results[i] = _result(bool(fast), preds[i])
        else:
            jobs[i] = (preds[i], gold)  # policy 4: the sympy path, in a killable worker
    for i, verdict in verifier_pool.run_checks(jobs, timeout_s, workers).items():
        results[i] = _result(False, None, True) if verdict is None else _result(verdict, preds[i])
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
    return max(penalty, -penalty_factor) + 0.0  # overlong departure 1: clip past the max; no -0.0
