r"""Where the verify mode finds the final answer (verifier/extract.py, boxes.py): the formats RL recipes
train with (a box, DAPO's `Answer:` line, the R1-Zero `<answer>` tag, a choice letter), what models
write around them (a made-up next turn, a junk box, a cut-off repeat, a box holding a derivation or a
sentence, answers to several parts), and the answer_format / strict setting. Every reading is tested
both ways: the right answer accepted, a wrong or unreadable one refused. The kinds come from what
models wrote in public evaluation runs; the texts here are written by hand."""

from __future__ import annotations

import pytest

from reward import score, score_batch
from verifier.extract import extract_answer

WORK = "Let me work through the problem carefully, checking each step of the computation twice.\n" * 2

CASES = [
    # (name, response, gold, truncated, expected)
    # the R1-Zero tag
    ("tag", WORK + "</think>\n<answer> 42 </answer>", "42", False, True),
    ("tag wrong", WORK + "</think>\n<answer> 41 </answer>", "42", False, False),
    ("tag sentence", WORK + r"<answer>The final answer is $\frac{1}{2}$.</answer>", r"\frac{1}{2}", False, True),
    ("tag box", WORK + r"<answer>\boxed{7}</answer>", "7", False, True),
    ("tag hedge", WORK + "<answer>either 3 or 5</answer>", "3", False, False),
    ("tag echo", "I put the answer in <answer> </answer> tags.\n" + WORK + "<answer>5</answer>", "5", False, True),
    ("tag unclosed, junk", WORK + "<answer> 42\n\nassistant assistant assistant " * 3, "42", True, True),
    ("tag unclosed, cut", WORK + "<answer> 4", "42", True, False),
    ("tag then junk box", WORK + r"<answer>5</answer> \boxed{?}", "5", False, True),
    ("tag markup on Answer line", WORK + "Answer: <answer>42</answer>", "42", False, True),
    ("think markup on Answer line", WORK + "Answer: 42</think>", "42", False, True),
    # a made-up next turn
    ("next turn", WORK + "So $\\boxed{12}$.\n\nUser: Now solve $x + 1 = 3$.\nAssistant: answer: 2", "12", False, True),
    ("next turn's answer", WORK + "So $\\boxed{12}$.\n\nUser: Now solve $x + 1 = 3$.\nAssistant: answer: 2", "2",
     False, False),
    ("chat token", WORK + "Answer: 12<|im_end|>\n<|im_start|>user\nAnswer: 13", "12", False, True),
    # junk and cut-off boxes
    ("junk box", WORK + r"The answer is $\boxed{5}$. \boxed{?}", "5", False, True),
    ("cut repeat", WORK + r"So \boxed{12}. Again \boxed{12}. Final \boxed{1", "12", True, True),
    ("cut repeat disagrees", WORK + r"So \boxed{11}. Again \boxed{12}. Final \boxed{1", "12", True, False),
    ("cut after one box", WORK + r"So \boxed{12}. Final \boxed{1", "12", True, False),
    ("cut other value", WORK + r"So \boxed{12}. Again \boxed{12}. Final \boxed{3", "12", True, False),
    # a choice letter
    ("letter", WORK + "The answer is (C).", "C", False, True),
    ("letter wrong", WORK + "The answer is (C).", "B", False, False),
    ("letter with option", WORK + "Thus, the answer is (C) 42 m/s.", "C", False, True),
    ("letters listed", "The answer is (B).\nThe answer is (H).\nThe answer is (C).\n", "C", False, False),
    ("letter repeated", WORK + "The answer is (C).\nThe answer is (C).", "C", False, True),
    # a bare value
    ("bare", "42", "42", False, True),
    ("bare after think", WORK + "</think>\n\n42", "42", False, True),
    ("bare math", r"$\frac{1}{2}$", r"\frac{1}{2}", False, True),
    ("bare list", "42 or 43", "42", False, False),
    ("bare cut", "42", "42", True, False),
    # a closing sentence: a result verb after a conclusive opener; a relative clause's "are" is no main copula
    ("result verb", WORK + "Therefore, Jennifer brought 100 cans of milk home from the store.", "100", False, True),
    ("result verb, two values", WORK + "Therefore, Weng earned $10 for 50 minutes of babysitting.", "50", False,
     False),
    ("need to", WORK + "Thus, we need to check case 3.", "3", False, False),
    ("relative clause", WORK + "<answer>John will take 60 days to write 3 books that are 400 pages each.</answer>",
     "400", False, False),
    # a loop on one closing sentence, cut at the length limit or not
    ("loop cut", WORK + "The answer is 362,880.\n" * 5 + "The answer is ", "362880", True, True),
    ("loop cut, flag unknown", WORK + "The answer is 362,880.\n" * 5 + "The answer is ", "362880", False, True),
    ("loop ends whole", WORK + "The answer is 12.\n" * 4, "12", True, True),
    ("loop disagrees", WORK + "The answer is 11.\nThe answer is 12.\nThe answer is ", "12", True, False),
    ("one sentence cut", WORK + "The answer is 12.\nThe answer is ", "12", True, False),
    # a box holding more than a value
    ("box sentence", WORK + r"\boxed{\text{The minimum value is } 5}", "5", False, True),
    ("box value, remark", WORK + r"\boxed{5 \text{ (since the sum is odd)}}", "5", False, True),
    ("box value, quantifier", WORK + r"\boxed{x^2 + c \text{ for some constant } c}", "x^2 + c", False, True),
    ("box sentence hedge", WORK + r"\boxed{\text{so it works when } x = 2 \text{ or more}}", "2", False, False),
    ("box aligned solve", WORK + r"\boxed{\begin{aligned} 2x + 3 &= 11 \\ x &= 4 \end{aligned}}", "4", False, True),
    ("box aligned not the first line", WORK + r"\boxed{\begin{aligned} 2x + 3 &= 11 \\ x &= 4 \end{aligned}}", "11",
     False, False),
    ("box aligned chain", WORK + r"\boxed{\begin{aligned} S &= 3 + 4 \\ &= 7 \end{aligned}}", "7", False, True),
    ("box aligned system", WORK + r"\boxed{\begin{aligned} x &= 1 \\ y &= 2 \end{aligned}}", "2", False, False),
    ("named steps", WORK + r"So $\boxed{m = 25}$, $\boxed{n = 169}$, $\boxed{m + n = 194}$.", "194", False, True),
    ("named values only", WORK + r"So $\boxed{m = 25}$, $\boxed{n = 169}$.", "169", False, False),
    # several parts
    ("parts", WORK + "(a) First part.\n" + r"\boxed{\text{No}}" + "\n\n(b) Second part.\n" + r"\boxed{\text{Yes}}",
     "Yes", False, False),
    ("parts, one boxed", WORK + "(a) First we find x.\nx = 3.\n\n(b) Then the total.\n" + r"\boxed{7}", "7", False,
     True),
]


@pytest.mark.parametrize("name,response,gold,truncated,expected", CASES, ids=[c[0] for c in CASES])
def test_answer_formats(name, response, gold, truncated, expected):
    assert score(response, gold, truncated=truncated).acc is expected, extract_answer(response, truncated)


def test_answer_formats_through_the_pool():
    results = score_batch([c[1] for c in CASES], [c[2] for c in CASES], truncated=[c[3] for c in CASES], workers=2)
    assert [r.acc for r in results] == [c[4] for c in CASES]


BOTH = WORK + r"So \boxed{5}." + "\n<answer>6</answer>"


@pytest.mark.parametrize("answer_format,strict,expected", [
    ("any", False, "6"), ("boxed", False, "5"), ("answer_tag", False, "6"), ("answer_tag", True, "6"),
    ("answer_line", False, "6"), ("answer_line", True, None), ("boxed", True, "5"),
])
def test_answer_format_is_read_first_and_strict_needs_it(answer_format, strict, expected):
    assert extract_answer(BOTH, answer_format=answer_format, strict=strict) == expected


R1_ZERO = ("A conversation between User and Assistant. The Assistant first thinks about the reasoning process and "
           "then provides the answer, enclosed in <think> </think> and <answer> </answer> tags.\nUser: {problem}\n"
           "Assistant: <think>")


def test_strict_format_is_a_format_reward_through_the_training_call():
    from config import RewardConfig
    from reward import shaped_rewards

    cfg = RewardConfig(answer_format="answer_tag", strict_format=True, overlong_buffer_len=0)
    boxed, tagged = WORK + r"So \boxed{5}.", WORK + "</think> <answer>5</answer>"
    r = shaped_rewards([boxed, tagged], ["5", "5"], [10, 10], [False, False], cfg, max_response_len=100)
    assert r.acc == [False, True] and r.reward == [-1.0, 1.0]
    lenient = RewardConfig(answer_format="answer_tag", overlong_buffer_len=0)
    assert shaped_rewards([boxed], ["5"], [10], [False], lenient, max_response_len=100).acc == [True]


@pytest.mark.parametrize("overrides,message", [
    (["reward.answer_format=answer_tag", "reward.strict_format=true"], "never writes '<answer>'"),
    (["reward.strict_format=true"], "needs the format the prompt asks for"),
    (["reward.mode=dapo", "reward.answer_format=boxed"], "reads one answer format of its own"),
    (["reward.answer_format=latex"], "answer_format"),
])
def test_format_settings_are_refused_in_one_line(overrides, message):
    import config

    with pytest.raises(config.ConfigError, match=message):
        config.load("configs/tiny_qae.yaml", overrides)


def test_strict_format_loads_when_the_prompt_asks_for_it():
    import config

    data, origin = config.read_chain(config.resolve_path("configs/tiny_qae.yaml"))
    data["data"] = {**data.get("data", {}), "prompt_template": R1_ZERO}
    data["reward"] = {**data.get("reward", {}), "answer_format": "answer_tag", "strict_format": True}
    cfg = config.from_dict(data, [], origin)
    assert (cfg.reward.answer_format, cfg.reward.strict_format) == ("answer_tag", True)


FLOODS = {  # each new reading against a flood of its own marker: linear passes over the capped tail
    "tags": "<answer>" * 50000, "closed tags": "<answer>1</answer>" * 20000, "letters": "The answer is (A).\n" * 50000,
    "loop": "The answer is 5.\n" * 50000 + "The answer is ", "turns": "\nUser: hi" * 50000,
    "parts": "(a) x\n\\boxed{1}\n" * 5000 + "(b) y \\boxed{2}", "cut boxes": "\\boxed{1} " * 20000 + "\\boxed{",
    "aligned": "\\boxed{\\begin{aligned}" + "x &= 1 \\\\ " * 5000 + "\\end{aligned}}",
    "prose box": "\\boxed{\\text{" + "the value is 5 and " * 3000 + "}}",
}


@pytest.mark.parametrize("name", FLOODS)
def test_floods_of_the_new_markers_are_bounded(name):
    import time

    start = time.perf_counter()
    results = score_batch([FLOODS[name]], ["7"], workers=1)
    assert results[0].acc is False and time.perf_counter() - start < 2.0
