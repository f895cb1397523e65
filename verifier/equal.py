r"""Exact equality of two parsed answers (for verdict.sympy_verdict), gold first: answers_equal(g, p).

Inputs are what parse.parse returns: sympy expressions, Seq (tuple / set / list / pm),
Interval, Union, Relation and Matrix. The comparison, by kind of gold:

    number or expression   a == b in sympy's canonical form, else agreement at high precision
    tuple                  same length, elementwise, in order
    set, list              the same elements, in any order (a repeated element counts once)
    a \pm b                the same multiset of elements, in any order
    interval, union        the same parts (endpoints and open/closed ends), in any order
    inequality             converted to intervals (also -x > -1, and a <= |z| <= b as two
                           intervals); the prediction may be an interval or an inequality
                           (the reverse, an inequality against an interval, is not)
    equation               (lhs - rhs) of both agree up to a nonzero constant factor
    matrix                 same shape, elementwise; a vector may be written as a tuple

`x = 5`, `(x, y) = (1, 2)` and `x \in S` are read as their right-hand side when the other
answer is not an equation.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Rationals compare exactly: 0.333 != 1/3, 1/2^98 != 1/2^99, 3.14 != pi.
2. Anything else compares in sympy's canonical form, else must agree to (precision - 20) significant digits,
   at three generic points if it has variables; expand/simplify are never called.
3. The one tolerance (rounds_to): a non-terminating value answers a decimal gold of 3+ digits it rounds to.
4. Arbitrary constants (C, c, K, k, C_1, c_2, ...) may be renamed one-to-one, only when the gold has one besides
   a variable the prediction shares (constants_renamed).
"""

from __future__ import annotations

import itertools
import re

import sympy as sp
from sympy.core.function import AppliedUndef

from verifier.values import Interval, Matrix, Relation, Seq, Union

MIN_DIGITS = 100  # numeric comparison precision, before raising it for long numbers
MAX_DIGITS = 2000  # ... and its ceiling, which bounds the cost of one evaluation
MIN_ROUNDED_DIGITS = 3  # choice 3: significant digits a decimal gold needs to count as rounded
MAX_CONSTANTS = 3  # choice 4: arbitrary constants renamed (3! renamings at most)
_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


# ----------------------------------------------------------------------------------------------
# Numbers and expressions
# ----------------------------------------------------------------------------------------------


def scalars_equal(a: sp.Expr, b: sp.Expr) -> bool:
    """Choices 1 and 2 above.

    >>> from sympy import Rational, sqrt, pi
    >>> scalars_equal(Rational(1, 2), Rational(2, 4)), scalars_equal(sqrt(20), 2 * sqrt(5))
    (True, True)
    >>> scalars_equal(Rational(333, 1000), Rational(1, 3)), scalars_equal(Rational(314, 100), pi)
    (False, False)
    """
    if a == b:
        return True
    if (a.is_Rational and b.is_Rational) or _has_infinity(a) or _has_infinity(b):
        return False
    diff = a - b
    if diff == 0:
        return True
    if diff.is_Rational or _opaque(a) or _opaque(b):
        return False  # an opaque sum (the parser's \sum) is equal only in canonical form
    return _agree_numerically(a, b)


def _opaque(v: sp.Expr) -> bool:
    return bool(v.atoms(AppliedUndef))


def _has_infinity(v: sp.Expr) -> bool:
    return v.has(sp.oo, -sp.oo, sp.zoo, sp.nan)


def _precision(*exprs: sp.Expr) -> int:
    """Digits for a numeric comparison: more than any rational written in the answers can fake
    (a rational of B bits is at best ~2^-B away from an irrational)."""
    bits = max([abs(int(r.p)).bit_length() + int(r.q).bit_length()
                for e in exprs for r in e.atoms(sp.Rational)] + [0])
    return min(MIN_DIGITS + bits * 2 // 3, MAX_DIGITS)


def _values(expr: sp.Expr, symbols: list, prec: int) -> list:
    """expr at three generic points (one if it has no symbols), to prec digits. Symbols are
    substituted as floats, never exactly (x^40000 at a rational is a 40000-digit number). A
    point where expr is not a finite number gives None."""
    values = []
    for k in range(3 if symbols else 1):
        point = {s: sp.Float(sp.Rational(37 + 11 * j + 29 * k, 53 + 7 * k), prec)
                 for j, s in enumerate(symbols)}  # in (0.6, 2): positive, distinct, generic
        v = sp.N(expr, prec, subs=point) if symbols else sp.N(expr, prec)
        values.append(v if v.is_number and not _has_infinity(v) else None)
    return values


def _agree_numerically(a: sp.Expr, b: sp.Expr) -> bool:
    """a and b agree to prec - 20 digits wherever both are finite (at least one point)."""
    prec = _precision(a, b)
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    pairs = [(va, vb) for va, vb in zip(_values(a, symbols, prec), _values(b, symbols, prec))
             if va is not None and vb is not None]
    tol = sp.Float(10, prec) ** (20 - prec)
    return bool(pairs) and all(abs(va - vb) <= tol * max(abs(va), abs(vb)) for va, vb in pairs)


def _terminates(r: sp.Rational) -> bool:
    """Whether the rational r has a finite decimal expansion (its denominator is 2^a 5^b)."""
    q = int(r.q)
    for prime in (2, 5):
        while q % prime == 0:
            q //= prime
    return q == 1


def rounds_to(gold_text: str, value) -> bool:
    """Choice 3: value rounds to the decimal gold_text at its last written digit.

    >>> from sympy import Rational, sqrt
    >>> rounds_to("33.3", Rational(100, 3)), rounds_to("4.123105625617661", sqrt(17))
    (True, True)
    >>> rounds_to("1.25", Rational(1249, 1000)), rounds_to("0.33", Rational(1, 3))
    (False, False)
    """
    m = re.fullmatch(r"[+-]?(\d*)\.(\d+)", gold_text.strip())
    if m is None or not isinstance(value, sp.Expr) or not value.is_number or _has_infinity(value):
        return False
    if len((m.group(1) + m.group(2)).lstrip("0")) < MIN_ROUNDED_DIGITS:
        return False
    if value.is_Rational and _terminates(value):
        return False  # a decimal prediction must equal the gold exactly
    decimals = len(m.group(2))
    v = sp.N(value, min(len(m.group(1)) + decimals + 30, MAX_DIGITS))
    if not v.is_real:
        return False
    return bool(abs(v - sp.Rational(gold_text.strip())) < sp.Rational(5, 10 ** (decimals + 1)))


# ----------------------------------------------------------------------------------------------
# Equations, inequalities, assignments
# ----------------------------------------------------------------------------------------------


def equations_equal(g: Relation, p: Relation) -> bool:
    """(lhs - rhs) of both agree up to a nonzero constant: their ratio takes one finite nonzero
    value at every generic point (y = 2x + 3 equals 2y - 4x = 6)."""
    if len(g.ops) != 1 or g.ops != p.ops or g.ops[0] != "=":
        return g == p
    a, b = g.terms[0] - g.terms[1], p.terms[0] - p.terms[1]
    if a == 0 or b == 0 or _opaque(a) or _opaque(b):
        return a == b
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    prec = _precision(a, b)
    ratios = [va / vb for va, vb in zip(_values(a, symbols, prec), _values(b, symbols, prec))
              if va is not None and vb is not None and vb != 0]
    tol = sp.Float(10, prec) ** (20 - prec)
    return (len(ratios) > 0 and all(r != 0 for r in ratios)
            and all(abs(r - ratios[0]) <= tol * abs(ratios[0]) for r in ratios))


def _signed_symbol(term) -> tuple[sp.Symbol, int] | None:
    """(x, 1) for x, (x, -1) for -x; None for anything else (2x > 4 is not simplified here)."""
    if isinstance(term, sp.Symbol):
        return term, 1
    if isinstance(term, sp.Expr) and isinstance(-term, sp.Symbol):
        return -term, -1
    return None


def _abs_range(terms: tuple, ops: tuple) -> Union | None:
    """a <= |z| <= b (a >= 0): the set of z, [-b, -a] and [a, b]."""
    lo, mid, hi = terms
    if ops[0] in (">", ">="):
        lo, hi, ops = hi, lo, (_FLIP[ops[1]], _FLIP[ops[0]])
    if not (isinstance(mid, sp.Abs) and isinstance(mid.args[0], sp.Symbol) and set(ops) <= {"<", "<="}
            and not lo.free_symbols and not hi.free_symbols and lo.is_nonnegative):
        return None
    lo_open, hi_open = ops[0] == "<", ops[1] == "<"
    if lo == 0 and not lo_open:
        return Union((Interval(-hi, hi, hi_open, hi_open),))
    return Union((Interval(-hi, -lo, hi_open, lo_open), Interval(lo, hi, lo_open, hi_open)))


def inequality_set(v) -> Interval | Union | None:
    """`a < x <= b`, `x > a`, `3 < x`, `-x > -1`, `1 <= |z| <= 2` (and lists of them, from "or")
    as intervals; else None."""
    if isinstance(v, Seq) and v.kind == "list":
        parts = [inequality_set(item) for item in v.items]
        return None if None in parts else Union(tuple(parts))
    if not (isinstance(v, Relation) and all(op in _FLIP for op in v.ops)):
        return None
    terms, ops = v.terms, v.ops
    if len(terms) == 2 and _signed_symbol(terms[1]) and not terms[0].free_symbols:
        terms, ops = terms[::-1], (_FLIP[ops[0]],)  # 3 < x -> x > 3
    signed = _signed_symbol(terms[0]) if len(terms) == 2 else None
    if signed is not None and signed[1] == -1 and not terms[1].free_symbols:
        terms, ops = (signed[0], -terms[1]), (_FLIP[ops[0]],)  # -x > -1 -> x < 1
    if len(terms) == 2 and isinstance(terms[0], sp.Symbol) and not terms[1].free_symbols:
        if ops[0] in ("<", "<="):
            return Interval(-sp.oo, terms[1], True, ops[0] == "<")
        return Interval(terms[1], sp.oo, ops[0] == ">", True)
    if len(terms) == 3 and isinstance(terms[1], sp.Abs):
        return _abs_range(terms, ops)
    if len(terms) == 3 and isinstance(terms[1], sp.Symbol) and set(ops) <= {"<", "<="}:
        return Interval(terms[0], terms[2], ops[0] == "<", ops[1] == "<")
    if len(terms) == 3 and isinstance(terms[1], sp.Symbol) and set(ops) <= {">", ">="}:
        return Interval(terms[2], terms[0], ops[1] == ">", ops[0] == ">")
    return None


def assigned_value(v):
    """`x = 5` -> 5, `(x, y) = (1, 2)` -> (1, 2), `x \\in S` -> S; anything else unchanged."""
    if not isinstance(v, Relation) or len(v.ops) != 1:
        return v
    lhs, rhs = v.terms
    if v.ops == ("in",):
        return rhs
    if v.ops == ("=",) and (isinstance(lhs, sp.Symbol) or (
            isinstance(lhs, Seq) and all(isinstance(x, sp.Symbol) for x in lhs.items))):
        return rhs
    return v


# ----------------------------------------------------------------------------------------------
# Collections
# ----------------------------------------------------------------------------------------------


def _set_parts(v) -> list | None:
    """The pieces of a set-valued answer; None if v is not one (e.g. an inequality)."""
    if isinstance(v, Union):
        return list(v.parts)
    if isinstance(v, Interval) or (isinstance(v, Seq) and v.kind == "set"):
        return [v]
    if isinstance(v, Seq) and v.kind == "tuple" and len(v.items) == 2:  # (a, b): open interval
        return [Interval(v.items[0], v.items[1], True, True)]
    return None


def _part_equal(a, b) -> bool:
    if isinstance(a, Interval) and isinstance(b, Interval):
        return ((a.left_open, a.right_open) == (b.left_open, b.right_open)
                and scalars_equal(a.lo, b.lo) and scalars_equal(a.hi, b.hi))
    if isinstance(a, Interval) or isinstance(b, Interval):
        return False
    return answers_equal(a, b)


def _match_unordered(golds: list, preds: list, equal) -> bool:
    """Multiset equality under `equal` (greedy matching is exact: equality is transitive)."""
    if len(golds) != len(preds):
        return False
    unused = list(preds)
    for g in golds:
        j = next((j for j, p in enumerate(unused) if equal(g, p)), None)
        if j is None:
            return False
        unused.pop(j)
    return True


def _flat(items) -> list:
    """Elements of a set or list, with each \\pm expanded: {1 \\pm \\sqrt{5}, -2} has three."""
    return [x for item in items
            for x in (item.items if isinstance(item, Seq) and item.kind == "pm" else [item])]


def _seqs_equal(g: Seq, p) -> bool:
    if isinstance(p, Matrix) and 1 in (len(p.rows), len(p.rows[0])):
        p = Seq("tuple", tuple(x for row in p.rows for x in row))  # a vector as a tuple
    if isinstance(p, Interval):
        parts = _set_parts(g)
        return parts is not None and _part_equal(parts[0], p)
    if not isinstance(p, Seq):
        return False  # one value against several: a hedge or a missing solution
    preds = [assigned_value(x) for x in p.items]  # x = 1, x = -2
    if g.kind == "tuple":  # ordered: a tuple, or a bare list in the same order
        return (p.kind in ("tuple", "list") and len(g.items) == len(preds)
                and all(answers_equal(a, b) for a, b in zip(g.items, preds)))
    if (g.kind, p.kind) in (("set", "set"), ("list", "list")):  # \{1, 2, 2\} = \{1, 2\}
        golds, preds = _flat(g.items), _flat(preds)  # repeats do not count
        return (all(any(answers_equal(a, b) for b in preds) for a in golds)
                and all(any(answers_equal(a, b) for a in golds) for b in preds))
    return _match_unordered(_flat(g.items), _flat(preds), answers_equal)


def _matrices_equal(g: Matrix, p) -> bool:
    if isinstance(p, Seq) and p.kind == "tuple" and 1 in (len(g.rows), len(g.rows[0])):
        p = Matrix(tuple((x,) for x in p.items) if len(g.rows) > 1 else (p.items,))
    if not isinstance(p, Matrix) or len(p.rows) != len(g.rows) or len(p.rows[0]) != len(g.rows[0]):
        return False
    return all(scalars_equal(a, b) for ga, pa in zip(g.rows, p.rows) for a, b in zip(ga, pa))


# ----------------------------------------------------------------------------------------------
# Dispatch on the kind of the gold
# ----------------------------------------------------------------------------------------------


def answers_equal(g, p) -> bool:
    """Whether prediction p answers gold g (both from parse.parse); see the table above."""
    if g == p:
        return True
    g_set = inequality_set(g)
    if g_set is not None:  # gold inequality: an interval or an inequality may answer it
        p_set = inequality_set(p)
        return answers_equal(g_set, p if p_set is None else p_set)
    if isinstance(g, Relation) and isinstance(p, Relation) and "in" not in g.ops + p.ops:
        return equations_equal(g, p)
    g, p = assigned_value(g), assigned_value(p)  # y = 2x + 3 against 2x + 3
    if isinstance(g, Relation) or isinstance(p, Relation):
        return False
    if isinstance(g, (Interval, Union)):
        gold_parts, pred_parts = _set_parts(g), _set_parts(p)
        # an inequality against an interval gold has no parts: incorrect (it restates the question)
        return pred_parts is not None and _match_unordered(gold_parts, pred_parts, _part_equal)
    if isinstance(g, Seq):
        return _seqs_equal(g, p)
    if isinstance(g, Matrix):
        return _matrices_equal(g, p)
    return isinstance(g, sp.Expr) and isinstance(p, sp.Expr) and scalars_equal(g, p)


# ----------------------------------------------------------------------------------------------
# Choice 4: arbitrary constants
# ----------------------------------------------------------------------------------------------

_CONSTANT_NAME_RE = re.compile(r"[CcKk](?:_\d)?")  # C, c, K, k, C_1, c_2: the usual arbitrary constants


def _map_exprs(v, f):
    """v with f applied to each sympy expression it holds (the shapes of verifier/values.py)."""
    if isinstance(v, sp.Basic):
        return f(v)
    if isinstance(v, Seq):
        return Seq(v.kind, tuple(_map_exprs(x, f) for x in v.items))
    if isinstance(v, Relation):
        return Relation(tuple(_map_exprs(x, f) for x in v.terms), v.ops)
    if isinstance(v, Interval):
        return Interval(f(v.lo), f(v.hi), v.left_open, v.right_open)
    if isinstance(v, Union):
        return Union(tuple(_map_exprs(x, f) for x in v.parts))
    if isinstance(v, Matrix):
        return Matrix(tuple(tuple(f(x) for x in row) for row in v.rows))
    return v


def _symbols(v) -> set:
    found = set()
    _map_exprs(v, lambda x: found.update(x.free_symbols) or x)
    return found


def constants_renamed(g, p) -> bool:
    """Choice 4: p equals g once its arbitrary constants are renamed one-to-one to the gold's, when the gold
    has such a constant and a variable besides it that p shares (y = c e^x; C_1 e^x + C_2 e^{2x}).

    >>> from verifier.parse import parse
    >>> constants_renamed(parse("y = c e^{x}"), parse("y = C e^{x}")), constants_renamed(parse("2c"), parse("2C"))
    (True, False)
    """
    g_symbols, p_symbols = _symbols(g), _symbols(p)
    g_constants = sorted((s for s in g_symbols if _CONSTANT_NAME_RE.fullmatch(s.name)), key=str)
    p_constants = sorted((s for s in p_symbols if _CONSTANT_NAME_RE.fullmatch(s.name)), key=str)
    shared = (g_symbols - set(g_constants)) & (p_symbols - set(p_constants))
    if not g_constants or not shared or len(g_constants) != len(p_constants) or len(g_constants) > MAX_CONSTANTS:
        return False  # 2c against 2C: c may be a parameter the problem gave
    for names in itertools.permutations(g_constants):
        renaming = dict(zip(p_constants, names))
        if answers_equal(g, _map_exprs(p, lambda x, r=renaming: x.xreplace(r))):
            return True
    return False
