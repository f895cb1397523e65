r"""Boxed answers, for verifier/extract.py: which box (or boxes) a response's answer is, and what a box
holding more than a value concludes (string work only).

    last_box_group(text) -> (start, answer | None) | None   # None: no box; answer None: cut off
    group_end(text, start) -> int                            # the `}` closing text[start]'s `{`

Every step is a bounded number of linear passes over the text; nothing here parses mathematics.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. A box is `\boxed{...}`, `\fbox{...}` or `\boxed 7`; an empty box or a placeholder (`\boxed{?}`, `\boxed{\ldots}`)
   is skipped; an unclosed final box means no answer, unless it repeats two or more agreeing complete boxes.
2. Boxes separated only by connectives are one answer (a box group), contents joined with ", " (a repeat
   counts once), at most MAX_GROUP boxes; a blank line or any other word ends a group.
3. A group of named steps ending in their combination (`m = 25`, `n = 169`, `m + n = 194`) answers with the last.
4. A reply that boxes its answers under several part labels ((a), (b), Part 2) answers with every part's box, never
   with the last part's alone.
5. A box holding a derivation answers with what it concludes: an aligned block's last line when it solves for a
   name or continues a chain, a sentence it opens with (verifier/prose.py)'s stated value, else no answer.
"""

from __future__ import annotations

import re

from verifier.prose import sentence_answer

MAX_GROUP = 8  # boxes joined into one answer (choice 2); a longer chain keeps its last 8
MAX_GAP = 80  # characters between two boxes of one group
MAX_PARTS = 12  # part labels looked at before the last box (choice 4)

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")


def group_end(text: str, start: int) -> int:
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


def _box_at(text: str, box: re.Match) -> tuple[int, str | None, str]:
    """(end, content, partial) of the box starting at box; content None if it never closes, partial then
    what it holds before the cut."""
    j = box.end()
    while j < len(text) and text[j] == " ":
        j += 1
    if j < len(text) and text[j] == "{":
        end = group_end(text, j)
        return (len(text), None, text[j + 1 :]) if end < 0 else (end, text[j + 1 : end - 1], "")
    bare = re.match(r"[^\s$]+", text[j:])  # \boxed 7
    return (j + bare.end(), bare.group(0), "") if bare else (j, None, "")


_PLACEHOLDER_RE = re.compile(r"(?:\s|[?.\u2026_~-]|\\(?:[lcvd]?dots|quad|qquad|[,;! ])(?![A-Za-z]))*")


def _holds_value(content: str) -> bool:
    """Choice 1: an empty box or one holding only a placeholder (`\\boxed{?}`, `\\boxed{\\ldots}`) holds no answer."""
    return _PLACEHOLDER_RE.fullmatch(content) is None


_LABEL_RE = re.compile(r"(?<![A-Za-z\\])[A-Za-z](?:_\{?[A-Za-z0-9]{1,4}\}?)?\s*=")  # y_2 =
_GAP_NOISE_RE = re.compile(r"\\(?:quad|qquad|[,;:! ()\[\]\\])|\\text\s*\{|[${}~&]")
_CONNECTIVES = {"and", "or", "also", "for", "part", "parts", "respectively",
                "(a)", "(b)", "(c)", "(d)", "(e)", "(i)", "(ii)", "(iii)"}


def _is_connective(gap: str) -> bool:
    """Choice 2: whether the text between two boxes only joins them."""
    if len(gap) > MAX_GAP or re.search(r"\n\s*\n", gap):
        return False  # a blank line starts a new thought
    words = _GAP_NOISE_RE.sub(" ", _LABEL_RE.sub(" ", gap)).split()
    return all(w.strip(",;.:") in _CONNECTIVES or not w.strip(",;.:") for w in words)


_STEP_RE = re.compile(r"^\s*([^=]{1,40}?)\s*=\s*([^=]+)$")  # m = 25


def _combined_step(contents: list[str]) -> str | None:
    """Choice 3: the value of the last box of a group whose earlier boxes name the parts its left side
    combines (`m = 25`, `n = 169`, `m + n = 194` -> 194), else None."""
    last = _STEP_RE.match(contents[-1])
    names = [_STEP_RE.match(c) for c in contents[:-1]]
    if last is None or not names or None in names or not re.search(r"[-+*/^]|\\(?:cdot|times|frac)", last.group(1)):
        return None
    used = set(re.findall(r"(?<![\\A-Za-z])[A-Za-z](?![A-Za-z])", last.group(1)))
    given = {m.group(1).strip() for m in names}
    return last.group(2).strip() if used and used <= given else None


_ENV_RE = re.compile(r"^\s*\\begin\{(aligned|align\*?|gathered|gather\*?|split|array)\}(?:\{[^{}]*\})?(.*)"
                     r"\\end\{\1\}\s*$", re.DOTALL)
_PROSE_TEXT_RE = re.compile(r"\\(?:text|textbf|textrm|mbox)\s*\{([^{}]*)\}")


def box_value(content: str) -> str | None:
    r"""Choice 5: what a box concludes; the content unchanged when it is a value, None when it is prose
    stating no one value.

    >>> box_value(r"\begin{aligned} 2x + 3 &= 11 \\ x &= 4 \end{aligned}"), box_value(r"\text{The total is } 12")
    ('x = 4', '12')
    >>> box_value(r"\begin{aligned} S &= 3 + 4 \\ &= 7 \end{aligned}")
    'S = 3 + 4 = 7'
    >>> box_value(r"\text{so it works for } x = 2 \text{ or more}") is None
    True
    """
    env = _ENV_RE.match(content)
    if env is not None:
        rows = [r.replace("&", " ").strip() for r in re.split(r"\\\\(?:\[[^\]]*\])?", env.group(2))]
        rows = [" ".join(r.split()) for r in rows if r]
        if len(rows) >= 2 and all(r.startswith("=") for r in rows[1:]):
            return " ".join(rows)  # a chain: verifier/verdict.py reads its last side when every side agrees
        name = re.match(r"([A-Za-z](?:_\{?\w{1,3}\}?)?)\s*=(?!.*=)", rows[-1]) if rows else None
        if name and all(name.group(1) in r for r in rows[:-1]) and len(rows) >= 2:
            return rows[-1]  # solving for x: the last row states it
        return content
    texts = _PROSE_TEXT_RE.findall(content)
    words = re.findall(r"[A-Za-z]{2,}", " ".join(texts))
    if len(words) < 3 or not content.lstrip().startswith(("\\text", "\\mbox")):
        return content  # a value, a word answer, a value with a unit or a remark after it (verifier/normalize.py)
    line = "".join(f" {t} " if k % 2 else f" ${t.strip()}$ " if t.strip() else " "
                   for k, t in enumerate(_PROSE_TEXT_RE.split(content)))
    line = " ".join(line.split())
    if not re.search(r"\$|\d", line):
        return content  # prose without a value (`\text{Yes, it is possible}`): a word answer
    reading = sentence_answer(line)
    return None if reading == line else reading


_PART_RE = re.compile(r"(?im)^[ \t>#*_-]*(?:part\s*)?\(?([a-h]|i{1,3}|iv|vi?|[1-9])\)[ \t*_.:]"
                      r"|^[ \t>#*_-]*part\s+([a-h1-9])\b")


def _part_boxes(text: str, boxes: list[re.Match], last_start: int) -> list[str] | None:
    """Choice 4: the last box under each part label, in order, when boxes stand under two or more labels
    before last_start's; else None."""
    labels = list(_PART_RE.finditer(text, max(0, last_start - 20000), last_start))[-MAX_PARTS:]
    if len(labels) < 2:
        return None
    bounds = [m.start() for m in labels] + [last_start + 1]
    answers, names = [], set()
    for label, lo, hi in zip(labels, bounds, bounds[1:]):
        inside = [b for b in boxes if lo <= b.start() < hi]
        for b in reversed(inside):
            _, content, _ = _box_at(text, b)
            if content and _holds_value(content):
                answers.append(content.strip())
                names.add((label.group(1) or label.group(2)).lower())
                break
    return answers if len(names) >= 2 and len(answers) == len(names) else None


def _repeated(text: str, boxes: list[re.Match], partial: str) -> str | None:
    """Choice 1: the value an unclosed last box repeats: two or more complete boxes before it, all
    agreeing, which the cut text begins to write."""
    values = [c.strip() for c in (_box_at(text, b)[1] for b in boxes[-MAX_GROUP:-1]) if c and _holds_value(c)]
    if len(values) >= 2 and len(set(values)) == 1 and values[0].startswith(partial.strip()):
        return values[0]
    return None


def last_box_group(text: str) -> tuple[int, str | None] | None:
    """(start of the last box, the group's answer) or None without a box; answer None if the last
    box is unclosed or holds prose stating no value. Choices 1-5."""
    boxes = list(_BOX_RE.finditer(text))
    k = len(boxes) - 1
    while k >= 0:  # the last box holding a value, skipping empty ones
        end, content, partial = _box_at(text, boxes[k])
        if content is None:
            return boxes[k].start(), _repeated(text, boxes, partial)  # choice 1: cut off
        if _holds_value(content):
            break
        k -= 1
    if k < 0:
        return None
    last_start, contents, start = boxes[k].start(), [content.strip()], boxes[k].start()
    while k > 0 and len(contents) < MAX_GROUP:
        k -= 1
        prev_end, prev, _ = _box_at(text, boxes[k])
        if prev is None or not _holds_value(prev) or prev_end > start or not _is_connective(text[prev_end:start]):
            break
        contents.append(prev.strip())
        start = boxes[k].start()
    contents.reverse()
    parts = _part_boxes(text, boxes, start) if len(contents) == 1 else None
    if parts is not None:
        contents = parts
    single = _combined_step(contents) if len(contents) >= 2 else None
    values = [single] if single else [box_value(c) for c in dict.fromkeys(contents)]  # a repeat counts once
    return last_start, None if None in values else ", ".join(values)
