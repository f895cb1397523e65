r"""reward.py's mode="dapo": verl's DAPO reward, reimplemented without verl.

Reproduces `compute_score(solution_str, ground_truth)` (strict_box_verify=False) of verl's
`verl/utils/reward_score/math_dapo.py` at verl 0.5.0, the release current when the paper ran
(0.4.1, 0.6.0, 0.7.0, 0.8.0 and 0.9.0 return the same on every case of tests/test_reward_dapo.py;
0.9.1 added a `\boxed{}` fallback, which this module does not follow):

    tail  = response[-300:]
    pred  = normalize_final_answer(last "Answer: (...)" match in tail, else "[INVALID]")
    acc   = pred == normalize_final_answer(ground_truth)             # string equality
    score = +1.0 if acc else -1.0

normalize_final_answer is Minerva's MATH normaliser (lm-eval-harness): the text after the last
"=", verl's word and unit deletions, the first `$...$` span of a line, `\text{X}` -> X,
`\boxed{X}` -> X, `\frac12` -> `\frac{1}{2}`, `1,000` -> 1000. dapo_normalize below numbers its
steps in verl's order.

    >>> dapo_verdict("... so\nAnswer: $1,000$ dollars", "1000")
    (True, '1000')
    >>> dapo_verdict(r"... so the total is $\boxed{1000}$.", "1000")  # no `Answer:` line
    (False, '[INVALID]')

tests/test_reward_dapo.py holds verl 0.5.0's own outputs on hand-written responses and checks
that this module returns the same acc, score and pred on each.

Both choices depart from verl's compute_score, only on inputs verl rejects or on its cost.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Never raises: a gold stored as a number is read as its text (reward.py does so before calling), and a
   response that is not a string scores -1 with pred None, where verl raises.
2. Linear time, same result on every string: verl's regexes over `.*` are done line by line with str.find.
"""

from __future__ import annotations

import re

DAPO_TAIL_CHARS = 300  # verl scores only the last 300 characters of a response

_DAPO_ANSWER_RE = re.compile(r"answer\s*:\s*([^\n]+)", re.IGNORECASE)  # "Answer: ..." to line end
_DAPO_NO_ANSWER = "[INVALID]"  # verl's placeholder prediction when no line matches
_DAPO_SUBSTITUTIONS = (  # (old, new) in verl's order; "a " is deleted anywhere ("formula 5")
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
)
_DAPO_DELETIONS = (  # deleted in this order (order matters: "\text{}^2" before "\text{}")
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots",
    "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds",
    "meters", "meals", "edges", "students", "childrentickets", "multiples", "\\text{s}",
    "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}",
    "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
)
_DAPO_FRAC_RE = re.compile(r"frac([^{])(.)")  # \frac12 -> \frac{1}{2}; "." is not a newline
_DAPO_SQRT_RE = re.compile(r"sqrt([^{])")  # \sqrt3 -> \sqrt{3}


# ----------------------------------------------------------------------------------------------
# verl's `.*` regexes, as line-by-line str.find rules (choice 2)
# ----------------------------------------------------------------------------------------------


def _first_math_span(line: str) -> str:
    r"""A line with two or more `$` becomes its first `$...$` span; other lines are unchanged.
    verl: re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", s)."""
    first = line.find("$")
    second = line.find("$", first + 1) if first >= 0 else -1
    return line if second < 0 else "$" + line[first + 1 : second] + "$"


def _unwrap_command(line: str, opener: str) -> str:
    r"""Each `\cmd{X}` -> X, where X runs to the next `}` (so `\text{\text{a}}` -> `\text{a}`).
    verl: re.sub(r"(\\text\{)(.*?)(\})", "\\2", s), and the same for \textbf and \overline."""
    out, pos = [], 0
    while (start := line.find(opener, pos)) >= 0:
        close = line.find("}", start + len(opener))
        if close < 0:
            break  # no `}` after this opener, so none after any later one
        out += [line[pos:start], line[start + len(opener) : close]]
        pos = close + 1
    return "".join(out) + line[pos:]


def _unwrap_boxed(line: str) -> str:
    r"""The first `\boxed{` to the line's last `}`: `\boxed{4} + \boxed{2}` -> `4} + \boxed{2`.
    verl: re.sub(r"(\\boxed\{)(.*)(\})", "\\2", s)."""
    start, close = line.find("\\boxed{"), line.rfind("}")
    if start < 0 or close < start + len("\\boxed{"):
        return line
    return line[:start] + line[start + len("\\boxed{") : close] + line[close + 1 :]


def _per_line(text: str, rule, *args) -> str:
    """A rule applied to each line: verl's `.` does not match a newline."""
    return "\n".join(rule(line, *args) for line in text.split("\n"))


# ----------------------------------------------------------------------------------------------
# verl's normalize_final_answer and compute_score
# ----------------------------------------------------------------------------------------------


def dapo_normalize(answer: str) -> str:
    r"""verl's normalize_final_answer (from the Minerva / lm-eval-harness MATH normaliser).

    >>> dapo_normalize(r"x = \dfrac12"), dapo_normalize("$1,000$ dollars"), dapo_normalize("27.0")
    ('\\dfrac{1}{2}', '1000', '27.0')
    """
    s = answer.split("=")[-1]  # 1. the text after the last "="
    for old, new in _DAPO_SUBSTITUTIONS:  # 2. words and spaces
        s = s.replace(old, new)
    for unit in _DAPO_DELETIONS:  # 3. units and formatting
        s = s.replace(unit, "")
    s = _per_line(s, _first_math_span)  # 4. "the answer is $42$ apples" -> $42$
    for opener in ("\\text{", "\\textbf{", "\\overline{"):  # 5. \text{X} -> X
        s = _per_line(s, _unwrap_command, opener)
    s = _per_line(s, _unwrap_boxed)  # 6. \boxed{X} -> X
    s = _DAPO_FRAC_RE.sub(r"frac{\1}{\2}", s)  # 7. TeX shorthand: \frac12, \sqrt3
    s = _DAPO_SQRT_RE.sub(r"sqrt{\1}", s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():  # 8. 1,000 -> 1000 (str.isdigit: any Unicode digit)
        s = s.replace(",", "")
    return s.strip()


def dapo_verdict(response: str, ground_truth: str) -> tuple[bool, str | None]:
    """(acc, pred) of verl's compute_score(response, ground_truth), strict_box_verify=False.
    Only the last `Answer:` match in the last 300 characters counts (a `\\boxed{}` does not);
    pred is verl's normalised prediction. Never raises (choice 1): (False, None) instead."""
    try:
        tail = response[-DAPO_TAIL_CHARS:]
        last = None
        for last in _DAPO_ANSWER_RE.finditer(tail):  # noqa: B007 - read after the loop; no overlaps (re.findall)
            pass
        pred = dapo_normalize(last.group(1) if last else _DAPO_NO_ANSWER)
        return pred == dapo_normalize(ground_truth), pred
    except Exception:  # noqa: BLE001 - verl raises here; an odd input is an incorrect answer
        return False, None
