r"""An allow-listed LaTeX-math parser for the reward: untrusted answer text -> sympy objects.

reward.py calls `parse(text)` on a final answer the model wrote (`\frac{1}{2}`, `2\sqrt{3}`,
`(3, \frac{\pi}{2})`, `(-\infty, 2) \cup (3, \infty)`, `\begin{pmatrix} 1 \\ 2 \end{pmatrix}`,
`x = 5`). Grammar (recursive descent, loosest binding first):

    answer   := relation (("," | ";") relation)*            # bare list -> Seq("list")
    relation := union (RELOP union)*                        # =, <, >, \le, \ge, \ne, \in
    union    := expr ("\cup" expr)*
    expr     := [sign] term (("+" | "-" | "\pm" | "\mp") term)*
    term     := signed (("*" | "\cdot" | "\times" | "/" | "\div") signed | implicit factor)*
    signed   := ("-" | "+")* power
    power    := postfix ["^" exponent]                      # right-associative
    postfix  := atom ("!" | "_" subscript)*
    atom     := number | letter | constant | greek | \frac | \sqrt | \binom | function | ( ) | [ ]
                | { } | \{ \} | |x| | \begin{pmatrix} ... \end{pmatrix}
    function := (\sin | \cos | ... | \ln | \log["_" arg]) ["^" exponent] (parenthesised | product)

Safety, numbered (reward.py's policy rule 4):
1. Nothing here calls eval, exec, sympify or parse_expr. Text becomes tokens from one regex;
   tokens become sympy objects only through constructors (Rational, Symbol, Add, Mul, Pow, sin,
   ...) on values already checked. An unknown token is a ParseError, never a guess.
2. Sizes are capped before any arithmetic: tokens (MAX_TOKENS), nesting (MAX_DEPTH), digits per
   number (MAX_DIGITS), the bit size of an exact power, factorial or binomial (MAX_BITS), and the
   exponent of a non-rational base (MAX_SYMBOLIC_EXP). sympy evaluates `9**(9**9)` eagerly on
   construction, so the check must come first.

Readings, numbered (choices a grader has to make; each is repeated at its line):
1. `i` is the imaginary unit and `e` is Euler's number, as in MATH answers.
2. TeX one-token arguments: `\frac43` = 4/3, `\frac 59` = 5/9, `\sqrt2`; but an exponent takes a
   whole number (`2^10` = 1024, what the writer meant, not TeX's 2^1 0).
3. An integer directly followed by a proper fraction is a mixed number: `1\frac{4}{5}` = 9/5.
4. Two numbers side by side (`42 43`) are an error, not a product.
5. `(a, b)` is a tuple; math_equal.py reads a 2-tuple as an open interval when compared with
   one. `[a, b]`, `(a, b]`, `[a, b)` are intervals; `\{...\}` is a set; `a \pm b` is the pair
   {a + b, a - b} (Seq "pm").
6. `\sin x \cos x` is sin(x) cos(x): a function's unparenthesised argument stops at the next
   function; `\sin^{-1} x` is arcsin x; `\log` is the natural logarithm unless `\log_b`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sympy as sp

MAX_TOKENS = 600  # an answer longer than this is not a final answer
MAX_DEPTH = 40  # nested groups; 10k nested braces fail fast instead of overflowing the stack
MAX_DIGITS = 400  # digits in one number literal
MAX_BITS = 20_000  # bits of an exact integer power, factorial or binomial (about 6000 digits)
MAX_SYMBOLIC_EXP = 200  # |n| in b^n when b is not a rational number
MAX_PM = 2  # \pm / \mp signs in one expression (2^MAX_PM alternatives)


class ParseError(ValueError):
    """The text is not an answer this parser accepts (the answer is then scored incorrect)."""


@dataclass(frozen=True)
class Seq:
    """A list of values. kind: "tuple" (ordered, from brackets), "set" (from \\{ \\}), "list"
    (a bare comma list, e.g. several solutions) or "pm" (the expansions of a \\pm)."""

    kind: str
    items: tuple


@dataclass(frozen=True)
class Interval:
    lo: sp.Expr
    hi: sp.Expr
    left_open: bool
    right_open: bool


@dataclass(frozen=True)
class Union:
    parts: tuple  # of Interval or Seq("set")


@dataclass(frozen=True)
class Relation:
    """terms[0] ops[0] terms[1] ops[1] ...; ops from "=", "<", "<=", ">", ">=", "!=", "in"."""

    terms: tuple
    ops: tuple


@dataclass(frozen=True)
class Matrix:
    rows: tuple  # of equal-length tuples of sympy expressions


EMPTY_SET = Seq("set", ())

# ----------------------------------------------------------------------------------------------
# Tokens
# ----------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"|(?P<cmd>\\[a-zA-Z]+|\\[{}|\\])"
    r"|(?P<var>[a-zA-Z])"
    r"|(?P<op><=|>=|!=|[-+*/^_=<>!,;()\[\]{}|&]))"
)

_RELATIONS = {
    "=": "=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "!=": "!=",
    r"\le": "<=", r"\leq": "<=", r"\leqslant": "<=", r"\ge": ">=", r"\geq": ">=",
    r"\geqslant": ">=", r"\lt": "<", r"\gt": ">", r"\ne": "!=", r"\neq": "!=", r"\in": "in",
}
_ADD_OPS = {"+", "-", r"\pm", r"\mp"}
_MUL_OPS = {"*", r"\cdot", r"\times"}
_DIV_OPS = {"/", r"\div"}
_FUNCTIONS = {
    r"\sin": sp.sin, r"\cos": sp.cos, r"\tan": sp.tan, r"\cot": sp.cot, r"\sec": sp.sec,
    r"\csc": sp.csc, r"\arcsin": sp.asin, r"\arccos": sp.acos, r"\arctan": sp.atan,
    r"\sinh": sp.sinh, r"\cosh": sp.cosh, r"\tanh": sp.tanh, r"\ln": sp.log, r"\log": sp.log,
    r"\exp": sp.exp,
}
_INVERSES = {r"\sin": r"\arcsin", r"\cos": r"\arccos", r"\tan": r"\arctan"}
_CONSTANTS = {r"\pi": sp.pi, r"\infty": sp.oo, r"\imath": sp.I}
_EMPTY_SETS = {r"\emptyset", r"\varnothing"}
_GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta",
    "vartheta", "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon",
    "phi", "varphi", "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma",
    "Phi", "Psi", "Omega",
}
_FRACS = {r"\frac", r"\dfrac", r"\tfrac", r"\cfrac"}
_MATRIX_ENVS = {"pmatrix", "bmatrix", "matrix", "smallmatrix"}


def tokenize(text: str) -> list[tuple[str, str]]:
    """Split text into (kind, text) tokens; kind is num, cmd, var or op."""
    tokens, pos, end = [], 0, len(text.rstrip())
    while pos < end:
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected character {text[pos]!r}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        if len(tokens) > MAX_TOKENS:
            raise ParseError("answer too long")
        pos = m.end()
    return tokens


# ----------------------------------------------------------------------------------------------
# Capped constructors: every piece of arithmetic the parser asks sympy for goes through these.
# ----------------------------------------------------------------------------------------------


def _bits(r: sp.Rational) -> int:
    return max(abs(int(r.p)).bit_length(), int(r.q).bit_length(), 1)


def number(text: str) -> sp.Rational:
    """A decimal literal, exactly: "0.5" -> 1/2, ".35625" -> 57/160 (never a float)."""
    whole, _, frac = text.partition(".")
    if len(whole) + len(frac) > MAX_DIGITS:
        raise ParseError(f"number literal longer than {MAX_DIGITS} digits")
    return sp.Rational(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))


def _expr(v) -> sp.Expr:
    if not isinstance(v, sp.Expr):
        raise ParseError("arithmetic on a tuple, set, interval or relation")
    return v


def power(base, exp) -> sp.Expr:
    """base^exp, refusing results that would be huge before sympy computes them."""
    base, exp = _expr(base), _expr(exp)
    if base.is_Rational and exp.is_Rational:
        if abs(int(exp.p)) * _bits(base) > MAX_BITS or exp.q > 1000:
            raise ParseError("power too large")
    elif exp.is_Integer and abs(int(exp)) > MAX_SYMBOLIC_EXP:
        raise ParseError("exponent too large")
    if exp.is_Rational and not base.is_Rational and base.is_number and exp.q > 1000:
        raise ParseError("root index too large")
    if base == 0 and (exp.is_negative or exp == 0):
        raise ParseError("0 to a non-positive power")
    return sp.Pow(base, exp)


def divide(a, b) -> sp.Expr:
    a, b = _expr(a), _expr(b)
    if b == 0:
        raise ParseError("division by zero")
    return a * power(b, sp.Integer(-1))


def factorial(n) -> sp.Expr:
    n = _expr(n)
    if n.is_number:  # 1000! has 8530 bits; (1000!)! is refused here
        if not (n.is_Integer and 0 <= n <= 1000):
            raise ParseError("factorial of a number that is not an integer in [0, 1000]")
    return sp.factorial(n)


def binomial(n, k) -> sp.Expr:
    n, k = _expr(n), _expr(k)
    if n.is_Integer and k.is_Integer:
        small = min(int(k), int(n) - int(k))
        if int(n) < 0 or small * max(int(n).bit_length(), 1) > MAX_BITS:
            raise ParseError("binomial too large")
    elif (n.is_number and not n.is_Integer) or (k.is_number and not k.is_Integer):
        raise ParseError("binomial of a number that is not an integer")
    return sp.binomial(n, k)


def letter(name: str) -> sp.Expr:
    # Reading 1: i is the imaginary unit and e is Euler's number (MATH conventions).
    return {"i": sp.I, "e": sp.E}.get(name) or sp.Symbol(name)


def interval(lo, hi, left_open: bool, right_open: bool) -> Interval:
    return Interval(_expr(lo), _expr(hi), left_open, right_open)


def _expand_pm(terms: list[tuple[str, object]]):
    """Sum signed terms; with k \\pm signs return Seq("pm") of the 2^k sums."""
    sums = [sp.Integer(0)]
    if sum(sign in (r"\pm", r"\mp") for sign, _ in terms) > MAX_PM:
        raise ParseError("too many \\pm signs")
    for sign, value in terms:
        value = _expr(value)
        if sign in (r"\pm", r"\mp"):
            sums = [s + value for s in sums] + [s - value for s in sums]
        else:
            sums = [s + value if sign == "+" else s - value for s in sums]
    return sums[0] if len(sums) == 1 else Seq("pm", tuple(sums))


# ----------------------------------------------------------------------------------------------
# The recursive-descent parser
# ----------------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str):
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0
        self.in_abs = 0  # inside |...| a "|" closes; outside it opens (2|x| = 2 * |x|)

    # -- token helpers
    def peek(self) -> str:
        return self.toks[self.i][1] if self.i < len(self.toks) else ""

    def peek_kind(self) -> str:
        return self.toks[self.i][0] if self.i < len(self.toks) else "end"

    def take(self) -> str:
        if self.i >= len(self.toks):
            raise ParseError("unexpected end of answer")
        self.i += 1
        return self.toks[self.i - 1][1]

    def expect(self, text: str) -> None:
        if self.take() != text:
            raise ParseError(f"expected {text!r}")

    def prev_kind(self) -> str:
        return self.toks[self.i - 1][0] if self.i > 0 else ""

    # -- grammar, loosest first
    def answer(self):
        items = self.comma_list()
        if self.i != len(self.toks):
            raise ParseError(f"unexpected {self.peek()!r}")
        return items[0] if len(items) == 1 else Seq("list", tuple(items))

    def comma_list(self) -> list:
        items = [self.relation()]
        while self.peek() in (",", ";"):
            self.take()
            items.append(self.relation())
        return items

    def relation(self):
        terms, ops = [self.union()], []
        while self.peek() in _RELATIONS:
            ops.append(_RELATIONS[self.take()])
            terms.append(self.union())
        return terms[0] if not ops else Relation(tuple(terms), tuple(ops))

    def union(self):
        parts = [self.expr()]
        while self.peek() == r"\cup":
            self.take()
            parts.append(self.expr())
        if len(parts) == 1:
            return parts[0]
        return Union(tuple(_as_set_part(p) for p in parts))

    def expr(self):
        sign = self.take() if self.peek() in _ADD_OPS else "+"
        first = self.term()
        if sign == "+" and self.peek() not in _ADD_OPS:
            return first  # may be a tuple, interval, set or matrix
        terms = [(sign, first)]
        while self.peek() in _ADD_OPS:
            sign = self.take()
            terms.append((sign, self.term()))
        return _expand_pm(terms)

    def term(self):
        value, start = self.signed(), self.i
        while True:
            tok = self.peek()
            if tok in _MUL_OPS:
                self.take()
                value = _expr(value) * _expr(self.signed())
            elif tok in _DIV_OPS:
                self.take()
                value = divide(value, self.signed())
            elif self.starts_factor():
                if self.peek_kind() == "num" and self.prev_kind() == "num":
                    raise ParseError("two numbers side by side")  # reading 4: "42 43" is a hedge
                mixed = (isinstance(value, sp.Integer) and value >= 0 and self.i == start
                         and self.prev_kind() == "num" and tok in _FRACS)
                factor = self.power()
                if mixed and isinstance(factor, sp.Rational) and 0 < factor < 1:
                    value = value + factor  # reading 3: 1\frac{4}{5} is a mixed number
                else:
                    value = _expr(value) * _expr(factor)
            else:
                return value

    def starts_factor(self) -> bool:
        kind, tok = self.peek_kind(), self.peek()
        return kind in ("num", "var") or tok in ("(", "{") or (tok == "|" and not self.in_abs) or (
            kind == "cmd"
            and (tok in _FUNCTIONS or tok in _CONSTANTS or tok in _FRACS or tok[1:] in _GREEK
                 or tok in (r"\sqrt", r"\binom", r"\dbinom", r"\tbinom"))
        )

    def signed(self):
        negate = False
        while self.peek() in ("-", "+"):  # a loop, not recursion: "-----1" cannot go deep
            negate ^= self.take() == "-"
        value = self.power()
        return -_expr(value) if negate else value

    def power(self):
        base = self.postfix()
        if self.peek() == "^":
            self.take()
            return power(base, self.exponent())
        return base

    def exponent(self):
        negate = False
        while self.peek() in ("-", "+"):
            negate ^= self.take() == "-"
        if self.peek() == "{":
            value = self.atom()  # a braced group
        else:  # reading 2: a whole number, a letter or a command atom; ^ again is a tower
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ParseError(f"nesting deeper than {MAX_DEPTH}")
            value = self.power()
            self.depth -= 1
        return -_expr(value) if negate else value

    def postfix(self):
        value = self.atom()
        while self.peek() in ("!", "_"):
            if self.take() == "!":
                value = factorial(value)
            else:
                if not isinstance(value, sp.Symbol):
                    raise ParseError("subscript on something that is not a variable")
                value = sp.Symbol(f"{value.name}_{self.subscript()}")
        return value

    def subscript(self) -> str:
        if self.peek() != "{":
            return self.take()
        self.take()
        parts = []
        while self.peek() not in ("}", ""):
            if self.peek_kind() not in ("num", "var"):
                raise ParseError("subscript must be letters and digits")
            parts.append(self.take())
        self.expect("}")
        return "".join(parts)

    def atom(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError(f"nesting deeper than {MAX_DEPTH}")
        try:
            return self._atom()
        finally:
            self.depth -= 1

    def _atom(self):
        kind = self.peek_kind()
        tok = self.take()
        if kind == "num":
            return number(tok)
        if kind == "var":
            return letter(tok)
        if tok in ("(", "["):
            return self.bracket(tok)
        if tok == "{":
            items = self.comma_list()
            self.expect("}")
            return items[0] if len(items) == 1 else Seq("set", tuple(items))
        if tok == r"\{":
            return self.braced_set()
        if tok == "|":
            self.in_abs += 1
            value = self.expr()
            self.in_abs -= 1
            self.expect("|")
            return sp.Abs(_expr(value))
        if tok in _CONSTANTS:
            return _CONSTANTS[tok]
        if tok in _EMPTY_SETS:
            return EMPTY_SET
        if tok[1:] in _GREEK:
            return sp.Symbol(tok[1:])
        if tok in _FRACS:
            return divide(self.arg(), self.arg())
        if tok == r"\sqrt":
            return self.sqrt()
        if tok in (r"\binom", r"\dbinom", r"\tbinom"):
            return binomial(self.arg(), self.arg())
        if tok in _FUNCTIONS:
            return self.function(tok)
        if tok == r"\begin":
            return self.matrix()
        raise ParseError(f"unsupported token {tok!r}")

    def arg(self):
        """One TeX macro argument: a braced group or one token (reading 2: \\frac43 = 4/3)."""
        if self.peek_kind() == "num" and len(self.peek()) > 1:
            digit, rest = self.peek()[0], self.peek()[1:]
            if digit == ".":
                raise ParseError("a macro argument cannot start with '.'")
            self.toks[self.i] = ("num", rest)
            return number(digit)
        return self.atom()

    def bracket(self, opening: str):
        items = self.comma_list()
        closing = self.take()
        if closing not in (")", "]"):
            raise ParseError("unclosed bracket")
        if len(items) == 1:
            if (opening + closing) not in ("()", "[]"):
                raise ParseError("half-open bracket around one value")
            return items[0]  # grouping
        if len(items) == 2 and (opening + closing) != "()":
            return interval(items[0], items[1], opening == "(", closing == ")")  # reading 5
        if (opening + closing) not in ("()", "[]"):
            raise ParseError("half-open bracket around more than two values")
        return Seq("tuple", tuple(items))

    def braced_set(self) -> Seq:
        if self.peek() == r"\}":
            self.take()
            return EMPTY_SET
        items = self.comma_list()
        self.expect(r"\}")
        flat = []
        for item in items:  # {1 \pm \sqrt{5}, -2} has three elements
            flat.extend(item.items if isinstance(item, Seq) and item.kind == "pm" else [item])
        return Seq("set", tuple(flat))

    def sqrt(self) -> sp.Expr:
        index = sp.Integer(2)
        if self.peek() == "[":
            self.take()
            index = _expr(self.expr())
            self.expect("]")
            if not (index.is_Integer and 2 <= index <= 100):
                raise ParseError("root index must be an integer in [2, 100]")
        return power(self.arg(), sp.Rational(1, index))

    def function(self, name: str) -> sp.Expr:
        base = None
        if name == r"\log" and self.peek() == "_":
            self.take()
            base = _expr(self.arg())
        exp = None
        if self.peek() == "^":  # \sin^2 x
            self.take()
            exp = self.exponent()
        if self.peek() == "(":  # \sin(x)^2 is (\sin x)^2
            self.take()
            argument = _expr(self.expr())
            self.expect(")")
        else:  # reading 6: \sin 2x; the argument runs over implicit products, up to a function
            argument = _expr(self.power())
            while self.starts_factor() and self.peek() not in _FUNCTIONS:
                argument = argument * _expr(self.power())
        if exp == -1 and name in _INVERSES:  # \sin^{-1} x is arcsin x
            name, exp = _INVERSES[name], None
        value = _FUNCTIONS[name](argument) if base is None else sp.log(argument, base)
        if exp is None and self.peek() == "^":
            self.take()
            exp = self.exponent()
        return value if exp is None else power(value, exp)

    def env_name(self) -> str:
        self.expect("{")
        name = []
        while self.peek_kind() == "var":
            name.append(self.take())
        self.expect("}")
        return "".join(name)

    def matrix(self) -> Matrix:
        env = self.env_name()
        if env not in _MATRIX_ENVS:
            raise ParseError(f"unsupported environment {env!r}")
        rows, row = [], []
        while True:
            if self.peek() == r"\end":
                self.take()
                if self.env_name() != env:
                    raise ParseError("mismatched \\end")
                break
            row.append(_expr(self.expr()))
            sep = self.peek()
            if sep == "&":
                self.take()
            elif sep == "\\\\":
                self.take()
                rows.append(tuple(row))
                row = []
            elif sep != r"\end":
                raise ParseError("expected &, \\\\ or \\end in a matrix")
        if row:
            rows.append(tuple(row))
        if not rows or len({len(r) for r in rows}) != 1:
            raise ParseError("matrix rows of different lengths")
        return Matrix(tuple(rows))


def _as_set_part(value):
    """A piece of a union: an interval, a set, or a 2-tuple read as an open interval."""
    if isinstance(value, Interval) or (isinstance(value, Seq) and value.kind == "set"):
        return value
    if isinstance(value, Seq) and value.kind == "tuple" and len(value.items) == 2:
        return interval(value.items[0], value.items[1], True, True)
    raise ParseError("\\cup of something that is not an interval or a set")


def parse(text: str):
    r"""Parse one normalised answer (reward.normalize has removed $, \left, \text{units}, ...).
    Returns a sympy Expr, Seq, Interval, Union, Relation or Matrix; raises ParseError (and only
    that, for any input) on anything else.

    >>> parse(r"\frac{1}{2} + \sqrt{8}"), parse(r"1\frac{4}{5}")
    (1/2 + 2*sqrt(2), 9/5)
    >>> parse(r"(3, \pi/2)")
    Seq(kind='tuple', items=(3, pi/2))
    >>> parse(r"x \ge 2")
    Relation(terms=(x, 2), ops=('>=',))
    """
    try:
        return _Parser(text).answer()
    except ParseError:
        raise
    except (ArithmeticError, TypeError, ValueError, RecursionError) as exc:  # from sympy
        raise ParseError(f"{type(exc).__name__}: {exc}") from None
