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
                | { } | \{ \} | |x| | \begin{pmatrix} ... \end{pmatrix} | sum | (\gcd | \lcm) "(" answer ")"
    function := (\sin | \cos | ... | \ln | \log["_" arg]) ["^" exponent] (parenthesised | product)
    sum      := \sum "_" "{" letter "=" expr "}" "^" exponent product

Files: this one (the grammar, one recursive-descent parser), verifier/tokens.py (the tokenizer and
the allow-listed commands) and verifier/values.py (the value types and the capped constructors
every rule calls).

Of the choices below, 1-2 are safety (model text is never evaluated) and 3-9 are readings, what a
grader has to decide (each repeated at its line).

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Nothing here calls eval, exec, sympify or parse_expr: text becomes tokens from one regex, tokens become
   sympy objects only through constructors on checked values, and an unknown token is a ParseError.
2. Sizes are capped before any arithmetic: tokens (MAX_TOKENS, verifier/tokens.py), nesting (MAX_DEPTH) here,
   and digits, bit sizes and symbolic exponents in verifier/values.py's constructors.
3. `i` is the imaginary unit and `e` is Euler's number, as in MATH answers (values.letter).
4. TeX one-token arguments (`\frac43` = 4/3, `\sqrt2`), but an exponent takes a whole number (`2^10` = 1024).
5. An integer directly followed by a proper fraction is a mixed number: `1\frac{4}{5}` = 9/5.
6. Two numbers side by side (`42 43`) are an error, not a product.
7. `(a, b)` is a tuple; `[a, b]`, `(a, b]`, `[a, b)` are intervals; `\{...\}` is a set; `a \pm b` is the pair
   {a + b, a - b} (Seq "pm").
8. `\sin x \cos x` is sin(x) cos(x): a function's unparenthesised argument stops at the next function;
   `\sin^{-1} x` is arcsin x; `\log` is the natural logarithm unless `\log_b`.
9. `\sum_{k=a}^{b} t` is an opaque sum(t, k, a, b), never evaluated; a subscript may hold + and -.
10. `\dot{x}` and `\ddot{x}` (time derivatives) are names, each its own symbol, never a product with x.
"""

from __future__ import annotations

import sympy as sp

from verifier.tokens import (
    ADD_OPS,
    CONSTANTS,
    DIV_OPS,
    EMPTY_SETS,
    FRACS,
    FUNCTIONS,
    GCD_LCM,
    GREEK,
    INVERSES,
    MATRIX_ENVS,
    MUL_OPS,
    RELATIONS,
    Tokens,
    tokenize,
)
from verifier.values import (
    EMPTY_SET,
    Matrix,
    ParseError,
    Relation,
    Seq,
    Union,
    as_expr,
    binomial,
    divide,
    expand_pm,
    factorial,
    gcd_lcm,
    interval,
    letter,
    number,
    power,
    set_part,
)

MAX_DEPTH = 40  # nested groups; 10k nested braces fail fast instead of overflowing the stack


# ----------------------------------------------------------------------------------------------
# The recursive-descent parser
# ----------------------------------------------------------------------------------------------


class _Parser(Tokens):
    def __init__(self, text: str):
        super().__init__(tokenize(text))
        self.depth = 0
        self.in_abs = 0  # inside |...| a "|" closes; outside it opens (2|x| = 2 * |x|)

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
        while self.peek() in RELATIONS:
            ops.append(RELATIONS[self.take()])
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
        sign = self.take() if self.peek() in ADD_OPS else "+"
        first = self.term()
        if sign == "+" and self.peek() not in ADD_OPS:
            return first  # may be a tuple, interval, set or matrix
        terms = [(sign, first)]
        while self.peek() in ADD_OPS:
            sign = self.take()
            terms.append((sign, self.term()))
        return expand_pm(terms)

    def term(self):
        value, start = self.signed(), self.i
        while True:
            tok = self.peek()
            if tok in MUL_OPS:
                self.take()
                value = as_expr(value) * as_expr(self.signed())
            elif tok in DIV_OPS:
                self.take()
                value = divide(value, self.signed())
            elif self.starts_factor():
                if self.peek_kind() == "num" and self.prev_kind() == "num":
                    raise ParseError("two numbers side by side")  # choice 6: "42 43" is a hedge
                mixed = (isinstance(value, sp.Integer) and value >= 0 and self.i == start
                         and self.prev_kind() == "num" and tok in FRACS)
                factor = self.power()
                if mixed and isinstance(factor, sp.Rational) and 0 < factor < 1:
                    value = value + factor  # choice 5: 1\frac{4}{5} is a mixed number
                else:
                    value = as_expr(value) * as_expr(factor)
            else:
                return value

    def starts_factor(self) -> bool:
        kind, tok = self.peek_kind(), self.peek()
        return kind in ("num", "var") or tok in ("(", "[", "{") or (tok == "|" and not self.in_abs) or (
            kind == "cmd"
            and (tok in FUNCTIONS or tok in CONSTANTS or tok in FRACS or tok[1:] in GREEK
                 or tok in (r"\sqrt", r"\binom", r"\dbinom", r"\tbinom", r"\sum") or tok in GCD_LCM)
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
        else:  # choice 4: a whole number, a letter or a command atom; ^ again is a tower
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
        if tok in CONSTANTS:
            return CONSTANTS[tok]
        if tok in EMPTY_SETS:
            return EMPTY_SET
        if tok[1:] in GREEK:
            return sp.Symbol(tok[1:])
        if tok in (r"\dot", r"\ddot"):  # choice 10: \dot{x} is one name, like a Greek letter
            return sp.Symbol(f"{tok}{{{self.subscript()}}}")
        if tok in FRACS:
            return divide(self.arg(), self.arg())
        if tok == r"\sqrt":
            return self.sqrt()
        if tok in (r"\binom", r"\dbinom", r"\tbinom"):
            return binomial(self.arg(), self.arg())
        if tok in FUNCTIONS:
            return self.function(tok)
        if tok in GCD_LCM:  # \gcd(12, 18): its arguments in parentheses
            self.expect("(")
            args = self.comma_list()
            self.expect(")")
            return gcd_lcm(tok, args)
        if tok == r"\begin":
            return self.matrix()
        if tok == r"\sum":
            return self.big_sum()
        raise ParseError(f"unsupported token {tok!r}")

    def arg(self):
        """One TeX macro argument: a braced group or one token (choice 4: \\frac43 = 4/3)."""
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
            return interval(items[0], items[1], opening == "(", closing == ")")  # choice 7
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
        else:  # choice 8: \sin 2x
            argument = self.product()
        if exp == -1 and name in INVERSES:  # \sin^{-1} x is arcsin x
            name, exp = INVERSES[name], None
        value = FUNCTIONS[name](argument) if base is None else sp.log(argument, base)
        if exp is None and self.peek() == "^":
            self.take()
            exp = self.exponent()
        return value if exp is None else power(value, exp)

    def product(self) -> sp.Expr:
        """Reading 6: an unparenthesised argument runs over implicit products, up to a function."""
        value = as_expr(self.power())
        while self.starts_factor() and self.peek() not in FUNCTIONS:
            value = value * as_expr(self.power())
        return value

    def big_sum(self) -> sp.Expr:
        """Reading 7: \\sum_{k=a}^{b} t as the opaque sum(t, k, a, b)."""
        self.expect("_")
        bound = self.atom()
        if not (isinstance(bound, Relation) and bound.ops == ("=",) and isinstance(bound.terms[0], sp.Symbol)):
            raise ParseError("a sum needs _{k=a}")
        self.expect("^")
        upper = as_expr(self.exponent())
        return sp.Function("sum")(self.product(), bound.terms[0], as_expr(bound.terms[1]), upper)

    def matrix(self) -> Matrix:
        env = self.env_name()
        if env not in MATRIX_ENVS:
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
