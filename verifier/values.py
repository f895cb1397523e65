r"""The values an answer parses to, and the capped sympy constructors that build them.

verifier/parse.py turns answer text into these; verifier/equal.py compares them. Values:

    sympy Expr     numbers, radicals, \pi, symbolic expressions
    Seq            "tuple" (ordered, from brackets), "set" (\{...\}), "list" (a bare comma list)
                   or "pm" (the 2^k expansions of k \pm signs)
    Interval       lo, hi and which ends are open
    Union          intervals and sets joined by \cup
    Relation       a chain such as x = 5 or 1 < x \le 2
    Matrix         rows of equal length

Safety (model text is never evaluated): every piece of arithmetic the
parser asks of sympy goes through a constructor here, and each checks sizes before sympy
computes: digits per number (MAX_DIGITS), the bit size of an exact power, factorial or binomial
(MAX_BITS), the exponent of a non-rational base (MAX_SYMBOLIC_EXP), root indices, and \pm signs
(MAX_PM). sympy evaluates `9**(9**9)` eagerly on construction, so the check must come first.
Anything refused raises ParseError, which the reward scores as an incorrect answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

MAX_DIGITS = 400  # digits in one number literal
MAX_BITS = 20_000  # bits of an exact integer power, factorial or binomial (about 6000 digits)
MAX_SYMBOLIC_EXP = 200  # |n| in b^n when b is not a rational number
MAX_PM = 2  # \pm / \mp signs in one expression (2^MAX_PM alternatives)


# ----------------------------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------------------------


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


def as_expr(v) -> sp.Expr:
    """v itself if it is a number or expression; arithmetic on anything else is a ParseError."""
    if not isinstance(v, sp.Expr):
        raise ParseError("arithmetic on a tuple, set, interval or relation")
    return v


def power(base, exp) -> sp.Expr:
    """base^exp, refusing results that would be huge before sympy computes them."""
    base, exp = as_expr(base), as_expr(exp)
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
    a, b = as_expr(a), as_expr(b)
    if b == 0:
        raise ParseError("division by zero")
    return a * power(b, sp.Integer(-1))


def factorial(n) -> sp.Expr:
    n = as_expr(n)
    if n.is_number:  # 1000! has 8530 bits; (1000!)! is refused here
        if not (n.is_Integer and 0 <= n <= 1000):
            raise ParseError("factorial of a number that is not an integer in [0, 1000]")
    return sp.factorial(n)


def binomial(n, k) -> sp.Expr:
    n, k = as_expr(n), as_expr(k)
    if n.is_Integer and k.is_Integer:
        small = min(int(k), int(n) - int(k))
        if int(n) < 0 or small * max(int(n).bit_length(), 1) > MAX_BITS:
            raise ParseError("binomial too large")
    elif (n.is_number and not n.is_Integer) or (k.is_number and not k.is_Integer):
        raise ParseError("binomial of a number that is not an integer")
    return sp.binomial(n, k)


def gcd_lcm(name: str, args: list) -> sp.Expr:
    """\\gcd(a, b, ...) or \\lcm(...): the number for integers (each capped by MAX_DIGITS), else opaque gcd(a, b)."""
    args = [as_expr(a) for a in args]
    if len(args) < 2:
        raise ParseError(f"{name} needs two or more arguments")
    if all(a.is_Integer for a in args):
        value = sp.Integer(0 if name == r"\gcd" else 1)
        for a in args:
            value = sp.gcd(value, a) if name == r"\gcd" else sp.ilcm(value, a)
        return sp.Integer(abs(int(value)))
    return sp.Function(name[1:])(*args)


def letter(name: str) -> sp.Expr:
    # the parser's reading: i is the imaginary unit and e is Euler's number (MATH conventions).
    return {"i": sp.I, "e": sp.E}.get(name) or sp.Symbol(name)


def interval(lo, hi, left_open: bool, right_open: bool) -> Interval:
    return Interval(as_expr(lo), as_expr(hi), left_open, right_open)


def expand_pm(terms: list[tuple[str, object]]):
    """Sum signed terms; with k \\pm signs return Seq("pm") of the 2^k sums."""
    sums = [sp.Integer(0)]
    if sum(sign in (r"\pm", r"\mp") for sign, _ in terms) > MAX_PM:
        raise ParseError("too many \\pm signs")
    for sign, value in terms:
        value = as_expr(value)
        if sign in (r"\pm", r"\mp"):
            sums = [s + value for s in sums] + [s - value for s in sums]
        else:
            sums = [s + value if sign == "+" else s - value for s in sums]
    return sums[0] if len(sums) == 1 else Seq("pm", tuple(sums))


def set_part(value):
    """A piece of a union: an interval, a set, or a 2-tuple read as an open interval."""
    if isinstance(value, Interval) or (isinstance(value, Seq) and value.kind == "set"):
        return value
    if isinstance(value, Seq) and value.kind == "tuple" and len(value.items) == 2:
        return interval(value.items[0], value.items[1], True, True)
    raise ParseError("\\cup of something that is not an interval or a set")

