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
2. Sizes are capped before any arithmetic: tokens (MAX_TOKENS) and nesting (MAX_DEPTH) here;
   digits per number (MAX_DIGITS), the bit size of an exact power, factorial or binomial
   (MAX_BITS), and the exponent of a non-rational base (MAX_SYMBOLIC_EXP) in math_values.py's
   constructors. sympy evaluates `9**(9**9)` eagerly on construction, so the check must come
   first.

Readings, numbered (choices a grader has to make; each is repeated at its line):
1. `i` is the imaginary unit and `e` is Euler's number, as in MATH answers (math_values.letter).
2. TeX one-token arguments: `\frac43` = 4/3, `\frac 59` = 5/9, `\sqrt2`; but an exponent takes a
   whole number (`2^10` = 1024, what the writer meant, not TeX's 2^1 0).
3. An integer directly followed by a proper fraction is a mixed number: `1\frac{4}{5}` = 9/5.
4. Two numbers side by side (`42 43`) are an error, not a product.
5. `(a, b)` is a tuple; math_equal.py reads a 2-tuple as an open interval when compared with
   one. `[a, b]`, `(a, b]`, `[a, b)` are intervals; `\{...\}` is a set; `a \pm b` is the pair
   {a + b, a - b} (Seq "pm").
6. `\sin x \cos x` is sin(x) cos(x): a function's unparenthesised argument stops at the next
   function; `\sin^{-1} x` is arcsin x; `\log` is the natural logarithm unless `\log_b`.

Files: this one (tokens and the grammar, one recursive-descent parser: it stays one file at
~440 lines because the grammar reads best in one place) and math_values.py (the value types
and the capped constructors every rule calls).
"""

from __future__ import annotations

import re

import sympy as sp

from math_values import (
    EMPTY_SET, Matrix, ParseError, Relation, Seq, Union, as_expr, binomial, divide,
    expand_pm, factorial, interval, letter, number, power, set_part,
)

MAX_TOKENS = 600  # an answer longer than this is not a final answer
MAX_DEPTH = 40  # nested groups; 10k nested braces fail fast instead of overflowing the stack

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
        return Union(tuple(set_part(p) for p in parts))

    def expr(self):
        sign = self.take() if self.peek() in _ADD_OPS else "+"
        first = self.term()
        if sign == "+" and self.peek() not in _ADD_OPS:
            return first  # may be a tuple, interval, set or matrix
        terms = [(sign, first)]
        while self.peek() in _ADD_OPS:
            sign = self.take()
            terms.append((sign, self.term()))
        return expand_pm(terms)

    def term(self):
        value, start = self.signed(), self.i
        while True:
            tok = self.peek()
            if tok in _MUL_OPS:
                self.take()
                value = as_expr(value) * as_expr(self.signed())
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
                    value = as_expr(value) * as_expr(factor)
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
        return -as_expr(value) if negate else value

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
        return -as_expr(value) if negate else value

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
            return sp.Abs(as_expr(value))
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
            index = as_expr(self.expr())
            self.expect("]")
            if not (index.is_Integer and 2 <= index <= 100):
                raise ParseError("root index must be an integer in [2, 100]")
        return power(self.arg(), sp.Rational(1, index))

    def function(self, name: str) -> sp.Expr:
        base = None
        if name == r"\log" and self.peek() == "_":
            self.take()
            base = as_expr(self.arg())
        exp = None
        if self.peek() == "^":  # \sin^2 x
            self.take()
            exp = self.exponent()
        if self.peek() == "(":  # \sin(x)^2 is (\sin x)^2
            self.take()
            argument = as_expr(self.expr())
            self.expect(")")
        else:  # reading 6: \sin 2x; the argument runs over implicit products, up to a function
            argument = as_expr(self.power())
            while self.starts_factor() and self.peek() not in _FUNCTIONS:
                argument = argument * as_expr(self.power())
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
            row.append(as_expr(self.expr()))
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
