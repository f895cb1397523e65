r"""The vocabulary of verifier/parse.py's grammar: the tokenizer and the allow-listed commands.

    tokenize(text) -> [(kind, text)]     kind: num, cmd, var or op
    Tokens(tokens)                       the cursor the parser reads them with (peek, take, expect,
                                         and the raw readers subscript and env_name)

Everything the parser accepts is named here: relation and operator symbols, functions,
constants, Greek letters, fraction commands, matrix environments, big operators. A token
outside these tables is a ParseError in verifier/parse.py: it never guesses.
"""

from __future__ import annotations

import re

import sympy as sp

from verifier.values import ParseError

MAX_TOKENS = 600  # an answer longer than this is not a final answer

TOKEN_RE = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"|(?P<cmd>\\[a-zA-Z]+|\\[{}|\\])"
    r"|(?P<var>[a-zA-Z])"
    r"|(?P<op><=|>=|!=|[-+*/^_=<>!,;()\[\]{}|&]))"
)

RELATIONS = {
    "=": "=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "!=": "!=",
    r"\le": "<=", r"\leq": "<=", r"\leqslant": "<=", r"\ge": ">=", r"\geq": ">=",
    r"\geqslant": ">=", r"\lt": "<", r"\gt": ">", r"\ne": "!=", r"\neq": "!=", r"\in": "in",
}
ADD_OPS = {"+", "-", r"\pm", r"\mp"}
MUL_OPS = {"*", r"\cdot", r"\times"}
DIV_OPS = {"/", r"\div"}
FUNCTIONS = {
    r"\sin": sp.sin, r"\cos": sp.cos, r"\tan": sp.tan, r"\cot": sp.cot, r"\sec": sp.sec,
    r"\csc": sp.csc, r"\arcsin": sp.asin, r"\arccos": sp.acos, r"\arctan": sp.atan,
    r"\sinh": sp.sinh, r"\cosh": sp.cosh, r"\tanh": sp.tanh, r"\ln": sp.log, r"\log": sp.log,
    r"\exp": sp.exp,
}
INVERSES = {r"\sin": r"\arcsin", r"\cos": r"\arccos", r"\tan": r"\arctan"}
CONSTANTS = {r"\pi": sp.pi, r"\infty": sp.oo, r"\imath": sp.I}
EMPTY_SETS = {r"\emptyset", r"\varnothing"}
GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta",
    "vartheta", "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon",
    "phi", "varphi", "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma",
    "Phi", "Psi", "Omega",
}
GCD_LCM = {r"\gcd", r"\lcm"}  # normalize.py writes \operatorname{lcm} as \lcm
FRACS = {r"\frac", r"\dfrac", r"\tfrac", r"\cfrac"}
MATRIX_ENVS = {"pmatrix", "bmatrix", "matrix", "smallmatrix"}


def tokenize(text: str) -> list[tuple[str, str]]:
    """Split text into (kind, text) tokens; kind is num, cmd, var or op."""
    tokens, pos, end = [], 0, len(text.rstrip())
    while pos < end:
        m = TOKEN_RE.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected character {text[pos]!r}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        if len(tokens) > MAX_TOKENS:
            raise ParseError("answer too long")
        pos = m.end()
    return tokens



class Tokens:
    """A cursor over tokenize's output: the parser's only way to read its input."""

    def __init__(self, toks: list[tuple[str, str]]):
        self.toks = toks
        self.i = 0

    def peek(self) -> str:
        return self.toks[self.i][1] if self.i < len(self.toks) else ""

    def peek_kind(self) -> str:
        return self.toks[self.i][0] if self.i < len(self.toks) else "end"

    def prev_kind(self) -> str:
        return self.toks[self.i - 1][0] if self.i > 0 else ""

    def take(self) -> str:
        if self.i >= len(self.toks):
            raise ParseError("unexpected end of answer")
        self.i += 1
        return self.toks[self.i - 1][1]

    def expect(self, text: str) -> None:
        if self.take() != text:
            raise ParseError(f"expected {text!r}")

    def subscript(self) -> str:
        """The text of a subscript after `_`: one token, or letters, digits, + and - in braces."""
        if self.peek() != "{":
            return self.take()
        self.take()
        parts = []
        while self.peek() not in ("}", ""):
            if self.peek_kind() not in ("num", "var") and self.peek() not in ("+", "-"):
                raise ParseError("subscript must be letters, digits, + and -")  # F_{n-k-1} is one name (\sum)
            parts.append(self.take())
        self.expect("}")
        return "".join(parts)

    def env_name(self) -> str:
        """The name in `{pmatrix}` after \\begin or \\end."""
        self.expect("{")
        name = []
        while self.peek_kind() == "var":
            name.append(self.take())
        self.expect("}")
        return "".join(name)
