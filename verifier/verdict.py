r"""The verify mode's verdict on one extracted answer against its gold: integer golds by
string work, every other gold by exact equality.

    verdict(pred, gold) -> bool           # fast_verdict, else sympy_verdict
    fast_verdict(pred, gold) -> bool | None   # string work only: integer, text and base-b golds
    sympy_verdict(pred, gold) -> bool     # parse both (parse.py) and compare exactly (equal.py)

fast_verdict runs in the trainer's process (a few linear regex passes over a capped tail);
sympy_verdict is what each worker of pool.py runs, killed at the reward's timeout. The sections
below follow reward.py's rules for integer golds and for other golds; the two readings here are
this file's own.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. A gold that is one letter A-J is a choice letter: `(H)`, `H.` or `H)` followed by the option's text answers
   it, unless the answer names a second letter.
2. An equality chain (`MRS = a = b`) answers with its last side, only when every other side equals it (the first
   unless it names the quantity).
"""

from __future__ import annotations

import numbers
import re

from verifier.normalize import decimal_comma, drop_names, normalize, split_top

MAX_ANSWER_CHARS = 2000  # a longer "final answer" is not parsed (scored incorrect)

# ----------------------------------------------------------------------------------------------
# Integer golds (reward.py), text golds and base-b golds: string work only
# ----------------------------------------------------------------------------------------------

_ASSIGN_RE = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?\s*=\s*")
_INT_RE = re.compile(r"[+-]?(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)(?:\.0*)?")  # 0,111 is no integer
_HEDGE_TAIL_WORDS = {"or", "and", "to", "more", "less", "than", "about", "approximately",
                     "roughly", "nearly", "almost", "least", "most", "between", "plus", "minus",
                     "times", "not", "over", "under", "above", "below"}
_BASE_RE = re.compile(r"([0-9A-Za-z]+)_\{?(\d+)\}?")
_CHOICE_RE = re.compile(r"\(?([A-Ja-j])\)?")  # choice 1
_OPTION_RE = re.compile(r"\(([A-Ja-j])\)|([A-J])(?:[.:)](?:\s|$)|$)")  # (H) \frac{1}{2}, H. 12, H


def integer_literal(s: str) -> str | None:
    """Canonical integer ("-12", "73") if the normalised s is a plain number literal, else None.

    >>> integer_literal("073"), integer_literal("x = 1,000"), integer_literal("27.0")
    ('73', '1000', '27')
    >>> integer_literal("10^3") is None, integer_literal("41, 42") is None
    (True, True)
    """
    s = re.sub(r"^([+-])\s+", r"\1", _ASSIGN_RE.sub("", s, count=1).strip())  # - 5
    if len(s) > 2 and s[0] + s[-1] in ("()", "{}") and "," not in s:  # (2,251,252) is a tuple
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
        re.fullmatch(r"\([A-Ja-j]\)|[A-J]", gold)
    )


def option_letter(p: str) -> str | None:
    """Choice 1: the one choice letter an answer opens with, before the option's text; None if it
    opens with none or names another letter too.

    >>> option_letter(r"(H) \\frac{1}{2}"), option_letter("H. 12"), option_letter("(H), (I)"), option_letter("Hx")
    ('h', 'h', None, None)
    """
    opening = _OPTION_RE.match(p)
    if opening is None:
        return None
    letter = (opening.group(1) or opening.group(2)).lower()
    named = {x.lower() for x in re.findall(r"\(([A-Ja-j])\)", p)}
    return letter if named <= {letter} else None


def chain_sides(p: str) -> list[str] | None:
    """Choice 2: the sides of an equality chain `a = b = c` (two or more top-level `=`, no list, no
    inequality), or None.

    >>> chain_sides("MRS = 4/6 = 2/3"), chain_sides("x = 5"), chain_sides("x = 1, y = 2")
    (['MRS', '4/6', '2/3'], None, None)
    """
    if p.count("=") < 2 or re.search(r"[<>!:]|\\(?:[lg]eq?|neq?|approx)(?![a-zA-Z])", p):
        return None
    if len(split_top(p, ",;")) > 1:
        return None
    sides = [side.strip() for side in split_top(p, "=")]
    return sides if len(sides) >= 3 and all(sides) else None


def _text_key(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def comparable(pred: str, gold: str) -> tuple[str, str]:
    """Both answers normalised, then read against each other (normalize.decimal_comma, normalize.drop_names):
    names dropped from the one side that names its values, a decimal comma read as a point
    against a decimal gold (or a decimal-comma gold against a decimal prediction)."""
    p, g = normalize(pred), normalize(gold)
    p_values, g_values = drop_names(p), drop_names(g)
    if (p_values is None) != (g_values is None):
        p, g = p_values or p, g_values or g  # AB = 4, CD = 5 against (4, 5)
    return decimal_comma(p, g) or p, decimal_comma(g, p) or g


def fast_verdict(pred: str, gold: str) -> bool | None:
    """The verdict from string work alone, or None if it needs the sympy path. Bounded: a few
    linear regex passes over at most TAIL_CHARS characters."""
    if len(pred) > MAX_ANSWER_CHARS:
        return False
    p, g = comparable(pred, gold)
    gold_int = integer_literal(g)
    if gold_int is not None:  # an integer gold: a number literal equal to it (reward.py)
        if integer_literal(p) == gold_int:
            return True
        sides = chain_sides(p)  # choice 2: a chain ending in the gold is checked on the sympy path
        return None if sides is not None and integer_literal(sides[-1]) == gold_int else False
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
            return _text_key(p) == choice.group(1).lower() or option_letter(p) == choice.group(1).lower()
        return _text_key(p) == _text_key(g)
    return None


# ----------------------------------------------------------------------------------------------
# Other golds (reward.py): parse both answers and compare them exactly (parse.py, equal.py)
# ----------------------------------------------------------------------------------------------


def sympy_verdict(pred: str, gold: str) -> bool:
    """Parse both normalised answers and compare them (reward.py: exact equality). Any failure (a ParseError, or
    one of the many exception types sympy raises) is an incorrect answer."""
    from verifier.equal import answers_equal, rounds_to  # sympy is imported only on this path
    from verifier.parse import parse

    p, g = comparable(pred, gold)
    try:
        gold_value = parse(g)
    except Exception:  # noqa: BLE001 - a gold outside the grammar (7:32, 12:00): compare the text
        return p.replace(" ", "") == g.replace(" ", "")
    readings = [p]
    if "%" in pred and "%" not in gold:  # 25\% against 0.25: percent as formatting or as /100
        readings.append(rf"\frac{{{p}}}{{100}}")
    sides = None if "=" in g else chain_sides(p)
    if sides is not None:  # choice 2: the last side, if the chain is true
        try:
            last = parse(sides[-1])
            named = re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", sides[0]))  # MRS, m + n: a name
            if all(answers_equal(last, parse(side)) for side in sides[(1 if named else 0) : -1]):
                readings.append(sides[-1])
        except Exception:  # noqa: BLE001 - a side outside the grammar: no reading
            pass
    for reading in readings:
        try:
            value = parse(reading)
            if answers_equal(gold_value, value) or rounds_to(g, value):  # a rounded gold matches what rounds to it
                return True
        except Exception:  # noqa: BLE001
            pass
    return False


def gold_text(gold) -> str:
    """Datasets sometimes store a gold as a number (42, 27.0, numpy.int64): read it as text."""
    return str(gold) if isinstance(gold, numbers.Real) and not isinstance(gold, bool) else gold


def verdict(pred: str, gold: str) -> bool:
    """Whether the extracted answer `pred` equals the gold, in this process."""
    gold = gold_text(gold)
    fast = fast_verdict(pred, gold)
    return fast if fast is not None else sympy_verdict(pred, gold)
