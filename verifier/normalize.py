r"""Formatting that never changes an answer's value, removed before reward.py compares answers.

    normalize(answer) -> str                       # both the gold and the prediction
    drop_names(answer) -> str | None               # "AB = 4, CD = 5" -> "(4, 5)"
    decimal_comma(a, b) -> str | None              # "2,74" read as 2.74 against the gold 2.74

String work only (regexes and one bracket-matching pass, linear in the answer's length); no
sympy. What counts as formatting is a grader's choice; each is repeated at its line.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Units and currency after a number are formatting; metres only as written with a unicode power (`1,000.99m²`) or
   spaced in `\mathrm{~m}`.
2. Thousands separators (`1,000`, `1{,}000`, `1\,000`, `1 000`) are formatting only when the number is the whole answer.
3. A decimal comma is read only against one decimal written with a point, never from a thousands group (decimal_comma).
4. "or" / "and" between answers become commas, so a hedge reads as a list.
5. Named quantities (`AB = 4, CD = 5`, `\mathbb{E}[X] = 7`, `PQ^2 = 52`, `\frac{a}{b} = 3`) lose their names only
   when the other answer names nothing (drop_names).
6. Other notation has one reading: `array` as pmatrix, `\approx` as `=`, `f(x)` as `f` in ranges and equations,
   repeating decimals as fractions, `\operatorname{lcm}` as `\lcm`.
7. A whole answer in scientific notation (`2.55e-10`) is `2.55 \times 10^{-10}`; `\left[ \right]` and `\left\{ \right\}`
   around one value inside an expression are parentheses (brackets_as_parentheses).
8. A `\text{}` word next to `=` is a name, not a unit: `\text{SRMC} = \text{LRMC}` is the equation SRMC = LRMC.
9. A closing exclusion (`\text{for } \omega^2 \neq 4`) or quantifier (`\text{ for some constant } c`) states where the
   answer holds, not a second value.
10. Full-width punctuation (`，`, `：`, `；`, `（ ）`) is its ASCII form.
"""

from __future__ import annotations

import re
from functools import lru_cache

from verifier.extract import group_end

_UNICODE = str.maketrans({
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00d7": r"\times ", "\u22c5": r"\cdot ",
    "\u00b7": r"\cdot ", "\u00f7": r"\div ", "\u2264": r"\le ", "\u2265": r"\ge ",
    "\u2260": r"\ne ", "\u03c0": r"\pi ", "\u221e": r"\infty ", "\u221a": r"\sqrt",
    "\u222a": r"\cup ", "\u00b0": r"^\circ ", "\u2205": r"\emptyset ", "\u00a0": " ",
    "\u2009": " ", "\u202f": " ", "\uff0c": ",", "\u00b1": r"\pm ", "\u2213": r"\mp ",
    "\u2208": r"\in ", "\u00b2": "^2", "\u00b3": "^3", "\u00bd": r"\frac{1}{2}",
    "\u2153": r"\frac{1}{3}", "\u2154": r"\frac{2}{3}", "\u00bc": r"\frac{1}{4}",
    "\u00be": r"\frac{3}{4}", "\u2248": r"\approx ", "\u20ac": "", "\u00a3": "", "\u00a5": "",
    "\u20b9": "",  # choice 1: currency signs
    "\uff1a": ":", "\uff1b": ";", "\uff08": "(", "\uff09": ")", "\u3001": ",",  # choice 10: full-width
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
    r"|km/h|km/hr|kph|m/s|euros?|yuan|pounds?|yen|rupees?|percent(?:age)?|pct"
    "|\u00c5|\u212b|\\\\AA|nm|\u00b5m|\u03bcm|[kMG]?eV"  # choice 1: 1.69 Å, 589 nm, 13.6 eV
)
_UNIT_TAIL_RE = re.compile(rf"(?<=[\d}}\s])\s*(?:(?:square|sq\.?|cubic)\s+)?(?:{_UNITS})"
                           r"(?:\s*\^\s*\{?[23]\}?)?\s*$")
_METRE_POWER_RE = re.compile("(?<=\\d)\\s*[ckm]?m[\u00b2\u00b3](?![A-Za-z0-9])")  # choice 1: 1,000.99m²
_REPEATING_RE = re.compile(r"(\d{0,50})\.(\d{0,50})\\overline\{(\d{1,50})\}")


def _repeating_to_fraction(m: re.Match) -> str:
    r"""0.1\overline{6} -> \frac{15}{90}: (all digits - digits before the repeat) / (10^b (10^c - 1))."""
    whole, fixed, repeat = m.group(1), m.group(2), m.group(3)
    numerator = int(whole + fixed + repeat) - int(whole + fixed or "0")
    return rf"\frac{{{numerator}}}{{{10 ** len(fixed) * (10 ** len(repeat) - 1)}}}"


_THOUSANDS_RE = re.compile(r"[+-]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?|[+-]?\d{1,3}(?: \d{3})+")  # choice 2
_FUNCTION_LHS_RE = re.compile(r"(^|,\s*)([a-zA-Z])\([^()=]{1,20}\)\s*=(?!=)")
_INEQ = r"(?:<=?|>=?|\\l[et]q?|\\g[et]q?)"
_RANGE_RE = re.compile(rf"^([^<>=\\]*?)\s*({_INEQ})\s*([a-zA-Z])\s*\(\s*[a-zA-Z]\s*\)\s*({_INEQ})\s*([^<>=]*)$")
_REPLACEMENTS = [  # (pattern, replacement, only with a backslash in the answer), in order
    (re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])"), "", True),  # nested boxes: keep the group
    (re.compile(r"\\mathrm\s*\{\s*(?:~|\\[,;: ])"), r"\\text{", True),  # choice 1: 82 \mathrm{~m}, a unit
    (re.compile(r"\\(?:operatorname|mathrm|text)\s*\{\s*(gcd|lcm)\s*\}"), r"\\\1", True),  # \operatorname{lcm}
    (re.compile(r",?\s*(?:\\q?quad\s*)?\\text\s*\{\s*(?:(?:for|where|when)\s+(?:some|any|all|every|an?\s+arbitrary)\s"
                r"|where\s[^{}]{0,30}constant)[^{}]{0,40}\}[^,;=]{0,20}$"),
     "", True),  # choice 9: x^2 + c \text{ for some constant } c
    (re.compile(r",?\s*(?:\\q?quad\s*)?\\text\s*\{\s*(?:for|where|when)\s*\}[^,]{1,60}?\\neq?(?![a-zA-Z])[^,]{1,40}$"),
     "", True),  # choice 9: A = \frac{1}{4 - \omega^2}, \text{for } \omega^2 \neq 4
    (re.compile(r"\\(?:left|right|[bB]igg?[lr]?)(?![a-zA-Z])\s*\.?"), "", True),
    (re.compile(r"\\(?:displaystyle|textstyle)(?![a-zA-Z])"), "", True),
    (re.compile(r"\\odot(?![a-zA-Z])"), "odot", True),  # L_{\odot}: the sun's, a name
    (re.compile(r"(?<=\d)\s*\^\s*\{\s*\\(?:text|mathrm)\s*\{\s*(?:st|nd|rd|th)\s*\}\s*\}|(?<=\d)(?:st|nd|rd|th)\b"),
     "", False),  # ordinals: 12^{\text{th}}, 12th
    (re.compile(r"\\[lr]?vert(?![a-zA-Z])"), "|", True),
    (re.compile(r"\\langle(?![a-zA-Z])"), "(", True),
    (re.compile(r"\\rangle(?![a-zA-Z])"), ")", True),
    (re.compile(r"\\lbrace(?![a-zA-Z])"), r"\{", True),
    (re.compile(r"\\rbrace(?![a-zA-Z])"), r"\}", True),
    (re.compile(r"\\mathbb\s*\{?\s*R\s*\}?"), r"(-\\infty, \\infty)", True),  # the real line
    (re.compile(r"(?<=[)\]])\s*U\s*(?=[(\[])"), r" \\cup ", False),  # (1, 2) U (3, 4)
    (re.compile(r"\s*(?<!\\)\{\s*,\s*\}\s*"), ",", False),  # 1{,}000, 14 {, }916
    (re.compile(r"(?<!\\)\\!\s*"), "", True),  # 10,\!080
    (re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))"), "", True),  # 1\,000
    (re.compile(r"(?<!\\)\\[,;:> ]|\\q?quad|~"), " ", False),  # not the \\ of a matrix; \quadx too
    (re.compile(r"\\?\$|(?<!\\)\\[()\[\]]"), "", False),  # $, \$ and the math delimiters \( \[
    (re.compile(r"(?:\^\s*\{?\s*\\circ\s*\}?|\\circ(?![a-zA-Z])|\^\s*\\degree|\\degree)"
                r"(?:\s*[CF](?![A-Za-z]))?"), "", True),  # 30^\circ, 30°C
    (re.compile(r"\\?%"), "", False),
    (re.compile(r"\\begin\s*\{array\}\s*\{[lcr|\s]*\}"), r"\\begin{pmatrix}", True),  # choice 6
    (re.compile(r"\\end\s*\{array\}"), r"\\end{pmatrix}", True),
    (re.compile(r"^\s*([A-Za-z](?:_\{?\w+\}?)?)\s*\\approx(?![a-zA-Z])"), r"\1 =", True),  # x \approx 11
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
        end = group_end(s, m.end() - 1)
        if end < 0:
            break
        content = s[m.end() : end - 1].strip()
        out.append(s[pos : m.start()])
        letters = sum(ch.isalpha() for ch in content)
        min_letters = 2 if m.group(1) in _MATH_FONTS else 1
        beside_equals = s[: m.start()].rstrip().endswith("=") or s[end:].lstrip().startswith("=")
        if content.lower() in _HEDGE_WORDS:
            out.append(",")
        elif (letters >= min_letters and not re.search(r"[\d\\^_=]", content) and not beside_equals  # choice 8
              and not re.fullmatch(r"\([A-Za-z]\)", content)):  # (C) is a choice, not a unit
            out.append("\x01")
            words.append(content)
        else:
            out.append(" " + content + " ")
        pos = end
    out.append(s[pos:])
    return "".join(out), words


_PLAIN_NUMBER_RE = re.compile(r"[+-]?\d+(?:\.\d+)?")
_WORD_LIST_RES = [  # choice 4, in order: 42 or 43; (11,7)or(7,11); 19, 46, and 82; 1, 2, , 3
    (re.compile(r"(?<=\w)\s+(?:or|and)\s+(?=[\w\\(\[{-])"), ", "),
    (re.compile(r"(?<=[)\]}\d])\s*(?:or|and)\s*(?=[(\[{\\\dA-Z-])"), ", "),
    (re.compile(r",\s*(?:or|and)\s+"), ", "),
    (re.compile(r",\s*(?:,\s*)+"), ", "),
]
_UNIT_MARK_RE = re.compile(r"\x01(?:\s*\^\s*\{?-?[1-4]\}?)?")  # m^2, yr^{-1}
_SPACES_RE = re.compile(r"\s+")


_SCIENTIFIC_RE = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)[eE]([+-]?\d{1,3})\s*")  # choice 7: 2.55e-10
_LEFT_RIGHT_RE = re.compile(r"\\(left|right)(?![a-zA-Z])\s*(\\[{}]|[\[\]().|]|\\[lr]?vert|\\[lr]brace)?")


def brackets_as_parentheses(s: str) -> str:
    r"""Choice 7: `\left[ \right]` and `\left\{ \right\}` pairs holding one value (no comma at their top
    level, no matrix) become parentheses, unless the pair is the whole answer (a one-element set).

    >>> brackets_as_parentheses(r"\frac{1}{4}\left[\cos t+\sin t\right]"), brackets_as_parentheses(r"\left[0, 1\right]")
    ('\\frac{1}{4}\\left(\\cos t+\\sin t\\right)', '\\left[0, 1\\right]')
    """
    stack, pairs = [], []
    for m in _LEFT_RIGHT_RE.finditer(s):
        if m.group(1) == "left":
            stack.append(m)
        elif stack:
            pairs.append((stack.pop(), m))
    out = list(s)
    for left, right in pairs:
        inner = s[left.end() : right.start()]
        whole = left.start() == 0 and right.end() == len(s.rstrip())
        if (left.group(2) in ("[", r"\{") and not whole and "\\begin" not in inner
                and len(split_top(inner.replace(r"\{", "(").replace(r"\}", ")"), ",;")) == 1):
            out[left.start() : left.end()] = [r"\left("] + [""] * (left.end() - left.start() - 1)
            out[right.start() : right.end()] = [r"\right)"] + [""] * (right.end() - right.start() - 1)
    return "".join(out)


@lru_cache(maxsize=4096)
def normalize(answer: str) -> str:
    """Strip formatting (choices 1-4 and 6-8) and return a canonical string for parsing."""
    if _PLAIN_NUMBER_RE.fullmatch(answer):
        return answer  # 42, -0.5: nothing to strip (the common case, kept fast)
    scientific = _SCIENTIFIC_RE.fullmatch(answer)
    if scientific:  # choice 7
        return rf"{scientific.group(1)} \times 10^{{{int(scientific.group(2))}}}"
    s = brackets_as_parentheses(answer) if "\\left" in answer else answer  # choice 7
    s = re.sub("\u221a(\\d+)", r"\\sqrt{\1}", s)  # unicode root of a whole number: √19
    s = _METRE_POWER_RE.sub("", s)
    s = _INVISIBLE_RE.sub("", s.translate(_UNICODE))
    for pattern, replacement, needs_backslash in _REPLACEMENTS:
        if "\\" in s or not needs_backslash:
            s = pattern.sub(replacement, s)
    s = _REPEATING_RE.sub(_repeating_to_fraction, s)
    s, words = _unwrap_text(s)
    if not s.replace("\x01", "").strip(" ,.") and words:
        return " ".join(words)  # a text answer: \text{Evelyn}, \text{(C)}
    s = _UNIT_MARK_RE.sub(" ", s)  # units, with their ^2 (15\mbox{ cm}^2)
    s = _SPACES_RE.sub(" ", s).strip()
    for pattern, replacement in _WORD_LIST_RES:
        s = pattern.sub(replacement, s)
    s = _UNIT_TAIL_RE.sub("", s).strip().rstrip(".").strip()
    for _ in range(3):  # outer braces: {42}
        if s.startswith("{") and group_end(s, 0) == len(s):
            s = s[1:-1].strip()
    if _THOUSANDS_RE.fullmatch(s):  # choice 2 (only when that is the whole answer)
        s = s.replace(",", "").replace(" ", "")
    s = _RANGE_RE.sub(r"\1 \2 \3 \4 \5", s)  # choice 6: 0 < f(x) < 1 -> 0 < f < 1
    return _FUNCTION_LHS_RE.sub(r"\1\2 =", s)  # f(x) = 2x + 3 -> f = 2x + 3, per list item


# ----------------------------------------------------------------------------------------------
# Choice 3: decimal commas
# ----------------------------------------------------------------------------------------------

_DECIMAL_COMMA_RE = re.compile(r"[+-]?(?:\d+,(?:\d{1,2}|\d{4,})|0,\d+)")
_DECIMAL_POINT_RE = re.compile(r"[+-]?\d*\.\d+")


def decimal_comma(answer: str, other: str) -> str | None:
    """answer (normalised) with its decimal comma as a point, if choice 3 applies; else None.

    >>> decimal_comma("2,74", "2.74"), decimal_comma("1,500", "1.5"), decimal_comma("1,5", "1, 5")
    ('2.74', None, None)
    """
    if _DECIMAL_COMMA_RE.fullmatch(answer) and _DECIMAL_POINT_RE.fullmatch(other):
        return answer.replace(",", ".")
    return None


# ----------------------------------------------------------------------------------------------
# Choice 5: named quantities
# ----------------------------------------------------------------------------------------------

MAX_NAME_CHARS = 40  # a longer left-hand side is not a name
_NAME_RE = re.compile(r"(?:[A-Za-z]|_(?:\{[A-Za-z0-9]+\}|[A-Za-z0-9])|\\(?:angle|overline|triangle|frac)"
                      r"(?![A-Za-z])|[|:/{}\s])+")  # one way to read each character: linear
_NAMED_FORM_RE = re.compile(r"(?:\\mathbb\s*\{[A-Z]\}|[A-Z][a-z]{0,2})\s*\[[A-Za-z0-9_ ]{1,10}\]"  # E[X], \mathbb{E}[X]
                            r"|[A-Z][a-z]{1,2}\s*\([A-Za-z0-9_ ]{1,10}\)"  # Var(X)
                            r"|[A-Z]{2,3}\s*\^\s*\{?[23]\}?"  # PQ^2: a segment's square
                            r"|\\frac\s*\{[A-Za-z]{1,3}\}\s*\{[A-Za-z]{1,3}\}")  # \frac{a}{b}: a ratio of names
_VALUE_RE = re.compile(r"(?:[^A-Za-z=<>]|\\[A-Za-z]+)+")  # no bare letters: a value, not an equation


def _is_name(lhs: str, letters_too: bool) -> bool:
    """Choice 5: lhs names a quantity: capitalised and compound (AB, |AB|, V_1, S_{MBCN}:S,
    \frac{NO}{BO}); with letters_too also one letter (p, x_1). xy and 2x + y are not names."""
    if len(lhs) > MAX_NAME_CHARS:
        return False
    if _NAMED_FORM_RE.fullmatch(lhs.strip()):  # choice 5: E[X], Var(X), PQ^2, \frac{a}{b} name a quantity
        return True
    if not _NAME_RE.fullmatch(lhs):
        return False
    if letters_too and re.fullmatch(r"\s*[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*", lhs):
        return True
    return bool(re.search(r"[A-Z]", lhs)) and bool(re.search(r"[A-Z][A-Za-z]|[|:]|\\|[A-Z]_", lhs))


def split_top(s: str, seps: str) -> list[str]:
    """s split at the separators outside (), [] and {}."""
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(s):
        depth += (ch in "([{") - (ch in ")]}")
        if ch in seps and depth == 0:
            parts.append(s[last:i])
            last = i + 1
    return parts + [s[last:]]


def _named_value(item: str, letters_too: bool = False) -> str | None:
    lhs, eq, rhs = item.partition("=")
    if not eq or not _is_name(lhs, letters_too) or not _VALUE_RE.fullmatch(rhs.strip() or "="):
        return None
    return rhs.strip()


def drop_names(answer: str) -> str | None:
    r"""The values of an answer that names each of them (choice 5), in order; None otherwise.

    >>> drop_names("AB=4,CD=5"), drop_names("|AB|=1"), drop_names(r"S_{MBCN}:S=7:32")
    ('(4, 5)', '1', '7:32')
    >>> drop_names("p=5,q=2;p=7,q=2"), drop_names("xy = 6"), drop_names("x = 5")
    ('(5, 2), (7, 2)', None, None)
    """
    if "=" not in answer:
        return None
    groups = split_top(answer, ";")
    if len(groups) > 1:  # p=5,q=2;p=7,q=2: one tuple per group (single letters name here too)
        tuples = []
        for group in groups:
            values = [_named_value(item, letters_too=True) for item in split_top(group, ",")]
            if None in values or len(values) < 2:
                return None
            tuples.append("(" + ", ".join(values) + ")")
        return ", ".join(tuples)
    values = [_named_value(item) for item in split_top(answer, ",")]  # (no "=": returned above)
    if None in values:
        return None
    return values[0] if len(values) == 1 else "(" + ", ".join(values) + ")"
