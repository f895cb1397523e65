r"""Prose read as an answer, for verifier/extract.py: the value a sentence states (an `Answer:` line in
words, an `<answer>` tag or box holding a sentence) and the closing sentence of a finished solution
with no marker at all.

    sentence_answer(line) -> str                  # "The largest $n$ is 34." -> "34"; else line unchanged
    closing_answer(text) -> str | None            # the value a finished solution's last sentence states
    repeated_closing(text) -> str | None          # the value a loop on one closing sentence states
    one_value(text) -> str | None                 # text itself if it is one number or one math span

String work only: a bounded number of linear regex passes over at most CLOSING_CHARS characters.
A hedge never becomes an answer: a sentence the rules below cannot read is left as written (and
then fails to parse) or gives None.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Prose counts only as one hedge-free sentence naming one value (or an and/or list).
2. With no marker, a finished solution (not cut at the length limit, after MIN_SOLUTION_CHARS) answers with its last
   sentence if it states one value hedge-free, a last line of one bold value, or a display after a concluding colon.
3. A response that loops on one closing sentence stating one value answers with it, cut at the length limit or not.
"""

from __future__ import annotations

import re

CLOSING_CHARS = 2000  # characters at the end of a response read for its closing sentence (choice 2)
MIN_SOLUTION_CHARS = 100  # working before a closing sentence (choice 2): one sentence alone is no solution
MAX_SENTENCE = 400  # characters of a closing sentence (choice 2); a longer one is not read


_MATH_RE = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]")
_NUMBER_RE = re.compile(r"(?<![\w.,\\])[-+]?[$\u20ac\u00a3\u00a5]?\d+(?:,\d{3})*(?:\.\d+)?"
                        r"(?:[\u00b2\u00b3\u20ac\u00a3\u00a5%]|[a-zA-Z]{1,3}[\u00b2\u00b3](?![a-zA-Z]))?"
                        r"(?![\w.,]?\d)(?![a-zA-Z])")
_COPULA_RE = re.compile(r"(?<![A-Za-z'])(?:is|are|was|were|be|equals?|it's)(?![A-Za-z'])|(?<![<>!=])=(?!=)")
_HEDGES = {"no", "nor", "either", "neither", "approximately", "approx", "about", "around",
           "roughly", "nearly", "almost", "close", "between", "least", "most", "than", "maybe",
           "perhaps", "possibly", "probably", "might", "wrong",
           "incorrect", "unless", "except", "if", "but", "assuming", "estimate", "estimated",
           "twice", "half", "double", "triple", "times", "cannot", "isn't", "aren't", "impossible"}
# hedges after the copula only: "the sum is 12", "the number of marbles before adding more was 16"
_OPERATIONS = {"root", "sum", "product", "difference", "ratio", "more", "less", "fewer"}
_PREMISE_RE = re.compile(r"(?i)^\W*(?:and\s+|so\s+)?(?:since|because)\b[^,]{1,200},")  # "Since tan 45 is 1, ..."
_RELATIVE_RE = re.compile(r",\s*which\b")  # "..., which is a terminating decimal"
_SUBJECT_TAIL_RE = re.compile(r"\s*(?:the|our|my|a)?\s*(?:final\s+|correct\s+|right\s+)?"
                              r"(?:answer|solution|result|value)(?:\s+set)?s?\W*$", re.IGNORECASE)


def _values(masked: str, line: str, lo: int, hi: int) -> list[tuple[int, int, str]]:
    """(start, end, text) of the math spans and bare numbers in line[lo:hi] (masked: spans hidden)."""
    found = [(m.start(), m.end(), next(g for g in m.groups() if g is not None))
             for m in _MATH_RE.finditer(line, lo, hi)]
    found += [(m.start(), m.end(), m.group(0)) for m in _NUMBER_RE.finditer(masked, lo, hi)]
    return sorted(found)


def _words(text: str) -> list[str]:
    return [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z']+", re.sub(r"\\[A-Za-z]+", " ", text))]


def _competing(masked: str, line: str, copulas: list, end: int, final: str) -> bool:
    """Choice 1: a value other than the final one, stated right after an earlier copula ("is 10
    which is 12"), competes with it; "is not 10", "there are 9 ..., so the answer is 9" or "be in
    the domain of $f(x)$" does not."""
    bounds = [c.end() for c in copulas] + [end]
    for lo, hi in zip(bounds[:-2], bounds[1:-1]):
        first = next(iter(_values(masked, line, lo, hi)), None)
        if first is not None and not _words(masked[lo : first[0]]) and first[2] != final:
            return True
    return False


def sentence_answer(line: str) -> str:
    r"""Choice 1: the value(s) a prose Answer line names, or the line unchanged.

    >>> sentence_answer("The largest $n$ is 34."), sentence_answer("Therefore $x > 5$ is the solution.")
    ('34', 'x > 5')
    >>> sentence_answer("It is not 10, it is 12"), sentence_answer("It is 10, which is 12")
    ('12', 'It is 10, which is 12')
    >>> sentence_answer("The answer is about 5"), sentence_answer("The roots are $1$ or $2$")
    ('The answer is about 5', '1, 2')
    """
    masked = _MATH_RE.sub(lambda m: "\x00" * len(m.group(0)), line)
    if len([w for w in _words(masked) if w not in ("and", "or")]) < 2:
        return line  # no prose: the line as written
    values = _sentence_values(masked, line)
    return line if values is None else ", ".join(values)


def _sentence_values(masked: str, line: str) -> list[str] | None:
    """Choice 1: the values the first sentence of a prose line states, or None if it states none
    or hedges (masked: the line with its math spans hidden)."""
    stop = re.search(r"[.!?](?=\s+[A-Z])", masked)
    end = stop.start() if stop else len(line)
    if _values(masked, line, end, len(line)):
        return None  # "The value is $5$. Also $6$ works.": a later sentence names another value
    if _HEDGES & set(_words(re.sub(r"(?i)\bno matter\b", " ", masked[:end]))):
        return None  # "no matter which way I approach it" is no negation
    premise = _PREMISE_RE.match(masked[:end])
    start = premise.end() if premise else 0  # a premise's values do not compete with the main clause's
    relative = _RELATIVE_RE.search(masked, start, end)
    if relative and not _values(masked, line, relative.start(), end):
        if ({"not"} | _OPERATIONS) & set(_words(masked[relative.start() : end])):
            return None  # "..., which is not reduced"
        end = relative.start()  # a relative clause naming no value describes the value
    copulas = [c for c in _COPULA_RE.finditer(masked, start, end)  # "books that are 400 pages": no main copula
               if not _RELATIVE_SUBJECT_RE.search(masked, max(0, c.start() - 12), c.start())]
    values = _values(masked, line, start, end)
    after_copula = masked[copulas[-1].end() if copulas else values[0][0] if values else 0 : end]  # the sum $a + b = 5$
    if _OPERATIONS & set(_words(after_copula)):
        return None
    if not copulas:  # "We find that $x < 3$", "Jane started 3 hours ago"
        return [values[0][2]] if len(values) == 1 and "not" not in _words(masked[:end]) else None
    last = copulas[-1]
    tail = _values(masked, line, last.end(), end)
    joins = [masked[a[1] : b[0]] for a, b in zip(tail, tail[1:])]
    if (tail and not _competing(masked, line, copulas, end, tail[-1][2])
            and "not" not in _words(masked[last.end() : end]) and len(_words(masked[last.end() : tail[0][0]])) <= 4
            and all(re.fullmatch(r"[\s,;]*(?:and|or)?[\s,;]*", j) for j in joins)):
        return [v[2] for v in tail]  # "... is 34", "... are $1$ and $2$"
    head = _values(masked, line, start, copulas[0].start())
    if not tail and len(head) == 1 and _SUBJECT_TAIL_RE.match(masked[last.end() : end]):
        return [head[0][2]]  # "$x \\ge 5$ is the solution"
    return None

_BOLD_LINE_RE = re.compile(r"(.*?)\*\*([^*\n]{1,200})\*\*[.!]?")
_UNIT_WORD_RE = re.compile(r"\s+[A-Za-z]{1,6}(?:/[A-Za-z]{1,6})?$")  # **35.06 g/mol**: a value and its unit
_CONCLUDING_RE = re.compile(r"(?i)\b(?:therefore|thus|hence|in conclusion|finally|final|answer|result)\b")
_DISPLAY_END_RE = re.compile(r":[ \t]*\n\s*(?:\$\$|\\\[)([^$\n]{1,200}?)(?:\$\$|\\\])\s*$")  # that:\n$$\tan A = 2$$
_RELATIVE_SUBJECT_RE = re.compile(r"(?i)\b(?:that|which|who)\s+$")
_RESULT_RE = re.compile(r"(?i)^\W*(?:therefore|thus|so|hence|in total|altogether)\b.{0,80}"
                        r"\b(?:brought|collected|sent|paid|earned|spent|received|made|sold|bought|ate|scored|won|owes?|weighs?|costs?|pays?|earns?"
                        r"|receives?|would (?:receive|pay|earn|need|have|get)|will (?:take|need|have|get|pay|earn))\b")
_STATING_RE = re.compile(r"(?i)\b(?:has|have|had|contains?|takes?|needs?(?!\s+to\b)|gives?|yields?|saved?|end up with"
                         r"|arrived? at|(?:de|in)creases? by)\b")  # "Hillary has 7 nickels": a value stated by a verb
_END_TOKEN_RE = re.compile(r"(?:\s*<\|[a-z_]{1,30}\|>)+\s*$")  # <|end_of_solution|>
_REMARK_RE = re.compile(r"(?i)\b(?:that'?s|that is|this is)\s+(?:it|(?:the|my)\s+(?:final\s+|right\s+|correct\s+)?"
                        r"answer)\b|\bI'?m confident\b|\bchecks out\b|\bmakes sense\b|\blooks good\b"
                        r"|\blet me know\b|\bhope (?:this|it) helps\b|\b(?:adds|seems? to add) up\b"
                        r"|\bconfirms? (?:the|this|my|our) (?:result|answer)\b"
                        r"|\bthis (?:type of )?(?:problem|exercise) (?:demonstrates|illustrates|shows)\b")  # remarks



def one_value(text: str) -> str | None:
    """The text itself if it is one value: a number or one math span ($..$, \\(..\\))."""
    text = text.strip()
    if _NUMBER_RE.fullmatch(text):
        return text
    span = _MATH_RE.fullmatch(text)
    return next(g for g in span.groups() if g is not None) if span else None


def _closing_value(piece: str) -> str | None:
    """Choice 2: the one value a closing sentence or line states, or None."""
    bold = _BOLD_LINE_RE.fullmatch(piece)
    if bold is not None:  # "**194**", "The answer is **194**.", "m + n = 25 + 169 = **194**"
        lead, value = _MATH_RE.sub(" ", bold.group(1)), one_value(bold.group(2))
        unit = _UNIT_WORD_RE.search(bold.group(2))
        if value is None and unit and unit.group(0).strip().lower() not in _HEDGES | _OPERATIONS | {"or", "and"}:
            value = one_value(bold.group(2)[: unit.start()])
        plain = not lead.strip() or lead.rstrip().endswith("=") or (
            _COPULA_RE.search(lead) and not _HEDGES & set(_words(lead)) and not _NUMBER_RE.search(lead))
        if value is not None:
            return value if plain else None  # else a bold phrase (**4 up quarks**) is part of the sentence
    if not piece.endswith((".", "!")):
        return None  # a solution ends with a full stop; anything else may be cut off
    sentence = piece[:-1]
    masked = _MATH_RE.sub(lambda m: "\x00" * len(m.group(0)), sentence)
    spans = [next(g for g in m.groups() if g is not None) for m in _MATH_RE.finditer(sentence)]
    if not (_COPULA_RE.search(masked) or _STATING_RE.search(masked) or _RESULT_RE.search(masked)
            or (len(spans) == 1 and "=" in spans[0])):
        return None  # "Jane started 3 hours ago": no statement of a value
    values = _sentence_values(masked, sentence)
    word = re.search(r"(?i)\bthe (?:final )?answer is ([A-Za-z]+)$", sentence)
    if values is None and word is not None:
        return word.group(1)  # "So, the final answer is east."
    if values is None or len(values) != 1:
        return None
    lhs, equals, rhs = values[0].rpartition("=")  # $m + n = 194$ -> 194
    return rhs.strip() if equals and "=" not in lhs and _NUMBER_RE.fullmatch(rhs.strip()) else values[0]


def _pieces(body: str) -> list[str]:
    """The sentences and lines of body, stripped, empty ones dropped."""
    return [p.strip() for p in re.split(r"(?<=[.!?])[ \t]+|\n+", body) if p.strip()]


def closing_answer(text: str) -> str | None:
    r"""Choice 2: the value the last sentence of a finished solution states, or None. Up to two
    closing remarks that name no value ("I think that's the answer.") are passed over.

    >>> work = "We reduce modulo 7 and check each residue in turn; only one of them works. " * 2
    >>> closing_answer(work + "The remainder is 1."), closing_answer(work + "So $m + n = 194$.")
    ('1', '194')
    >>> closing_answer(work + "so m + n = 194."), closing_answer(work + "\n**194**")
    ('194', '194')
    >>> closing_answer(work + "It is 1.\n\nI think that's it."), closing_answer(work + "The answer is east.")
    ('1', 'east')
    >>> closing_answer(work + "It is either 3 or 5."), closing_answer(work + "The remainder is 1")
    (None, None)
    >>> closing_answer(work + "Hillary has 7 nickels."), closing_answer(work + "Jane started 3 hours ago.")
    ('7', None)
    >>> closing_answer("It is 1.") is None  # one sentence alone is no solution
    True
    """
    body = _END_TOKEN_RE.sub("", text[-CLOSING_CHARS:]).rstrip()
    display = _DISPLAY_END_RE.search(body)
    if display is not None and len(text) - len(display.group(0)) >= MIN_SOLUTION_CHARS:
        intro = body[body.rfind("\n", 0, display.start()) + 1 : display.start()]
        lhs, equals, rhs = display.group(1).rpartition("=")  # "In conclusion:\n$$\tan A = 2$$" -> 2
        named = equals and "=" not in lhs and not lhs.rstrip().endswith(("<", ">", "!"))  # not x <= 2
        named = named and re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", lhs))  # 3 \times 4 = 11: unchecked
        one = rhs.strip() if named else display.group(1).strip()
        concludes = _CONCLUDING_RE.search(intro) and not _HEDGES & set(_words(intro + " " + lhs))
        return one if concludes and _NUMBER_RE.fullmatch(one) else None
    pieces = _pieces(body)
    offset = max(0, len(text) - CLOSING_CHARS)
    for k, piece in enumerate(reversed(pieces[-3:])):
        if len(piece) > MAX_SENTENCE:
            return None
        if k < 2 and _REMARK_RE.search(piece) and not _values(piece, piece, 0, len(piece)) and "?" not in piece:
            continue  # "I think that's the answer."
        if offset + body.rfind(piece) < MIN_SOLUTION_CHARS:
            return None  # one sentence alone is no solution
        return _closing_value(piece)
    return None



def repeated_closing(text: str) -> str | None:
    """Choice 3: the value of the closing sentence a response repeats (two or more complete copies at its
    end, then at most a cut copy that begins the same way), or None.

    >>> repeated_closing("The answer is 362880.\\nThe answer is 362880.\\nThe answer is ")
    '362880'
    >>> repeated_closing("The answer is 5.\\nThe answer is 6.\\nThe answer is "), repeated_closing("The answer is 5.")
    (None, None)
    """
    pieces = _pieces(text[-CLOSING_CHARS:].rstrip())
    if pieces and not pieces[-1].endswith((".", "!")):
        cut = pieces.pop()
        if len(pieces) < 2 or not pieces[-1].startswith(cut):
            return None  # a cut piece that does not repeat the sentence before it
    if len(pieces) < 2 or pieces[-1] != pieces[-2] or len(pieces[-1]) > MAX_SENTENCE:
        return None
    return _closing_value(pieces[-1])
