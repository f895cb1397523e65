r"""The final answer of a response, for reward.py's verify mode (string work only).

    extract_answer(response, truncated=False, answer_format="any", strict=False) -> str | None

The final answer is the last marker: a box group (verifier/boxes.py), an `Answer:` line, an
`<answer>` tag, a JSON answer field or "the answer is (X)", whichever starts last; a prompt that
asks for one format has it read first (choice 8). With no marker at all, only the closing sentence
of a finished solution (verifier/prose.py), or a response that is one value, can answer; otherwise
there is no answer (the last number in the text is never taken). Only the last TAIL_CHARS
characters before a made-up next turn are scanned, every step is a bounded number of linear passes
over them, and nothing here parses mathematics: verifier/verdict.py decides on what this returns.

Each choice below is repeated at its line.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. The response ends at a made-up next turn (a line opening `User:` or `Human:`, a chat-template token).
2. An `Answer:` line (any case, bold allowed, or `Answer for part (b):`) reads the rest of its line, else the next
   non-empty one or a display block opened after it, cut at a chat-template token, "I hope it is correct" or "Note:".
3. An `<answer>...</answer>` tag (the R1-Zero template) is a marker; an unclosed tag reads its first complete line.
4. A JSON answer field (`"answer": "13"`, `"final_answer": 13`) is a marker, like an `Answer:` line.
5. "The answer is (X)" with a choice letter A-J is a marker (the multiple-choice format); two different letters so
   stated are no answer.
6. Markup tags (`<answer>`, `</think>`) inside an answer are formatting.
7. With no marker, a loop on one closing sentence, or a finished solution's closing sentence (verifier/prose.py), or
   the text after the reasoning (`</think>`) when it is one value, answers.
8. answer_format names the marker the prompt asks for, read first; strict: without it there is no answer.
"""

from __future__ import annotations

import json
import re

from verifier.boxes import group_end, last_box_group  # noqa: F401 - group_end: normalize.py reads it here
from verifier.prose import closing_answer, one_value, repeated_closing, sentence_answer

TAIL_CHARS = 8192  # only the end of a response is scanned for the final answer
MAX_BLOCK = 2000  # characters of a display block read after `Answer:` (choice 2)
MAX_TAGS = 4  # `<answer>` tags looked at from the end (choice 3): an echoed empty one is skipped
ANSWER_FORMATS = ("any", "boxed", "answer_line", "answer_tag")  # what a prompt may ask for (choice 8)

_ANSWER_RE = re.compile(r"(?<![A-Za-z])answer(?:\s+(?:for|to)\s+(?:sub)?(?:problem|part|question)\s*\(?\w{1,3}\)?)?"
                        r"\s*(?:\*{1,2}|_{1,2})?\s*:", re.IGNORECASE)  # **Answer**:, Answer for part (b):
_TURN_RE = re.compile(r"\n[ \t*#]*(?:Human|User|USER|HUMAN)[ \t*]*:|<\|im_start\|>|<\|im_end\|>|<\|endoftext\|>"
                      r"|<\|eot_id\|>|<\|start_header_id\|>|<\uff5cUser\uff5c>|<\uff5cend\u2581of\u2581sentence\uff5c>"
                      r"|</s>|<end_of_turn>")  # choice 1
_TAG_MARKUP_RE = re.compile(r"</?(?:answer|think|reasoning|solution|final_answer)>", re.IGNORECASE)  # choice 6
_STOP_RE = re.compile(r"<\||</s>|<eos>|<end_of_turn>|\[/INST\]|(?i:\bI hope it is correct)"
                      r"|(?<![A-Za-z])Note:")
_TAG_OPEN_RE = re.compile(r"<answer>", re.IGNORECASE)
_TAG_CLOSE_RE = re.compile(r"</answer>", re.IGNORECASE)
_LETTER_RE = re.compile(r"(?i:\bthe\s+(?:final\s+|correct\s+|best\s+)?(?:answer|option|choice)\s+is)\s*:?\s*\**\s*"
                        r"\(([A-J])\)")  # choice 5


def last_match(pattern: re.Pattern, text: str) -> re.Match | None:
    """The last match of pattern in text, or None. Linear."""
    last = None
    for match in pattern.finditer(text):
        last = match
    return last


def last_answer_line(text: str) -> tuple[int, str] | None:
    """(start, answer) of the last `Answer:` marker (choice 2; prose by verifier/prose.py)."""
    last = last_match(_ANSWER_RE, text)
    if last is None:
        return None
    after = text[last.end() :]
    block = re.match(r"[ \t*_]*\n?[ \t]*(\\\[|\$\$)", after)  # Answer:\n\[ 9 \]
    if block is not None:
        close = after.find("\\]" if block.group(1) == "\\[" else "$$", block.end())
        if 0 <= close - block.end() <= MAX_BLOCK:
            return last.start(), after[block.end() : close].strip()
    lines = after.split("\n", 3)
    rest = next((line for line in lines[:3] if line.strip(" *_")), "")
    rest = _TAG_MARKUP_RE.sub(" ", rest)  # choice 6: Answer: <answer>5</answer>
    rest = _STOP_RE.split(rest, maxsplit=1)[0].strip(" \t\r*_")
    rest = re.sub(r"(?i)^the (?:final )?answer is:?\s*", "", rest)
    rest = re.sub(r'^\\?"(.*?)\\?"\W*$', r"\1", rest)  # "$12$ and $13$". (quoted)
    return last.start(), sentence_answer(rest)


# ----------------------------------------------------------------------------------------------
# The other markers: a JSON answer field, an <answer> tag, a choice letter (choices 3-5)
# ----------------------------------------------------------------------------------------------

_JSON_ANSWER_RE = re.compile(r'"(?:final_?)?answer"\s*:\s*("(?:[^"\\\n]|\\.){1,500}"|[-+]?\d[\d.,/]*)', re.IGNORECASE)

def last_json_answer(text: str) -> tuple[int, str] | None:
    """(start, answer) of the last `"answer": ...` field (choice 4); a string value is read as JSON."""
    last = last_match(_JSON_ANSWER_RE, text)
    if last is None:
        return None
    value = last.group(1)
    try:
        value = json.loads(value) if value.startswith('"') else value
    except ValueError:
        return None
    return last.start(), sentence_answer(str(value).strip())



def last_answer_tag(text: str) -> tuple[int, str | None] | None:
    """(start, answer) of the last `<answer>` tag holding something (choice 3); answer None if an
    unclosed tag has no complete first line."""
    for tag in list(_TAG_OPEN_RE.finditer(text))[-MAX_TAGS:][::-1]:
        close = _TAG_CLOSE_RE.search(text, tag.end())
        if close is not None:
            inside = text[tag.end() : close.start()]
        else:  # cut off or followed by junk: its first line, if a newline ends it
            line = re.match(r"[ \t]*\n?([^\n]*)\n", text[tag.end() :])
            inside = line.group(1) if line else ""
            if not inside.strip():
                return tag.start(), None
        if inside.strip():
            return tag.start(), _inside_tag(inside)
    return None


def _inside_tag(inside: str) -> str | None:
    """What an `<answer>` tag holds: its box, its Answer line, else its text read as a sentence."""
    marked = last_box_group(inside) or last_answer_line(inside)
    if marked is not None:
        return marked[1]
    text = " ".join(inside.split())
    return sentence_answer(text)


def last_letter(text: str) -> tuple[int, str | None] | None:
    """(start, "(X)") of the last "the answer is (X)" (choice 5); answer None when the text states two
    different letters so (several candidate answers)."""
    found = list(_LETTER_RE.finditer(text))
    if not found:
        return None
    letters = {m.group(1) for m in found}
    return found[-1].start(), f"({found[-1].group(1)})" if len(letters) == 1 else None


def _markers(tail: str) -> dict[str, tuple[int, str | None] | None]:
    return {"boxed": last_box_group(tail), "answer_line": last_answer_line(tail), "answer_tag": last_answer_tag(tail),
            "json": last_json_answer(tail), "letter": last_letter(tail)}


def extract_answer(response: str, truncated: bool = False, answer_format: str = "any",
                   strict: bool = False) -> str | None:
    """The final answer text, or None if the response gives none; a response cut at the length limit
    (truncated) has no closing sentence (choice 7). answer_format: one of ANSWER_FORMATS (choice 8)."""
    turn = _TURN_RE.search(response, 1)
    tail = response[: turn.start() if turn else len(response)][-TAIL_CHARS:]  # choice 1
    markers = _markers(tail)
    asked = markers.get(answer_format)  # None for "any"
    if asked is None and strict and answer_format != "any":
        return None  # choice 8: the asked format is missing
    candidates = [asked] if asked is not None else [c for c in markers.values() if c is not None]
    if not candidates:
        return _unmarked(tail, truncated)
    pred = max(candidates, key=lambda c: c[0])[1]  # whichever marker comes last
    if pred is None:
        return None  # unclosed final \boxed{ or <answer>: the answer was cut off
    pred = _TAG_MARKUP_RE.sub(" ", pred).strip().rstrip(".").strip()  # choice 6
    return pred or None


def _unmarked(tail: str, truncated: bool) -> str | None:
    """Choice 7: the closing sentence a loop repeats, else (not cut at the length limit) a finished solution's
    closing sentence or the one value after its reasoning."""
    repeated = repeated_closing(tail)
    if repeated is not None or truncated:
        return repeated
    after = tail[tail.rfind("</think>") + len("</think>") :] if "</think>" in tail else tail
    value = one_value(after) if len(after.strip()) <= 200 else None
    if value is not None:
        return value.strip()
    closing = closing_answer(tail)
    return closing.strip() if closing else None
