r"""The verify mode's verdict on one extracted answer against its gold: integer golds by
string work (closed arithmetic evaluated exactly), every other gold by exact equality.

    verdict(pred, gold) -> bool           # fast_verdict, else sympy_verdict
    fast_verdict(pred, gold) -> bool | None   # string work only: integer, text, yes/no and base-b golds
    sympy_verdict(pred, gold) -> bool     # parse both (parse.py) and compare exactly (equal.py)

fast_verdict runs in the trainer's process (a few linear regex passes over a capped tail);
sympy_verdict is what each worker of pool.py runs, killed at the reward's timeout. The sections
below follow reward.py's rules for integer golds and for other golds; the readings below are
this file's own.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. A gold that is one letter A-J is a choice letter: `(H)`, `H.` or `H)` followed by the option's text answers
   it, unless the answer names a second letter.
2. An equality chain (`MRS = a = b`) answers with its last side, only when every other side equals it (the first
   unless it names the quantity).
3. A gold is read like a response: a sentence, display math or a box around it reduces to the value it states
   (gold_answer).
4. Against an integer gold, closed arithmetic with no letters (`2^8`, `\sqrt{3^2+4^2}`, `\binom{5}{2}`) answers
   when its exact value is the gold (closed_arithmetic, decided on the sympy path).
5. A yes/no gold is answered by a leading yes/no word followed only by a remark (`yes, it is possible`), never by
   both words, a hedge or a value (yes_no).
6. A ratio of two numbers `a:b` is the fraction a/b against a gold that is not a ratio.
7. Answers outside the grammar (`\begin{cases}`) compare as text, up to spaces and the spelling of `\le`, `\ge`,
   `\ne` and `\frac` (text_form).
"""

from __future__ import annotations

import numbers
import re
from functools import lru_cache

from verifier.normalize import decimal_comma, drop_names, normalize, split_top
from verifier.prose import sentence_answer

MAX_ANSWER_CHARS = 2000  # a longer "final answer" is not parsed (scored incorrect)
MAX_GOLD_SENTENCE = 400  # characters of a gold read as a sentence (choice 3); a longer gold is read as written
MAX_CLOSED_CHARS = 200  # characters of closed arithmetic read against an integer gold (choice 4)

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


_PLAIN_NUMBER_RE = re.compile(r"[+-]?\d+(?:\.\d+)?")
_CLOSED_RE = re.compile(r"(?:[\d\s+\-*/^!(){}\[\].,]|\\(?:sqrt|[dt]?frac|[dt]?binom|times|cdot|div|gcd|lcm)"
                        r"(?![a-zA-Z]))+")  # choice 4: numbers and operators, no letters
_OPERATION_RE = re.compile(r"[\^!*/\\(]|\d\s*[+-]")


def closed_arithmetic(p: str) -> bool:
    """Choice 4: p (normalised, `x = ` allowed) is arithmetic on numbers alone, to be evaluated exactly.

    >>> closed_arithmetic("2^8"), closed_arithmetic(r"x = \\sqrt{3^2 + 4^2}"), closed_arithmetic("2^8 + n")
    (True, True, False)
    """
    p = _ASSIGN_RE.sub("", p, count=1)
    return len(p) <= MAX_CLOSED_CHARS and bool(_CLOSED_RE.fullmatch(p)) and bool(_OPERATION_RE.search(p))


_YES_NO_RE = re.compile(r"(yes|no)\b\s*(?:[,.;:!]\s*(.*))?", re.IGNORECASE | re.DOTALL)
_UNSURE_WORDS = {"yes", "no", "not", "but", "if", "unless", "except", "only", "maybe", "perhaps", "possibly",
                 "sometimes", "necessarily", "depends", "either", "neither", "or", "and"}


def yes_no(p: str) -> str | None:
    """Choice 5: "yes" or "no" if p opens with that word and the rest is only a remark, else None.

    >>> yes_no("Yes"), yes_no("yes, it is possible"), yes_no("No, it is not possible")
    ('yes', 'yes', 'no')
    >>> yes_no("yes, no"), yes_no("not necessarily"), yes_no("Yes, if n is even"), yes_no("yes, 5")
    (None, None, None, None)
    """
    m = _YES_NO_RE.fullmatch(p.strip())
    if m is None or re.search(r"\d", m.group(2) or ""):
        return None  # "yes, 5": a value besides the word
    word = m.group(1).lower()
    unsure = _UNSURE_WORDS - ({"no", "not"} if word == "no" else set())  # "No, it is not possible"
    return None if unsure & set(re.findall(r"[a-z']+", (m.group(2) or "").lower())) else word


def _text_key(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def text_form(s: str) -> str:
    r"""Choice 7: s without spaces, with one spelling of `\le`, `\ge`, `\ne` and `\frac`."""
    s = re.sub(r"\\([lgn]e)q(?![a-zA-Z])", r"\\\1", re.sub(r"\s+", "", s))
    return re.sub(r"\\[dtc]frac(?![a-zA-Z])", r"\\frac", s)


@lru_cache(maxsize=4096)
def gold_answer(gold: str) -> str:
    """Choice 3: the value a gold states, read as a response's `Answer:` line is (prose.sentence_answer):
    "The answer is $5$." -> 5, "There are 12 ways." -> 12; a gold with no prose is returned as written."""
    if len(gold) > MAX_GOLD_SENTENCE:
        return gold
    return sentence_answer(gold.strip()).strip().rstrip(".").strip() or gold


def comparable(pred: str, gold: str) -> tuple[str, str]:
    """Both answers normalised (the gold read by gold_answer first), then read against each other
    (normalize.decimal_comma, normalize.drop_names): names dropped from the one side that names its values,
    a decimal comma read as a point against a decimal gold (or a decimal-comma gold against a decimal
    prediction)."""
    p, g = normalize(pred), normalize(gold_answer(gold))
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
    if gold_int is not None:  # an integer gold: a number literal equal to it (reward.py), or closed arithmetic
        if integer_literal(p) == gold_int:
            return True
        sides = chain_sides(p)  # choice 2: a chain ending in the gold is checked on the sympy path
        if sides is not None:
            return None if integer_literal(sides[-1]) == gold_int else False
        return None if closed_arithmetic(p) else False  # choice 4: evaluated on the sympy path
    if p == g:
        return True
    if _text_key(g) in ("yes", "no"):  # choice 5
        return yes_no(p) == _text_key(g)
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


def _chain_reading(sides: list[str]):
    """Choice 2: the last side of a chain, parsed, if every other side equals it (the first unless it names
    the quantity: MRS, m + n); else None."""
    from verifier.equal import answers_equal
    from verifier.parse import parse

    try:
        last = parse(sides[-1])
        named = re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", sides[0]))
        if all(answers_equal(last, parse(side)) for side in sides[(1 if named else 0) : -1]):
            return last
    except Exception:  # noqa: BLE001 - a side outside the grammar: no reading
        pass
    return None


def _integer_verdict(p: str, gold_int: int) -> bool:
    """An integer gold on the sympy path: a true chain ending in it (choice 2), or closed arithmetic whose exact
    value, in sympy's canonical form, is the gold (choice 4: no numeric agreement, no tolerance)."""
    import sympy as sp

    from verifier.equal import assigned_value
    from verifier.parse import parse

    sides = chain_sides(p)
    if sides is not None:
        return integer_literal(sides[-1]) == str(gold_int) and _chain_reading(sides) is not None
    try:
        value = assigned_value(parse(p)) if closed_arithmetic(p) else None
    except Exception:  # noqa: BLE001 - refused by parse.py's caps (10^{10^{10}}) or outside the grammar
        return False
    return isinstance(value, sp.Integer) and int(value) == gold_int


_RATIO_RE = re.compile(r"([^:]{1,40}):([^:]{1,40})")  # choice 6: 3:2


def sympy_verdict(pred: str, gold: str) -> bool:
    """Parse both normalised answers and compare them (reward.py: exact equality). Any failure (a ParseError, or
    one of the many exception types sympy raises) is an incorrect answer."""
    from verifier.equal import answers_equal, constants_renamed, rounds_to  # sympy is imported only on this path
    from verifier.parse import parse

    p, g = comparable(pred, gold)
    gold_int = integer_literal(g)
    if gold_int is not None:
        return _integer_verdict(p, int(gold_int))
    try:
        gold_value = parse(g)
    except Exception:  # noqa: BLE001 - a gold outside the grammar (7:32, 12:00, cases): compare the text
        return text_form(p) == text_form(g)  # choice 7
    readings = [p]
    if "%" in pred and "%" not in gold:  # 25\% against 0.25: percent as formatting or as /100
        readings.append(rf"\frac{{{p}}}{{100}}")
    ratio = None if ":" in g else _RATIO_RE.fullmatch(p)
    if ratio is not None and all(closed_arithmetic(side) or _PLAIN_NUMBER_RE.fullmatch(side.strip())
                                 for side in ratio.groups()):
        readings.append(rf"\frac{{{ratio.group(1)}}}{{{ratio.group(2)}}}")  # choice 6: 3:2 is 3/2
    sides = None if "=" in g else chain_sides(p)
    if sides is not None and _chain_reading(sides) is not None:  # choice 2: the last side, if the chain is true
        readings.append(sides[-1])
    for reading in readings:
        try:
            value = parse(reading)
            if answers_equal(gold_value, value) or rounds_to(g, value):  # a rounded gold matches what rounds to it
                return True
            if constants_renamed(gold_value, value):  # y = C e^x against y = c e^x (equal.py)
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
