r"""The answer forms real models write that the verify mode reads, each kind in both
directions: the correct form scores +1, a near miss or a hedge -1. Every case is hand-written
from the kinds of answers other graders' public test suites show (Math-Verify, the Qwen2.5-Math
grader, verl, Minerva) and that real completions in other projects' evaluation runs show (kinds
8-14 and the later cases of kinds 3, 6 and 10, docs/reward.md); none was copied from them or
computed by the code under test.

Kinds: 1 several boxes, 2 named quantities, 3 text after the answer, 4 units and currency,
5 word-joined lists, 6 less common notation, 7 rounded golds, 8 scientific notation, 9 brackets
as grouping, 10 the closing sentence of a finished solution, 11 a choice letter with its option
text, 12 unicode units and text equations, 13 equality chains, 14 a JSON answer field; plus the
decimal-comma rule and arbitrary constants (renamed).
"""

import doctest
import importlib

import pytest

from reward import score, score_batch
from verifier.extract import extract_answer

WORK = ("We list the residues modulo 7 and check each one against both conditions in turn. Only one "
        "residue passes both checks.\n\n")  # a solution's working, longer than MIN_SOLUTION_CHARS


def case(kind, gold, response, expected):
    return pytest.param(gold, response, expected, id=f"{kind}:{gold[:20]}->{response[-28:]}")


CASES = [
    # -- 1: several boxes, one per part ---------------------------------------------------------
    case(1, "1, -2", r"so $n = \boxed{1}$ and $n = \boxed{-2}$.", True),
    case(1, "1,-2", r"The roots are \[ \boxed{-2} \quad\text{and}\quad \boxed{1}. \]", True),
    case(1, "(2, 3), (4, 1)", r"The pairs: $\boxed{(2, 3)}, \boxed{(4, 1)}$", True),
    case(1, "5, 7, 9", r"$\boxed{9}$, $\boxed{5}$ \text{ and } $\boxed{7}$", True),
    case(1, "x = 3, y = 7", r"\( x = \boxed{3} \) and \( y = \boxed{7} \)", True),
    case(1, "(3, 3), (1, 1)", r"$$\boxed{(3, 3)} \text{ for part (a) and } \boxed{(1, 1)}$$", True),
    case(1, "4", r"So $\boxed{4}$, that is $\boxed{4}$", True),  # "that is": not joined; last box
    case(1, "4", r"$\boxed{4} \quad \boxed{4}$", True),  # a repeated box counts once
    case(1, "1", r"$\boxed{1}$ or $\boxed{2}$", False),  # a hedge against a one-part gold
    case(1, "2", r"$\boxed{1}$ or $\boxed{2}$", False),
    case(1, "1, -2", r"so $n = \boxed{1}$.", False),  # a solution missing
    case(1, "1, -2", r"$\boxed{1} \quad\text{and}\quad \boxed{2}$", False),
    case(1, "1, 2, 3", "$\\boxed{1}, \\boxed{2}$\n\nHmm, and also $\\boxed{3}$", False),
    case(1, "(2, 3), (4, 1)", r"First $\boxed{(2, 3)}$; checking again gives $\boxed{(4, 1)}$", False),
    # -- 2: "quantity = value" --------------------------------------------------------------------
    case(2, "AB=4,CD=5", r"\boxed{4, 5}", True),
    case(2, "AB=4,CD=5", r"\boxed{(4, 5)}", True),
    case(2, "AB=4,CD=5", r"\boxed{AB = 4, CD = 5}", True),
    case(2, "AB=4,CD=5", r"\boxed{5, 4}", False),  # the names fix the order
    case(2, "AB=4,CD=5", r"\boxed{CD = 4, AB = 5}", False),  # two named answers keep their names
    case(2, "|AB|=1", r"\boxed{1}", True),
    case(2, "|AB|=1", r"\boxed{2}", False),
    case(2, "S_{MBCN}:S=7:32", r"\boxed{7:32}", True),
    case(2, "S_{MBCN}:S=7:32", r"\boxed{32:7}", False),
    case(2, r"\frac{NO}{BO}=\frac{1}{\sqrt{6}}", r"\boxed{\frac{\sqrt{6}}{6}}", True),
    case(2, r"\frac{NO}{BO}=\frac{1}{\sqrt{6}}", r"\boxed{\frac{1}{6}}", False),
    case(2, "3", r"Hence $\boxed{BC = 3}$.", True),
    case(2, "3", r"Hence $\boxed{AB = 3, BC = 3}$.", False),  # two values for one
    case(2, "p=5,q=2;p=7,q=2", r"\boxed{(5, 2), (7, 2)}", True),
    case(2, "p=5,q=2;p=7,q=2", r"\boxed{(2, 5), (2, 7)}", False),
    case(2, "xy = 6", r"\boxed{6}", False),  # xy = 6 is a curve, not a named value
    # -- 3: text after the answer on its line ----------------------------------------------------
    case(3, r"20\%", "Final Answer: The final answer is $20 \\%$. I hope it is correct. Note: we "
                     "assumed the adults are half female.", True),
    case(3, "12000023", "Final Answer: The final answer is 12,000,023. I hope it is correct. "
                        "<|im_start|>user\nWhat is 2+2?", True),
    case(3, "34", "Final Answer: The largest $n$ is 34.", True),
    case(3, "120", "So the prism is 5 by 6 by 4.\nAnswer: The volume of $ABCDEFGH$ is 120.", True),
    case(3, r"x \ge 5", "Answer: Therefore $x \\geq 5$ is the solution.", True),
    case(3, "3", "Answer: Jane started growing the colony 3 hours ago.", True),
    case(3, "12", "Answer: It is not 10, it is 12.", True),
    case(3, "9", "Answer:\n\\[\n9\n\\]", True),
    case(3, "34", "Final Answer: The largest $n$ is at most 34.", False),
    case(3, "34", "Final Answer: The largest $n$ is 33 or 34.", False),
    case(3, "10", "Answer: It is not 10, it is 12.", False),
    case(3, "12", "Answer: It is 10, which is 12.", False),  # two values: no answer
    case(3, "5", "Final Answer: The final answer is $5$, and the other root is $6$.", False),
    case(3, "5", "Answer: 5 apples and 6 oranges", False),
    case(3, "5", "Answer: The value is $5$. Also $6$ works.", False),
    case(3, "3", "Answer: Jane started about 3 hours ago.", False),
    case(3, "3", "Subproblem 0: 2 bushels.\n\n**Final answer for Subproblem 1:** 3 bushels", True),
    case(3, "2", "Subproblem 0: 2 bushels.\n\n**Final answer for Subproblem 1:** 3 bushels", False),
    case(3, "2", "Answer to part (a): 2\n\nAnswer to part (b): 3", False),  # the last marker's part
    # -- 4: units and currency --------------------------------------------------------------------
    case(4, "1000.99", "\\boxed{1,000.99\u20ac}", True),
    case(4, "1000.99", "\\boxed{\u00a31,000.99}", True),
    case(4, "1000.99", "\\boxed{\u00a51000.99}", True),
    case(4, "1000.99", "\\boxed{1,000.99m\u00b2}", True),
    case(4, "1000.99", r"\boxed{1000.99 \text{ m}^2}", True),
    case(4, "60", r"\boxed{60 km/h}", True),
    case(4, "30", "\\boxed{30\u00b0C}", True),
    case(4, "0.06", r"\boxed{0.06 \text{ yuan}}", True),
    case(4, "1000.99", "\\boxed{1,000.98\u20ac}", False),
    case(4, "5", r"\boxed{5m}", False),  # one letter alone is a variable, not metres
    case(4, "4m^2", r"\boxed{4}", False),  # m^2 in LaTeX may be a variable squared
    case(4, "4m^2", r"\boxed{4m^3}", False),
    case(4, "30", "\\boxed{31\u00b0C}", False),
    case(4, "15000", r"\boxed{15,000 \, \text{kcal m}^{-2} \text{ yr}^{-1}}", True),
    case(4, "12", r"\boxed{12^{\mathrm{th}} \text{ grade}}", True),
    case(4, "12", r"\boxed{11^{\mathrm{th}} \text{ grade}}", False),
    # -- 5: lists joined by words -----------------------------------------------------------------
    case(5, "(11,7)or(7,11)", r"\boxed{(7,11),\ (11,7)}", True),
    case(5, "(11, 7) or (7, 11)", r"\boxed{(7, 11) \text{ or } (11, 7)}", True),
    case(5, "(11,7)or(7,11)", r"\boxed{(7,11)}", False),
    case(5, "19, 46, and 82", r"\boxed{19, 46, \text{ and } 82}", True),
    case(5, "19, 46, and 82", r"\boxed{19, 46, \text{ and } 83}", False),
    case(5, "2, 3", r"\boxed{2 \text{ or } 3}", True),
    case(5, "2", r"\boxed{2or3}", False),
    # -- 6: less common notation ------------------------------------------------------------------
    case(6, r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}",
         r"\boxed{\left[\begin{array}{cc}1 & 2 \\ 3 & 4\end{array}\right]}", True),
    case(6, r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}",
         r"\boxed{\left[\begin{array}{cc}1 & 2 \\ 3 & 5\end{array}\right]}", False),
    case(6, r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}",
         r"\boxed{\begin{vmatrix}1 & 2 \\ 3 & 4\end{vmatrix}}", False),  # a determinant
    case(6, "0<f(x)<1", r"\boxed{(0,1)}", True),
    case(6, "0<f(x)<1", r"\boxed{[0,1)}", False),
    case(6, r"F_n = \sum_{k=0}^{n-1} F_k F_{n-k-1}", r"\boxed{F_n = \sum_{k=0}^{n-1} F_{n-k-1} F_k}", True),
    case(6, r"F_n = \sum_{k=0}^{n-1} F_k F_{n-k-1}", r"\boxed{F_n = \sum_{k=0}^{n-2} F_k F_{n-k-2}}", False),
    case(6, "11", r"\boxed{x\approx11}", True),
    case(6, "11", r"\boxed{\approx 11}", False),  # "about 11" is a hedge
    case(6, r"\pi", r"\boxed{x \approx 3.14}", False),
    case(6, "x < 1", r"\boxed{-x > -1}", True),
    case(6, "x < 1", r"\boxed{-x > 1}", False),
    case(6, "x > 1", r"\boxed{2x > 2}", False),  # unsimplified: the model must do the division
    case(6, r"1 \le |z| \le 2", r"\boxed{z \in [-2, -1] \cup [1, 2]}", True),
    case(6, r"1 \le |z| \le 2", r"\boxed{[1, 2]}", False),
    case(6, "(1, 2), (3, 4)", r"\boxed{(1, 2), (3, 4), (1, 2)}", True),  # a repeat counts once
    case(6, "(1, 2), (3, 4)", r"\boxed{(1, 2), (3, 5)}", False),
    case(6, "(2,251,252)", r"\boxed{(2, 251, 252)}", True),  # a tuple, not the thousands groups of 2251252
    case(6, "(2,251,252)", r"\boxed{2251252}", False),
    case(6, r"x_{0} \cos (\omega t)+\dot{x}_{0} \sin (\omega t) / \omega",
         r"\boxed{x(t) = x_0 \cos(\omega t) + \frac{\dot{x}_0}{\omega} \sin(\omega t)}", True),
    case(6, r"x_{0} \cos (\omega t)+\dot{x}_{0} \sin (\omega t) / \omega",
         r"\boxed{x(t) = x_0 \cos(\omega t) + \frac{x_0}{\omega} \sin(\omega t)}", False),  # \dot{x} is not x
    case(6, r"\dot{x}_0", r"\boxed{\ddot{x}_0}", False),
    case(6, r"\frac{1}{4-\omega^{2}}", r"\boxed{A = \frac{1}{4 - \omega^2}, \quad \text{for } \omega^2 \neq 4}", True),
    case(6, r"\frac{1}{4-\omega^{2}}", r"\boxed{A = \frac{1}{4 - \omega^2}, \quad \text{for } \omega^2 > 4}", False),
    case(6, r"\frac{1}{4-\omega^{2}}", r"\boxed{A = \frac{1}{4 + \omega^2}, \quad \text{for } \omega^2 \neq 4}", False),
    # -- 7: golds that are rounded decimals -------------------------------------------------------
    case(7, "33.3", r"\boxed{\frac{100}{3}}", True),
    case(7, "4.123105625617661", r"\boxed{\sqrt{17}}", True),
    case(7, "-1.41", r"\boxed{-\sqrt{2}}", True),
    case(7, "33.3", r"\boxed{33.33}", False),  # a decimal must equal the gold exactly
    case(7, "33.3", r"\boxed{\frac{101}{3}}", False),
    case(7, "0.33", r"\boxed{\frac{1}{3}}", False),  # two significant digits: not a rounding
    case(7, "1.25", r"\boxed{1.249}", False),
    case(7, r"\frac{100}{3}", r"\boxed{33.3}", False),  # never a rounded prediction
    case(7, r"\sqrt{17}", r"\boxed{4.123105625617661}", False),
    # -- the decimal comma: read as a point only against a decimal written with one ---------------
    case("dc", "2.74", r"\boxed{2,74}", True),
    case("dc", "2,74", r"\boxed{2.74}", True),
    case("dc", "0,111", r"\boxed{0.111}", True),
    case("dc", "1000.99", r"\boxed{1000,99}", True),
    case("dc", "1, 5", r"\boxed{1,5}", True),  # against a list, a list
    case("dc", "2.74", r"\boxed{2,75}", False),
    case("dc", "2.74", r"\boxed{2, 74}", False),  # with a space: a list
    case("dc", "1.5", r"\boxed{1,500}", False),  # three digits: a thousands group
    case("dc", "1, 5", r"\boxed{1.5}", False),
    case("dc", "111", r"\boxed{0,111}", False),
    case("dc", "2", r"\boxed{2,0}", False),
    # -- 8: scientific notation -------------------------------------------------------------------
    case(8, "1e-5", r"The resolution is $\boxed{1 \times 10^{-5}}$ radians.", True),
    case(8, "2.55e-10", r"\boxed{2.55 \times 10^{-10}}", True),
    case(8, r"1 \times 10^{-5}", r"\boxed{1e-5}", True),
    case(8, "4.5e33", r"\boxed{4.5 \times 10^{33} \text{ erg/s}}", True),
    case(8, "1e-5", r"\boxed{1 \times 10^{-6}}", False),
    case(8, "2.55e-10", r"\boxed{2.5 \times 10^{-10}}", False),
    case(8, "1e-5", r"\boxed{10^{-5} \text{ or } 10^{-6}}", False),
    case(8, "2e-1", r"\boxed{2e - 1}", False),  # spaced: 2e - 1, not 0.2
    case(8, "1000", r"\boxed{1 \times 10^3}", True),  # closed arithmetic equal to an integer gold
    case(8, "1000", r"\boxed{1 \times 10^4}", False),
    # -- 9: brackets used as grouping -------------------------------------------------------------
    case(9, r"\frac{\cos 2t+\sin 2t}{4}", r"\boxed{\frac{1}{4}\left[\cos 2t+\sin 2t\right]}", True),
    case(9, "2(x+1)", r"\boxed{2\left\{x+1\right\}}", True),
    case(9, "[0, 1]", r"\boxed{\left[0, 1\right]}", True),
    case(9, r"\frac{\cos 2t+\sin 2t}{4}", r"\boxed{\frac{1}{4}[\cos 2t+\sin 2t]}", True),
    case(9, "[2, 6]", r"\boxed{2[1, 3]}", False),  # a product with an interval is no answer
    case(9, r"\frac{\cos 2t+\sin 2t}{4}", r"\boxed{\frac{1}{4}\left[\cos 2t-\sin 2t\right]}", False),
    case(9, "[0, 1]", r"\boxed{\left[0, 1\right)}", False),  # with a comma, still an interval
    case(9, "1", r"\boxed{\left\{1\right\}}", False),  # the whole answer: a set
    # -- 10: the closing sentence of a finished solution, no box, no Answer line ------------------
    case(10, "1", WORK + "The remainder is 1.", True),
    case(10, "194", WORK + "so m + n = 194.", True),
    case(10, "194", WORK + "m + n = 25 + 169 = **194**", True),
    case(10, "7", WORK + "So, the mean of her quiz scores is 7.\n\nI think that's the answer.", True),
    case(10, "9", WORK + "There are 9 elements in this set, so the answer is 9.", True),
    case(10, "3", WORK + "It is either 3 or 5.", False),
    case(10, "3", WORK + "The remainder is 3 or 5.", False),
    case(10, "12", WORK + "So the area is 12 and the perimeter is 14.", False),
    case(10, "5", WORK + "Hence $x = 5$ and $y = 6$.", False),
    case(10, "12", WORK + "The area is at most 12.", False),
    case(10, "12", WORK + "So the area is 12. Next we compute the perimeter, which", False),  # cut off
    case(10, "1", WORK + "The remainder is 1", False),  # no full stop: maybe cut off
    case(10, "7", WORK + "Therefore, Hillary has 7 nickels.", True),
    case(10, "-120", WORK + "So, in conclusion, the product $abc$ is $-120$.", True),
    case(10, "3", WORK + "Jane started 3 hours ago.", False),  # no is, = or has: no statement of a value
    case(10, "4", WORK + "Thus, the tritium nucleus contains **4 up quarks**.", True),
    case(10, r"\text{east}", WORK + "So, the final answer is east.", True),
    case(10, r"\text{east}", WORK + "So, the final answer is east or west.", False),
    case(10, "12", WORK + "The answer is the product of 3 and 4.", False),
    case(10, "20", WORK + r"Therefore, the sum \(a + b + c = 11 + 9 + 0 = 20\).", True),
    case(10, "20", WORK + r"Therefore, the sum \(a + b + c = 11 + 9 + 1 = 20\).", False),  # a false chain
    case(10, "3", WORK + "**Step 3**", False),
    case(10, "45", WORK + "And since the tangent of 45 degrees is 1, the angle is indeed 45 degrees.", True),
    case(10, "45", WORK + "Since the angle is 45 degrees, the tangent is 1.", False),  # the main clause states 1
    case(10, ".35625", WORK + "Therefore, 57/160 is indeed 0.35625, which is a terminating decimal.", True),
    case(10, "12", WORK + "So x is 12, which is not allowed.", False),
    case(10, "12", WORK + "So x is 12, which is more than the limit.", False),
    case(10, "16", WORK + "Therefore, the number of blue marbles in the bag before adding more was 16.", True),
    case(10, "16", WORK + "Therefore, the number of blue marbles is 16 or more.", False),
    case(10, "4", WORK + "So, no matter which way I approach it, I end up with 4 inches per second.", True),
    case(10, "4", WORK + "So the speed is no more than 4 inches per second.", False),
    case(10, "8", WORK + "I consistently arrived at 8 meals. So, I'm confident that's the correct answer.", True),
    case(10, "78", WORK + "Profit: $93 - $15 = $78.\n\nEverything seems to add up correctly.", True),
    case(10, "78", WORK + "Profit: $93 - $15 = $78.\n\nLet me add up the costs again.", False),
    case(10, "22", WORK + "So the product is 22. The step-by-step expansion confirms the result.", True),
    case(10, "3", WORK + "The remainder is 3.\n\nThis problem demonstrates the use of modular arithmetic.", True),
    case(10, "3", WORK + "The remainder is 3.\n\nBut this contradicts the second condition.", False),
    case(10, "35.06", WORK + "14.01 g/mol + 5.05 g/mol + 16.00 g/mol = **35.06 g/mol**", True),
    case(10, "5", WORK + "x = **5 times**", False),  # a hedge word is no unit
    case(10, "2", WORK + "In conclusion, we have confirmed that:\n\n$$\\tan A = 2$$", True),
    case(10, "2", WORK + "Therefore:\n\n$$x <= 2$$", False),
    case(10, "2", WORK + "Thus, approximately:\n\n$$x = 2$$", False),
    case(10, "45", WORK + "Then we divide both sides by 2:\n\n$$x = 45$$", False),  # a step, not a conclusion
    case(10, "11", WORK + "Therefore:\n\n$$3 \\times 4 = 11$$", False),  # a false equation
    # -- 11: a choice letter with its option text -------------------------------------------------
    case(11, "H", r"\boxed{(H) \frac{3}{8}}", True),
    case(11, "H", r"\boxed{\text{(H) } \frac{3}{8}}", True),
    case(11, "(C)", r"\boxed{C. 42}", True),
    case(11, "H", r"\boxed{(G) \frac{3}{8}}", False),
    case(11, "H", r"\boxed{(H) \text{ or } (I)}", False),
    case(11, "B", r"\boxed{B = 4}", False),
    # -- 12: unicode units, text equations --------------------------------------------------------
    case(12, "1.69", "\\boxed{1.69 \u00c5}", True),
    case(12, "589", r"\boxed{589 nm}", True),
    case(12, "13.6", r"\boxed{13.6 eV}", True),
    case(12, "SRMC=LRMC", r"\boxed{\text{SRMC} = \text{LRMC}}", True),
    case(12, "1.69", "\\boxed{1.70 \u00c5}", False),
    case(12, "SRMC=LRMC", r"\boxed{\text{SRMC} > \text{LRMC}}", False),
    case(12, "SRMC=LRMC", r"\boxed{\text{SRMC} = \text{MC}}", False),
    # -- 13: equality chains: the last side, if the chain is true ---------------------------------
    case(13, r"\frac{2}{3}\cdot\frac{C}{S}",
         r"\boxed{MRS = \frac{4}{6}\cdot\frac{C}{S} = \frac{2}{3}\cdot\frac{C}{S}}", True),
    case(13, "194", r"\boxed{m + n = 25 + 169 = 194}", True),
    case(13, r"\frac{2}{3}", r"\boxed{r = \frac{4}{6} = \frac{3}{4}}", False),
    case(13, "194", r"\boxed{m + n = 25 + 169 = 195}", False),
    case(13, "11", r"\boxed{x = 5+5+1 = 7 = 11}", False),  # a false chain
    case(13, "5", r"\boxed{3 = 5 = 5}", False),  # a first side without a letter is checked too
    case(13, r"\frac{2}{3}", r"\boxed{\frac{8}{12} = \frac{4}{6} = \frac{2}{3}}", True),
    # -- 14: a JSON answer field ------------------------------------------------------------------
    case(14, "13", 'Reasoning done.\n{"reasoning": "two cases", "answer": "13"}', True),
    case(14, "13", '{"answer": 13}', True),
    case(14, r"\frac{1}{2}", '{"final_answer": "\\\\frac{1}{2}"}', True),
    case(14, "13", '{"answer": "13 or 14"}', False),
    case(14, "13", '{"answer": "12"}', False),
    case(14, "13", '{"answer": "13"}\nWait, that is wrong: \\boxed{12}', False),  # the later marker
    # -- arbitrary constants named differently from the gold: renamed one-to-one -------------------
    case("const", "y = c e^{x}", r"\boxed{y = C e^{x}}", True),
    case("const", "C_1 e^{t} + C_2 e^{2t}", r"\boxed{C_2 e^{t} + C_1 e^{2t}}", True),
    case("const", "y = c e^{x}", r"\boxed{y = C e^{2x}}", False),
    case("const", "C_1 e^{t} + C_2 e^{2t}", r"\boxed{C_1 e^{t} + C_1 e^{2t}}", False),
]


@pytest.mark.parametrize("gold,response,expected", CASES)
def test_answer_forms(gold, response, expected):
    assert score(response, gold).acc is expected


def test_answer_forms_through_the_worker_pool():
    golds, responses = [c.values[0] for c in CASES], [c.values[1] for c in CASES]
    assert [r.acc for r in score_batch(responses, golds, workers=2)] == [c.values[2] for c in CASES]


def test_closing_sentence_only_from_a_response_that_ended():
    finished, boxed = WORK + "The remainder is 1.", WORK + r"so the remainder is $\boxed{1}$."
    assert score(finished, "1").acc and not score(finished, "1", truncated=True).acc
    assert score(boxed, "1", truncated=True).acc  # a marker is read whether or not the response was cut
    display = WORK + "In conclusion:\n\n$$x = 2$$"  # a closing display, like a closing sentence
    assert score(display, "2").acc and not score(display, "2", truncated=True).acc
    results = score_batch([finished, finished, boxed], ["1", "1", "1"], truncated=[False, True, True], workers=1)
    assert [r.acc for r in results] == [True, False, True]
    with pytest.raises(ValueError, match="one truncated flag per response"):
        score_batch([finished], ["1"], truncated=[False, True])


@pytest.mark.parametrize("response,pred", [
    (r"$\boxed{1}$, $\boxed{2}$ and $\boxed{3}$", "1, 2, 3"),
    (r"$\boxed{2} \quad \boxed{2}$", "2"),
    (r"\boxed{a} then \boxed{b}", "b"),
    ("\\boxed{1}\n\n\\boxed{2}", "2"),
    (r"\boxed{1}" * 100, "1"),  # at most MAX_GROUP boxes, one distinct content
    ("Final Answer: The final answer is $\\frac{1}{5}$. I hope it is correct. <|im_start|>user", r"$\frac{1}{5}$"),
    ('Final Answer: The final answer is "$12$ and $13$". I hope it is correct.', "$12$ and $13$"),
    ("Answer: The answer is 5 or 6", "5 or 6"),  # a list: normalize reads "or" as a comma
    ("Answer: The roots are $1$ or $2$.", "1, 2"),
    ("Answer: maybe 5", "maybe 5"),
])
def test_extraction_of_groups_and_lines(response, pred):
    assert extract_answer(response) == pred


@pytest.mark.parametrize("module", ["verifier.extract", "verifier.normalize", "verifier.tokens", "verifier.equal"])
def test_docstring_examples_of_the_verifier_modules(module):
    assert doctest.testmod(importlib.import_module(module)).failed == 0
