r"""Gold and answer forms the verify mode reads since measured misses on real completions: golds written as
prose or display math, named quantities, units and degrees, sets and \pm, yes/no and qualified answers,
gcd / lcm and renamed arbitrary constants, closed arithmetic against an integer gold. Each reading is tested
both ways: the right form scores +1, a near miss with a wrong value -1. Every expectation is hand-written.
"""

import time

import pytest

from reward import score, score_batch


def case(kind, gold, pred, expected):
    """A boxed answer; a value with a `\\text{}` remark on an Answer line (verifier/boxes.py reads a box holding
    prose as a sentence, and gives no answer for one it cannot read)."""
    response = f"Answer: ${pred}$" if kind == "qual" else rf"... so \boxed{{{pred}}}"
    return pytest.param(gold, response, expected, id=f"{kind}:{gold[:18]}<-{pred[:24]}")


CASES = [
    # -- golds as sentences, display math, boxes; "A or B" golds are lists -------------------------
    case("gold", "The answer is $5$.", "5", True),
    case("gold", "The answer is $5$.", "6", False),
    case("gold", "There are 12 ways.", "12", True),
    case("gold", "There are 12 ways.", "13", False),
    case("gold", r"\[ x = 3 \]", "3", True),
    case("gold", r"\[ x = 3 \]", "4", False),
    case("gold", r"$$\frac{1}{2}$$", r"\frac{1}{2}", True),
    case("gold", r"$\frac{1}{2}$", "0.5", True),
    case("gold", r"$\frac{1}{2}$", "0.4", False),
    case("gold", r"\boxed{7}", "7", True),
    case("gold", r"\boxed{7}", "8", False),
    case("gold", r"$\boxed{\frac{3}{4}}$", r"\frac34", True),
    case("gold", "The answer is about $5$.", "5", False),  # a hedged gold is read as written: no match
    case("or", "3 or 5", "3, 5", True),
    case("or", "3 or 5", r"\{3, 5\}", True),
    case("or", "3 or 5", "3", False),
    case("or", "3 or 5", "5", False),
    case("or", "$x=1$ or $x=2$", "x = 1, 2", True),
    case("or", "$x=1$ or $x=2$", "1, 2", True),
    case("or", "$x=1$ or $x=2$", "x=1", False),
    case("or", "$x=1$ or $x=2$", "1, 3", False),
    # -- a named quantity or chain on the prediction side ------------------------------------------
    case("name", r"\frac{7}{2}", r"\mathbb{E}[X] = \frac{7}{2}", True),
    case("name", r"\frac{7}{2}", r"\mathbb{E}[X] = \frac{5}{2}", False),
    case("name", "7", r"\mathbb{E}[X] = 7", True),
    case("name", "7", r"E[X] = 8", False),
    case("name", "0.3", "P(A) = 0.3", True),
    case("name", "0.3", "P(A) = 0.4", False),
    case("name", "52", "PQ^2 = 52", True),
    case("name", "52", "PQ^2 = 53", False),
    case("name", "x^2+1", "f(x) = x^2 + 1", True),
    case("name", "x^2+1", "f(x) = x^2 + 2", False),
    case("name", r"\frac{3}{4}", r"\frac{a}{b} = \frac{3}{4}", True),
    case("name", r"\frac{3}{4}", r"\frac{a}{b} = \frac{1}{4}", False),
    case("name", r"\frac{3}{4}", r"\frac{x}{2} = \frac{3}{4}", False),  # x/2 = 3/4 is an equation, x = 3/2
    case("name", "10", "2x = 10", False),
    # -- units and degrees, on either side ---------------------------------------------------------
    case("unit", r"82 \mathrm{~m}", "82", True),
    case("unit", "82", r"82 \mathrm{~m}", True),
    case("unit", r"82 \mathrm{~m}", "83", False),
    case("unit", "60", r"60 \text{ km/h}", True),
    case("unit", r"60 \text{ km/h}", "60", True),
    case("unit", r"60 \text{ km/h}", "61", False),
    case("unit", "30", r"30^\circ", True),
    case("unit", r"30^\circ", "30", True),
    case("unit", r"30^\circ", "31", False),
    case("unit", "30, 60", r"30^{\circ}, 60^{\circ}", True),
    case("unit", r"30^{\circ}, 60^{\circ}", "30, 60", True),
    case("unit", r"30^{\circ}, 60^{\circ}", "30, 61", False),
    case("unit", r"3\times10^8", r"3 \times 10^{8} \mathrm{~m/s}", True),
    case("unit", r"3 \times 10^{8} \mathrm{~m/s}", r"3\times10^8", True),
    case("unit", r"3\times10^8", r"3 \times 10^{7} \mathrm{~m/s}", False),
    case("unit", r"12 \mathrm{~cm}^2", "12", True),
    case("unit", "12", r"12 \mathrm{~cm}^2", True),
    case("unit", r"12 \mathrm{~cm}^2", "13", False),
    case("unit", r"2 \mathrm{m}", "2", False),  # \mathrm{m} with no space before it may be the variable m
    # -- ratios ------------------------------------------------------------------------------------
    case("ratio", "3:2", "3:2", True),
    case("ratio", r"\frac{3}{2}", "3:2", True),
    case("ratio", "1.5", "3:2", True),
    case("ratio", r"\frac{3}{2}", "2:3", False),
    case("ratio", "3:2", "2:3", False),
    case("ratio", "7:32", r"\frac{7}{32}", False),  # a gold with a colon may be a time: never a fraction
    case("ratio", "3", "6:2", False),
    # -- sets, \pm, cases, full-width punctuation --------------------------------------------------
    case("set", r"\{1, 2\}", "1, 2", True),
    case("set", "1, 2", r"\{1, 2\}", True),
    case("set", r"\{1, 2\}", "1, 3", False),
    case("pm", "2, -2", r"x = \pm 2", True),
    case("pm", r"\pm 2", r"x = \pm 2", True),
    case("pm", "2, -2", r"\pm 2", True),
    case("pm", r"\pm 2", "2, -2", True),
    case("pm", "2, -2", "x = 2", False),
    case("pm", r"\pm 2", "2", False),
    case("cases", r"\begin{cases} x & x > 0 \\ -x & x \le 0 \end{cases}",
         r"\begin{cases}x&x>0\\-x&x\leq 0\end{cases}", True),
    case("cases", r"\begin{cases} x & x > 0 \\ -x & x \le 0 \end{cases}",
         r"\begin{cases} x & x > 0 \\ x & x \le 0 \end{cases}", False),
    case("cases", r"\begin{cases} x & x > 0 \\ -x & x \le 0 \end{cases}",
         r"\begin{cases} x & x \ge 0 \\ -x & x < 0 \end{cases}", False),  # as written: other conditions
    case("wide", "(1, 2)", "\uff081\uff0c2\uff09", True),
    case("wide", "(1, 2)", "\uff081\uff0c3\uff09", False),
    case("wide", "1:2", "1\uff1a2", True),
    case("wide", "1; 2", "1\uff1b2", True),
    case("wide", "1:2", "1\uff1a3", False),
    # -- yes/no and qualified answers --------------------------------------------------------------
    case("yes", "Yes", r"\text{Yes}", True),
    case("yes", "Yes", r"\text{yes, it is possible}", True),
    case("yes", "No", r"\text{No}", True),
    case("yes", "No", r"\text{no, it is not possible}", True),
    case("yes", "Yes", "yes and no", False),
    case("yes", "Yes", r"\text{not necessarily}", False),
    case("yes", "Yes", r"\text{No}", False),
    case("yes", "Yes", r"\text{yes, if } n \text{ is even}", False),
    case("yes", "Yes", r"\text{yes, but not always}", False),
    case("yes", "No", r"\text{no, yes}", False),
    case("qual", "x^2 + c", r"x^2 + c \text{ for some constant } c", True),
    case("qual", "x^2 + c", r"x^2 + 2c \text{ for some constant } c", False),
    case("qual", "5", r"5 \text{ (since the sum is odd)}", True),
    case("qual", "5", r"6 \text{ (since the sum is odd)}", False),
    case("qual", "5", r"5 \text{ or } 6", False),
    case("qual", "5", r"5 \text{ (or 6)}", False),
    case("qual", "3, 5", r"3 \text{ for all } n, 5", False),  # a list after the remark: not dropped
    # -- \dbinom, \gcd, \operatorname{lcm}, arbitrary constants ------------------------------------
    case("binom", r"\binom{5}{2}", r"\dbinom{5}{2}", True),
    case("binom", r"\binom{5}{2}", r"\tbinom{5}{3}", True),
    case("binom", r"\binom{n}{2}", r"\dbinom{n}{2}", True),
    case("binom", r"\binom{n}{2}", r"\dbinom{n}{3}", False),
    case("gcd", "6", r"\gcd(12, 18)", True),
    case("gcd", "7", r"\gcd(12, 18)", False),
    case("gcd", "36", r"\operatorname{lcm}(12, 18)", True),
    case("gcd", "35", r"\operatorname{lcm}(12, 18)", False),
    case("gcd", r"\gcd(a, b)", r"\gcd(a, b)", True),
    case("gcd", r"\gcd(a, b)", r"\operatorname{lcm}(a, b)", False),
    case("const", "y = c e^{x}", "y = C e^{x}", True),
    case("const", "y = c e^{x}", "y = C e^{2x}", False),
    case("const", r"C_1 e^x + C_2 e^{2x}", r"c_2 e^{x} + c_1 e^{2x}", True),
    case("const", r"C_1 e^x + C_2 e^{2x}", r"c_1 e^{x} + c_1 e^{2x}", False),  # one constant for two
    case("const", r"C_1 e^x + C_2 e^{2x}", r"c_1 e^{x} + c_2 e^{3x}", False),
    case("const", "y = Ke^{x}", "y = ke^x", True),
    case("const", "x^2 + C", "x^2 + k", True),
    case("const", "2c", "2C", False),  # no variable besides c: c may be a parameter the problem gave
    case("const", "x + 1", "x + C", False),  # no constant in the gold
    # -- closed arithmetic against an integer gold: exact, bounded ---------------------------------
    case("closed", "5", r"\sqrt{3^2 + 4^2}", True),
    case("closed", "5", r"\sqrt{3^2 + 5^2}", False),
    case("closed", "256", "2^8", True),
    case("closed", "256", "2^9", False),
    case("closed", "10", r"\binom{5}{2}", True),
    case("closed", "10", r"\dbinom{5}{2}", True),
    case("closed", "10", r"\binom{5}{3} + 1", False),
    case("closed", "1000", "10^3", True),
    case("closed", "1000", r"x = 10^3", True),
    case("closed", "1000", "10^4", False),
    case("closed", "-8", "(-2)^3", True),
    case("closed", "24", "4!", True),
    case("closed", "1000", r"10^{10^{10}}", False),  # refused by the parser's caps
    case("closed", "5", r"\sqrt{26}", False),
    case("closed", "5", "x + 5", False),
    case("closed", "256", "about 2^8", False),  # a hedge
    case("closed", "256", r"\approx 2^8", False),
    case("closed", "5", r"\sqrt{3^2 + 4^2", False),  # cut off
    case("closed", "1", r"(\sqrt{2}+1)(\sqrt{2}-1)", False),  # equal only after expansion: not canonical
    case("closed", "42", r"42 \pm 1", False),
    case("closed", "2", "4^{1/2}", True),
    case("closed", "2", r"\frac{5}{2}", False),
]


@pytest.mark.parametrize("gold,response,expected", CASES)
def test_gold_and_answer_forms(gold, response, expected):
    assert score(response, gold).acc is expected


def test_gold_and_answer_forms_through_the_worker_pool():
    golds, responses = [c.values[0] for c in CASES], [c.values[1] for c in CASES]
    assert [r.acc for r in score_batch(responses, golds, workers=2)] == [c.values[2] for c in CASES]


def test_gold_sentences_through_an_answer_line():
    assert score("Answer: 12", "There are 12 ways.").acc
    assert not score("Answer: 12 or 13", "There are 12 ways.").acc


@pytest.mark.parametrize("pred", [
    r"10^{10^{10}}", r"9^{9^{9}}", r"2^{2^{2^{2^{2}}}}", r"\sqrt{2^{19999}+1}", r"1000!!", r"(10^{400})!",
    r"\binom{10^{300}}{10^{299}}", r"\times".join(["2^{999}"] * 20), "((((" * 10 + "2" + "))))" * 10,
    r"\gcd(" + ",".join(["9" * 399] * 2) + ")",
])
def test_closed_arithmetic_is_bounded(pred):
    """Huge closed arithmetic against an integer gold: refused or decided fast, in this process."""
    start = time.perf_counter()
    assert score(rf"\boxed{{{pred}}}", "1000").acc is False
    assert time.perf_counter() - start < 2.0
