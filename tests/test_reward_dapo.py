r"""reward.py's mode="dapo" (verifier/dapo.py) against verl's own outputs, and its bounds on adversarial input.

VERL_CASES holds (response, ground_truth, acc, score, pred): each response and gold was written
by hand (typical endings and the tricky ones: `Answer:` lines with $...$, \boxed, \text{},
units, commas, "=" signs, \frac shorthand, \dfrac, trailing periods, several Answer lines, an
Answer beyond the last 300 characters, no Answer line, boxed only, case variants, unicode,
empty and very long responses), and acc, score and pred are what verl 0.5.0's
`verl.utils.reward_score.math_dapo.compute_score(response, ground_truth)` returned on them
(verl 0.5.0 was current when the paper was run; verl 0.4.1, 0.6.0, 0.7.0, 0.8.0 and 0.9.0
return the same on every case). verl 0.9.1 added a `\boxed{}` fallback for responses without an
`Answer:` line, so it differs on the four boxed-only cases below; mode="dapo" follows the
paper's verl. To relabel: `pip install --no-deps verl==0.5.0` into a scratch environment, load
that one file with importlib, and call compute_score on each (response, ground_truth).
"""

import importlib.util
import re
import string
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reward import RewardResult, score, score_batch
from verifier import dapo, pool

VERL_CASES = [
    # -- typical: an `Answer:` line at the end, integer golds as the datasets store them
    ("Let me compute.\nAnswer: 42", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42", "43", False, -1.0, '42'),
    ("Let me compute.\nAnswer: 73", "073", False, -1.0, '73'),
    ("Let me compute.\nAnswer: 073", "073", True, 1.0, '073'),
    ("Let me compute.\nAnswer: 27", "27.0", False, -1.0, '27'),
    ("Let me compute.\nAnswer: 27.0", "27.0", True, 1.0, '27.0'),
    ("Let me compute.\nAnswer: -1", "-1.0", False, -1.0, '-1'),
    ("Let me compute.\nAnswer: 42.", "42", False, -1.0, '42.'),
    ("Let me compute.\nAnswer: 42 ", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42\r", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42\n", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42\n\nThat is all.", "42", True, 1.0, '42'),
    # -- dollars
    ("Let me compute.\nAnswer: $42$", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: $42$.", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: $42.$", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: The answer is $42$ apples", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: $4$ or $2$", "4", True, 1.0, '4'),
    ("Let me compute.\nAnswer: 42$", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: $$42$$", "42", False, -1.0, ''),
    ("Let me compute.\nAnswer: \\$42", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: $\\$42$", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: \\(42\\)", "42", False, -1.0, '\\(42\\)'),
    # -- boxes
    ("Let me compute.\nAnswer: \\boxed{42}", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: $\\boxed{42}$", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: $\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}",
     True, 1.0, '\\frac{1}{2}'),
    ("Let me compute.\nAnswer: \\boxed{42} and \\boxed{43}", "42",
     False, -1.0, '42}and\\boxed{43'),
    ("So the answer is $\\boxed{42}$.", "42", False, -1.0, '[INVALID]'),
    ("Answer: 41\nSo the answer is $\\boxed{42}$.", "42", False, -1.0, '41'),
    ("\\boxed{42}", "42", False, -1.0, '[INVALID]'),
    ("\\boxed{42}\nAnswer: 42", "42", True, 1.0, '42'),
    ("\\boxed{42}\nAnswer: 41", "42", False, -1.0, '41'),
    ("Final Answer: \\boxed{42}", "42", True, 1.0, '42'),
    ("The final answer is $\\boxed{\\dfrac{14}{3}}$.", "\\dfrac{14}{3}", False, -1.0, '[INVALID]'),
    ("The answer is \\boxed{073}.", "073", False, -1.0, '[INVALID]'),
    # -- \text, \textbf, \mbox, units
    ("Let me compute.\nAnswer: \\text{Evelyn}", "\\text{Evelyn}", True, 1.0, 'Evelyn'),
    ("Let me compute.\nAnswer: Evelyn", "\\text{Evelyn}", True, 1.0, 'Evelyn'),
    ("Let me compute.\nAnswer: \\textbf{Evelyn}", "\\text{Evelyn}", True, 1.0, 'Evelyn'),
    ("Let me compute.\nAnswer: \\mbox{Evelyn}", "\\text{Evelyn}", True, 1.0, 'Evelyn'),
    ("Let me compute.\nAnswer: (C)", "\\text{(C)}", True, 1.0, '(C)'),
    ("Let me compute.\nAnswer: \\textbf{(C)}", "\\text{(C)}", True, 1.0, '(C)'),
    ("Let me compute.\nAnswer: 42 \\text{ cm}", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42 cm", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42 \\text{cm}^2", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42 ways", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42 degrees", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42^\\circ", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42^{\\circ}", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42 students", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42 apples", "42", False, -1.0, '42apples'),
    ("Let me compute.\nAnswer: 42\\%", "42", False, -1.0, '42\\%'),
    ("Let me compute.\nAnswer: 42 \\text{ and } 43", "42,43", True, 1.0, '4243'),
    ("Let me compute.\nAnswer: a 42", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: an integer 42", "42", False, -1.0, 'integer42'),
    ("Let me compute.\nAnswer: formula 5", "5", False, -1.0, 'formul5'),
    # -- commas and thousands
    ("Let me compute.\nAnswer: 1,000", "1000", True, 1.0, '1000'),
    ("Let me compute.\nAnswer: 1000", "1,000", True, 1.0, '1000'),
    ("Let me compute.\nAnswer: 1{,}000", "1000", True, 1.0, '1000'),
    ("Let me compute.\nAnswer: 1,\\!000", "1000", True, 1.0, '1000'),
    ("Let me compute.\nAnswer: 1\\,000", "1000", False, -1.0, '1\\,000'),
    ("Let me compute.\nAnswer: 1 000", "1000", True, 1.0, '1000'),
    ("Let me compute.\nAnswer: 1,00,0", "1000", True, 1.0, '1000'),
    ("Let me compute.\nAnswer: 1,000.5", "1000.5", False, -1.0, '1,000.5'),
    ("Let me compute.\nAnswer: 3, 5", "3,5", True, 1.0, '35'),
    # -- "=" signs
    ("Let me compute.\nAnswer: x = 42", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: $x = 42$", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 6 \\times 7 = 42", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42 = 6 \\times 7", "42", False, -1.0, '6\\times7'),
    ("Let me compute.\nAnswer: x = 5", "x = 5", True, 1.0, '5'),
    ("Let me compute.\nAnswer: 5", "x = 5", True, 1.0, '5'),
    ("Let me compute.\nAnswer: 1 \\le x = 2", "2", True, 1.0, '2'),
    # -- fractions: shorthand, \dfrac, decimals
    ("Let me compute.\nAnswer: \\frac{1}{2}", "\\frac{1}{2}", True, 1.0, '\\frac{1}{2}'),
    ("Let me compute.\nAnswer: \\frac12", "\\frac{1}{2}", True, 1.0, '\\frac{1}{2}'),
    ("Let me compute.\nAnswer: \\frac{1}{2}", "\\frac12", True, 1.0, '\\frac{1}{2}'),
    ("Let me compute.\nAnswer: \\frac 12", "\\frac{1}{2}", True, 1.0, '\\frac{1}{2}'),
    ("Let me compute.\nAnswer: \\frac1{2}", "\\frac{1}{2}", False, -1.0, '\\frac{1}{{}2}'),
    ("Let me compute.\nAnswer: \\frac123", "\\frac{1}{2}3", True, 1.0, '\\frac{1}{2}3'),
    ("Let me compute.\nAnswer: \\dfrac{1}{2}", "\\frac{1}{2}", False, -1.0, '\\dfrac{1}{2}'),
    ("Let me compute.\nAnswer: \\dfrac{1}{2}", "\\dfrac{1}{2}", True, 1.0, '\\dfrac{1}{2}'),
    ("Let me compute.\nAnswer: \\tfrac12", "\\tfrac{1}{2}", True, 1.0, '\\tfrac{1}{2}'),
    ("Let me compute.\nAnswer: 1/2", "\\frac{1}{2}", False, -1.0, '1/2'),
    ("Let me compute.\nAnswer: 0.5", "\\frac{1}{2}", False, -1.0, '0.5'),
    ("Let me compute.\nAnswer: \\frac{3}{4}\\text{ cups}", "\\frac{3}{4}",
     False, -1.0, '\\frac{3}{4}cups'),
    ("Let me compute.\nAnswer: frac", "frac", True, 1.0, 'frac'),
    ("Let me compute.\nAnswer: \\frac", "\\frac", True, 1.0, '\\frac'),
    ("Let me compute.\nAnswer: \\frac1", "\\frac1", True, 1.0, '\\frac1'),
    # -- radicals and other math
    ("Let me compute.\nAnswer: 2\\sqrt{3}", "2\\sqrt{3}", True, 1.0, '2\\sqrt{3}'),
    ("Let me compute.\nAnswer: 2\\sqrt3", "2\\sqrt{3}", True, 1.0, '2\\sqrt{3}'),
    ("Let me compute.\nAnswer: 2 \\sqrt{3}", "2\\sqrt{3}", True, 1.0, '2\\sqrt{3}'),
    ("Let me compute.\nAnswer: \\sqrt{12}", "2\\sqrt{3}", False, -1.0, '\\sqrt{12}'),
    ("Let me compute.\nAnswer: \\sqrt32", "\\sqrt{3}2", True, 1.0, '\\sqrt{3}2'),
    ("Let me compute.\nAnswer: \\pi", "\\pi", True, 1.0, '\\pi'),
    ("Let me compute.\nAnswer: (1, 2)", "(1,2)", True, 1.0, '(1,2)'),
    ("Let me compute.\nAnswer: \\left( 1, 2 \\right)", "(1,2)", False, -1.0, '\\left(1,2\\right)'),
    ("Let me compute.\nAnswer: \\overline{AB}", "AB", True, 1.0, 'AB'),
    ("Let me compute.\nAnswer: 1, 2, \\ldots", "1,2", True, 1.0, '12'),
    ("Let me compute.\nAnswer: \"42\"", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42\\;", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 5\\mathrm{th}", "5", True, 1.0, '5'),
    # -- several Answer lines, case and spacing variants
    ("Answer: 41\nWait, that is wrong.\nAnswer: 42", "42", True, 1.0, '42'),
    ("Answer: 42\nWait, that is wrong.\nAnswer: 41", "42", False, -1.0, '41'),
    ("Answer: 41 Answer: 42", "42", False, -1.0, '41Answer:42'),
    ("Answer: 41 Answer: 42", "41Answer:42", True, 1.0, '41Answer:42'),
    ("answer: 42", "42", True, 1.0, '42'),
    ("ANSWER: 42", "42", True, 1.0, '42'),
    ("AnSwEr:42", "42", True, 1.0, '42'),
    ("Answer : 42", "42", True, 1.0, '42'),
    ("Answer:\t42", "42", True, 1.0, '42'),
    ("Answer:\n42", "42", True, 1.0, '42'),
    ("Answer:\n\n  42\n", "42", True, 1.0, '42'),
    ("Answer:", "42", False, -1.0, '[INVALID]'),
    ("Answer:   ", "", True, 1.0, ''),
    ("Answer:   \n", "", True, 1.0, ''),
    ("**Answer:** 42", "42", False, -1.0, '**42'),
    ("**Answer**: 42", "42", False, -1.0, '[INVALID]'),
    ("Final Answer: The final answer is $42$. I hope it is correct.", "42", True, 1.0, '42'),
    ("The final answer is 42.", "42", False, -1.0, '[INVALID]'),
    ("My answer is 42.", "42", False, -1.0, '[INVALID]'),
    ("Answers: 42", "42", False, -1.0, '[INVALID]'),
    ("The answer is: 42", "42", False, -1.0, '[INVALID]'),
    ("myanswer:42", "42", True, 1.0, '42'),
    ("Answer:: 42", "42", False, -1.0, ':42'),
    ("Answer- 42", "42", False, -1.0, '[INVALID]'),
    ("Answer\uff1a42", "42", False, -1.0, '[INVALID]'),
    ("Answer:42Answer:43", "43", False, -1.0, '42Answer:43'),
    # -- the 300-character window
    ("Answer: 42\n" + "x" * 289, "42", True, 1.0, '42'),
    ("Answer: 42\n" + "x" * 290, "42", False, -1.0, '[INVALID]'),
    ("Answer: 42\n" + "x" * 400, "42", False, -1.0, '[INVALID]'),
    ("x" * 5000 + "\nAnswer: 42", "42", True, 1.0, '42'),
    ("Answer: 41\n" + "x" * 5000 + "\nAnswer: 42", "42", True, 1.0, '42'),
    ("Answer: 41\n" + "x" * 400, "[INVALID]", True, 1.0, '[INVALID]'),
    ("x" * 300 + "nswer: 42", "42", False, -1.0, '[INVALID]'),
    ("Answer: 1234567" + "8" * 300, "8" * 293, False, -1.0, '[INVALID]'),
    # -- no Answer line
    ("", "42", False, -1.0, '[INVALID]'),
    ("The answer is 42.", "42", False, -1.0, '[INVALID]'),
    ("no answer here", "[INVALID]", True, 1.0, '[INVALID]'),
    ("Answer: [INVALID]", "[INVALID]", True, 1.0, '[INVALID]'),
    ("42", "42", False, -1.0, '[INVALID]'),
    # -- unicode
    ("Let me compute.\nAnswer: \uff14\uff12", "\uff14\uff12", True, 1.0, '４２'),
    ("Let me compute.\nAnswer: \uff14\uff12", "42", False, -1.0, '４２'),
    ("Let me compute.\nAnswer: \u00bd", "\\frac{1}{2}", False, -1.0, '½'),
    ("Let me compute.\nAnswer: \u221a3", "\u221a3", True, 1.0, '√3'),
    ("Let me compute.\nAnswer: \u03c0", "\\pi", False, -1.0, 'π'),
    ("Let me compute.\nAnswer: \u221242", "-42", False, -1.0, '−42'),
    ("Let me compute.\nAnswer:\u00a042", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42\u00a0", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42\u2028more", "42", False, -1.0, '42\u2028more'),
    ("Let me compute.\nAn\u017fwer: 42", "42", True, 1.0, '42'),
    ("Let me compute.\n\u0391nswer: 42", "42", False, -1.0, '[INVALID]'),
    ("\u7b54\u6848: 42\nAnswer: \u5341", "\u5341", True, 1.0, '十'),
    ("Let me compute.\nAnswer: 42\U0001F600", "42\U0001F600", True, 1.0, '42😀'),
    ("Let me compute.\nAnswer: \u00b2", "\u00b2", True, 1.0, '²'),
    # -- golds with formatting of their own
    ("Let me compute.\nAnswer: 42", "$42$", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42", "\\boxed{42}", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42", "x = 42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42", " 42 ", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42", "42\n", True, 1.0, '42'),
    ("Let me compute.\nAnswer: 42", "4\n2", False, -1.0, '42'),
    ("Let me compute.\nAnswer: 5", "$1$\n$5$", False, -1.0, '5'),
    ("Let me compute.\nAnswer: 42", "\\text{42\n}", False, -1.0, '42'),
    ("Let me compute.\nAnswer: 3", "\\text{3\ns}", False, -1.0, '3'),
    ("Let me compute.\nAnswer: 2", "\\frac\n2", False, -1.0, '2'),
    ("Let me compute.\nAnswer: 10", "10\\text{ m}", True, 1.0, '10'),
    ("Let me compute.\nAnswer: 10", "10 \\text{m}", True, 1.0, '10'),
    ("Let me compute.\nAnswer: \\text{east}", "\\text{east}", True, 1.0, 'east'),
    ("Let me compute.\nAnswer: \\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}",
     True, 1.0, '\\frac{\\sqrt{3}}{2}'),
    ("Let me compute.\nAnswer: \\frac{\\sqrt3}{2}", "\\frac{\\sqrt{3}}{2}",
     True, 1.0, '\\frac{\\sqrt{3}}{2}'),
    ("Let me compute.\nAnswer: \\dfrac{14}{3}", "\\dfrac{14}{3}", True, 1.0, '\\dfrac{14}{3}'),
    ("Let me compute.\nAnswer: \\frac{14}{3}", "\\dfrac{14}{3}", False, -1.0, '\\frac{14}{3}'),
    ("Let me compute.\nAnswer: 2516_8", "2516_8", True, 1.0, '2516_8'),
    ("Let me compute.\nAnswer: 2516", "2516_8", False, -1.0, '2516'),
    ("Let me compute.\nAnswer: \\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
     "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
     True, 1.0, '\\begin{pmatrix}1\\2\\end{pmatrix}'),
    ("Let me compute.\nAnswer: [-2, 7]", "[-2,7]", True, 1.0, '[-2,7]'),
    ("Let me compute.\nAnswer: (-\\infty, 2) \\cup (3, \\infty)", "(-\\infty,2)\\cup(3,\\infty)",
     True, 1.0, '(-\\infty,2)\\cup(3,\\infty)'),
    # -- substitutions that interact
    ("Let me compute.\nAnswer: \\text{\\text{a}}", "\\text{a}", False, -1.0, '\\text{a}'),
    ("Let me compute.\nAnswer: \\boxed{\\boxed{42}}", "42", False, -1.0, '\\boxed{42}'),
    ("Let me compute.\nAnswer: \\boxed{4} + \\boxed{2}", "4}+\\boxed{2",
     True, 1.0, '4}+\\boxed{2'),
    ("Let me compute.\nAnswer: \\boxed{42", "\\boxed{42", True, 1.0, '\\boxed{42'),
    ("Let me compute.\nAnswer: ununitsits", "units", False, -1.0, 'units'),
    ("Let me compute.\nAnswer: squarefeet 42", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: \\text{}^2 42", "42", True, 1.0, '42'),
    ("Let me compute.\nAnswer: \\textbf{\\overline{x}}", "x", True, 1.0, 'x'),
    ("Let me compute.\nAnswer: $a$ $b$ $c$", "a", True, 1.0, 'a'),
    ("Let me compute.\nAnswer: \\sqrt\\frac12", "\\sqrt{\\frac{1}{2}}",
     False, -1.0, '\\sqrt{\\}frac{1}{2}'),
    ("Let me compute.\nAnswer: \\frac\\sqrt23", "\\frac{\\}{s}qrt23",
     True, 1.0, '\\frac{\\}{s}qrt23'),
    ("Let me compute.\nAnswer: ,,", "", False, -1.0, ',,'),
    ("Let me compute.\nAnswer: 0,0", "00", True, 1.0, '00'),
    # -- very long
    ("Let me compute. " * 10_000 + "\nAnswer: 42", "42", True, 1.0, '42'),
    ("Answer: " + "9" * 10_000, "9" * 292, False, -1.0, '[INVALID]'),
    ("$" * 100_000 + "\nAnswer: 42", "42", True, 1.0, '42'),
    ("\\boxed{" * 50_000 + "Answer: 42", "42", True, 1.0, '42'),
    ("Answer: " * 100_000 + "\nAnswer: 42", "42", True, 1.0, '42'),
    ("Answer: 4" + " " * 100_000 + "2", "4", False, -1.0, '[INVALID]'),
    ("Answer:" + " " * 100_000, "42", False, -1.0, '[INVALID]'),
]


@pytest.mark.parametrize("response,gold,acc,score_,pred", VERL_CASES,
                         ids=[f"{i:03d}" for i in range(len(VERL_CASES))])
def test_dapo_mode_equals_verl(response, gold, acc, score_, pred):
    result = score(response, gold, mode="dapo")
    assert (result.acc, result.score, result.pred) == (acc, score_, pred)
    assert result.timeout is False


def test_the_cases_cover_both_verdicts_and_no_answer():
    assert len(VERL_CASES) >= 150
    assert {True, False} == {c[2] for c in VERL_CASES}
    assert sum(c[4] == "[INVALID]" for c in VERL_CASES) >= 10


def test_score_batch_dapo_equals_score_and_starts_no_pool(monkeypatch):
    monkeypatch.setattr(pool, "Pool", None)  # any attempt to build a pool would fail
    responses, golds = [c[0] for c in VERL_CASES], [c[1] for c in VERL_CASES]
    batch = score_batch(responses, golds, mode="dapo")
    assert batch == [score(r, g, mode="dapo") for r, g in zip(responses, golds)]


def test_verify_is_the_default_and_the_modes_differ_where_documented():
    boxed = r"So the answer is $\boxed{27}$."
    assert score(boxed, "27.0") == score(boxed, "27.0", mode="verify")
    assert score(boxed, "27.0").acc is True
    assert score(boxed, "27.0", mode="dapo") == RewardResult(False, -1.0, "[INVALID]")
    assert [r.acc for r in score_batch(["Answer: 0.5"], [r"\frac{1}{2}"])] == [True]
    assert [r.acc for r in score_batch(["Answer: 0.5"], [r"\frac{1}{2}"], mode="dapo")] == [False]


def test_a_bad_mode_is_refused_with_the_config_key():
    with pytest.raises(ValueError, match=r"reward\.mode.*'strict'"):
        score("Answer: 1", "1", mode="strict")
    with pytest.raises(ValueError, match=r"reward\.mode"):
        score_batch(["Answer: 1"], ["1"], mode="Dapo")


def test_inputs_verl_rejects_are_incorrect_answers():
    """verifier.dapo never raises: verl raises on these; mode="dapo" scores them."""
    assert score("Answer: 27", 27, mode="dapo").acc is True  # type: ignore[arg-type]
    assert score("Answer: 27.0", 27.0, mode="dapo").acc is True  # type: ignore[arg-type]
    incorrect = RewardResult(False, -1.0, None)
    for response in (None, 42, b"Answer: 1", ["Answer: 1"]):
        assert score(response, "1", mode="dapo") == incorrect  # type: ignore[arg-type]
    assert score("Answer: 1", None, mode="dapo") == incorrect  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# The line-by-line rules against the same rules written as (backtracking) regular expressions
# ----------------------------------------------------------------------------------------------

_TEXT = st.lists(st.sampled_from(["$", "\n", "{", "}", "a", " ", "\\text{", "\\textbf{", "\\boxed{",
                                  "\\overline{", "\\", "x"]), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_line_rules_equal_their_regex_form(s):
    assert dapo._per_line(s, dapo._first_math_span) == re.sub(
        r"[^\n$]*\$([^\n$]*)\$.*", r"$\1$", s)
    for opener in ("\\text{", "\\textbf{", "\\overline{"):
        assert dapo._per_line(s, dapo._unwrap_command, opener) == re.sub(
            re.escape(opener) + r"([^}\n]*)\}", r"\1", s)
    assert dapo._per_line(s, dapo._unwrap_boxed) == re.sub(r"\\boxed\{(.*)\}", r"\1", s)


# ----------------------------------------------------------------------------------------------
# Adversarial input: bounded time (no regex can backtrack badly; the work is linear)
# ----------------------------------------------------------------------------------------------

MB = 2**20
ADVERSARIAL_RESPONSES = [
    "answer" + " " * 294,  # \s* runs, then no colon
    "Answer:" + "\n" * 293,  # \s* over newlines, then nothing to capture
    "Answer:" + " \t\n" * 97,
    "answer" * 50,
    "Answer:" * 43,
    "aNsWeR :" * 38,
    "$" * MB,
    "$x" * (MB // 2),
    "\\text{" * (MB // 6),
    "\\boxed{" * (MB // 7),
    "Answer: " + "\\boxed{" * 41,
    "Answer: " + "frac" * 73,
    "Answer: " + "sqrt" * 73,
    "Answer: " + "=" * 292,
    "Answer: " + "a " * 146,
    "Answer: " + "\\text{}^2" * 32,
    "x" * (16 * MB) + "Answer: 1",
]
ADVERSARIAL_GOLDS = [  # golds are dataset text, but normalising one must still be linear
    "$" + "x" * MB,  # one dollar: verl's (.*?)\$(.*?)\$(.*) is quadratic on this
    "\\text{" * (MB // 6),  # verl's (\\text\{)(.*?)(\}) is quadratic on this
    "\\boxed{" * (MB // 7),
    ("\\text{" + "x" * 100 + "\n") * (MB // 107),
    "frac" * (MB // 4),
    "=" * MB,
    string.printable * (MB // 100),
]


@pytest.mark.parametrize("response", ADVERSARIAL_RESPONSES,
                         ids=[f"response-{i}" for i in range(len(ADVERSARIAL_RESPONSES))])
def test_adversarial_responses_are_fast(response):
    start = time.monotonic()
    result = score(response, "1", mode="dapo")
    assert time.monotonic() - start < 0.5
    assert result.score in (1.0, -1.0)


@pytest.mark.parametrize("gold", ADVERSARIAL_GOLDS,
                         ids=[f"gold-{i}" for i in range(len(ADVERSARIAL_GOLDS))])
def test_adversarial_golds_are_fast(gold):
    start = time.monotonic()
    result = score("Answer: 1", gold, mode="dapo")
    assert time.monotonic() - start < 2.0  # about 1 MB of gold: linear work is ~0.1 s
    assert result.acc is False


def test_the_worst_tail_costs_milliseconds():
    """300 characters bound the `Answer:` regex's work: 1000 worst-case calls in well under a
    second each way (a backtracking blow-up would take seconds for one)."""
    start = time.monotonic()
    for response in ADVERSARIAL_RESPONSES[:6] * 170:
        score(response, "1", mode="dapo")
    assert time.monotonic() - start < 5.0


# ----------------------------------------------------------------------------------------------
# docs/reward.md shows what scripts/reward_table.py computes
# ----------------------------------------------------------------------------------------------


def test_docs_table_is_current():
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("reward_table", root / "scripts/reward_table.py")
    reward_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward_table)
    doc = (root / "docs" / "reward.md").read_text()
    shown = re.search(r"<!-- table: python scripts/reward_table.py -->\n(.*?)\n<!-- end table -->",
                      doc, re.DOTALL)
    assert shown is not None, "docs/reward.md lost its table markers"
    assert shown.group(1) == reward_table.table(reward_table.load_golds(), workers=2), (
        "docs/reward.md is stale: paste the output of `python scripts/reward_table.py`")
