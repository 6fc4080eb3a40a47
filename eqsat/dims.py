"""Symbolic dimensions of the IR: a size that is a symbol of the model's interface, or computed from symbols.

A dynamic-axes model is imported at a representative size of each symbol (:mod:`eqsat.onnx.axes.interface`). A
:class:`Dim` is such a size that knows it is symbolic: an ``int`` (the representative value: every shape
function, cost model and extractor reads it unchanged) that also carries its **fingerprint**, the value the
same dimension takes when every symbol is at its own fixed large value (:func:`symbol_value`: 64 times a
distinct prime, so that two different monomials or sums of them differ there, and a monomial's fingerprint names
its symbols and their representative sizes; a symbol the interface writes as a sum or product of others, dynamo's
``past + 1``, is that arithmetic of their fingerprints: :meth:`SymbolTable.derive`). A plain ``int`` is a constant:
its fingerprint is itself.

Shapes are inferred twice (:func:`infer`): at the representative sizes (the shape) and at the fingerprints
(whether the operator is valid for every value of the symbols, and which output dimensions are symbolic). The
e-graph's ``sym`` analysis is the twin of the second (:mod:`eqsat.egglog.schema`): a rewrite commits only where
its right-hand side has its left-hand side's ``shape`` and ``sym`` both, so a rewrite valid only at the
representative sizes (a reshape target, a slice bound or a size comparison read off a symbolic dimension) does
not fire.

The symbolic form, a :class:`Mono` (a rational coefficient times a product of symbols with integer powers: the
products and quotients reshapes make of the input axes), is read back from a fingerprint by :attr:`Dim.mono`.
This module is the one home of symbolic dimensions: :mod:`eqsat.onnx.axes.symbolic` infers ONNX shapes in monomials,
:mod:`eqsat.onnx.axes.dimensions` gives an import's IR its Dims.

>>> b = Dim.symbol("batch", 2)
>>> b, int(b), b.fp == symbol_value("batch", 2), b.mono.key()
(2, 2, True, 'batch')
>>> y = infer("reshape", (Dim(2 * 12, fp_of(b) * 12),), [(b, 3, 4)])
>>> y, [d.mono.key() for d in y if isinstance(d, Dim)]
((24,), ['12*batch'])
>>> m, s = Mono.symbol("batch"), Mono.symbol("seq")
>>> (m * s).key(), int((m * s * Mono.const(12)).value({"batch": 2, "seq": 5})), (s / Mono.const(4)).key()
('batch*seq', 120, '1/4*seq')
>>> (m * s) / s == m, Mono.const(3).is_const
(True, True)
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .errors import ShapeError
from .ops import Shape, infer_shape

SCALE = 64
"""a symbol's fingerprint is SCALE times a prime: divisible by the small powers of two that reshapes divide by"""
FIRST_PRIME = 211


@dataclass(frozen=True)
class Mono:
    """``coef * prod(symbol ** power)``; powers never 0, sorted by symbol."""

    coef: Fraction
    powers: tuple[tuple[str, int], ...] = ()

    @classmethod
    def const(cls, n: int | Fraction) -> Mono:
        return cls(Fraction(n))

    @classmethod
    def symbol(cls, name: str) -> Mono:
        return cls(Fraction(1), ((name, 1),))

    @property
    def is_const(self) -> bool:
        return not self.powers

    def _combine(self, other: Mono, sign: int) -> Mono:
        powers = dict(self.powers)
        for s, p in other.powers:
            powers[s] = powers.get(s, 0) + sign * p
        coef = self.coef * other.coef if sign > 0 else self.coef / other.coef
        return Mono(coef, tuple(sorted((s, p) for s, p in powers.items() if p)))

    def __mul__(self, other: Mono) -> Mono:
        return self._combine(other, 1)

    def __truediv__(self, other: Mono) -> Mono:
        return self._combine(other, -1)

    def value(self, values: Mapping[str, int]) -> Fraction:
        out = self.coef
        for s, p in self.powers:
            out *= Fraction(values[s]) ** p
        return out

    def key(self) -> str:
        """The ``dim_param`` that carries this monomial through onnx's shape inference (a constant: its digits)."""
        parts = [] if self.coef == 1 and self.powers else [str(self.coef)]
        for s, p in self.powers:
            parts += [s] * p if p > 0 else [f"/{s}"] * -p
        return "*".join(parts).replace("*/", "/")


_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.USub,
               ast.Constant, ast.Name, ast.Load)


@dataclass(frozen=True)
class Derived:
    """A symbol written as integer arithmetic of others: ``uses`` them; called with their values, gives its own."""

    uses: frozenset[str]
    code: object

    def __call__(self, values: Mapping[str, int]) -> int:
        return int(eval(self.code, {"__builtins__": {}}, dict(values)))  # type: ignore[arg-type]  # noqa: S307


def derived_symbols(names: Sequence[str]) -> dict[str, Derived]:
    """The symbols among ``names`` that are integer arithmetic of others among them, as torch's dynamo exporter
    writes a cache's length (``past + 1``, ``s0 + s1``, ``2*s3``): symbol -> its value from the others' values.
    A symbol the run's table ties to others (:attr:`SymbolTable.ties`: ``total`` the model runs with at ``past +
    seq`` only) is read as that arithmetic.

    >>> f = derived_symbols(["batch", "past", "past + 1"])
    >>> sorted(f), f["past + 1"]({"past": 127})
    (['past + 1'], 128)
    """
    ties = current().ties
    free = {n for n in names if n.isidentifier() and n not in ties}
    out: dict[str, Derived] = {}
    for name in names:
        if name in free:
            continue
        try:
            tree = ast.parse(ties.get(name, name).strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # not an expression, or not one to read
            continue
        nodes = list(ast.walk(tree))
        used = {n.id for n in nodes if isinstance(n, ast.Name)}
        if not used or not used <= free or not all(isinstance(n, _ARITHMETIC) for n in nodes) or \
                any(isinstance(n, ast.Constant) and type(n.value) is not int for n in nodes):
            continue
        out[name] = Derived(frozenset(used), compile(tree, "<dim_param>", "eval"))
    return out


def follow(values: Mapping[str, int], derived: Mapping[str, Callable[[Mapping[str, int]], int]]) -> dict[str, int]:
    """``values`` with each :func:`derived_symbols` symbol at its value from theirs.

    >>> follow({"past": 63, "past + 1": 128}, derived_symbols(["past", "past + 1"]))
    {'past': 63, 'past + 1': 64}
    """
    out = dict(values)
    out.update({s: f(out) for s, f in derived.items()})
    return out


SymShape = list[Mono | None]
"""a value's shape: one monomial per axis, None where it is not known"""


def product(dims: Sequence[Mono]) -> Mono:
    out = Mono.const(1)
    for d in dims:
        out = out * d
    return out


class Dim(int):
    """A symbolic dimension: its representative size (the ``int``) and its fingerprint (:attr:`fp`)."""

    fp: int

    def __new__(cls, value: int, fp: int) -> Dim:
        out = super().__new__(cls, value)
        out.fp = int(fp)
        return out

    @classmethod
    def symbol(cls, name: str, value: int) -> Dim:
        """The symbol ``name`` at its representative ``value``."""
        return cls(value, symbol_value(name, value))

    def __repr__(self) -> str:
        return int.__repr__(self)

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        return (Dim, (int(self), self.fp))

    @property
    def sizes(self) -> dict[str, int] | None:
        """The representative size of each symbol of its fingerprint (None where it is no monomial of them)."""
        found = _factor(self.fp)
        return None if found is None else {name: size for (name, size), _k in found[1]}

    @property
    def mono(self) -> Mono | None:
        """The monomial of the symbols this dimension is (its fingerprint factored over the symbols' primes, the
        result checked at the symbols' representative sizes); None where it is no monomial (a sum, a floor
        division)."""
        found = _factor(self.fp)
        if found is None:
            return None
        coef, powers = found
        mono = Mono(coef, tuple(sorted((name, k) for (name, _size), k in powers)))
        sizes = {name: size for (name, size), _k in powers}
        return mono if mono.value(sizes) == int(self) else None


def _monotone(name: str) -> bool:
    """Whether the arithmetic ``name`` uses only sums and products of symbols and non-negative constants (``past +
    1``, ``s0 + s1``, ``2*s3``): its value at the symbols' fingerprints then exceeds its own size as theirs do, and
    reads as no constant (a difference or a quotient could: ``s1 - s0`` at sizes 64 and 832 fingerprints as 768)."""
    try:
        nodes = list(ast.walk(ast.parse(name.strip(), mode="eval")))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    allowed = (ast.Expression, ast.BinOp, ast.Add, ast.Mult, ast.Name, ast.Load, ast.Constant)
    return all(isinstance(n, allowed) and not (isinstance(n, ast.Constant) and (type(n.value) is not int or n.value < 0))
               for n in nodes)


def _next_prime(after: int) -> int:
    n = after + 1
    while any(n % d == 0 for d in range(2, int(n ** 0.5) + 1)):
        n += 1
    return n


class SymbolTable:
    """The primes of one run's symbols: (symbol, its representative size) -> its prime, in order of first use.
    Distinct symbols, and one symbol at two representative sizes, get distinct primes, so that a fingerprint names
    its symbols' sizes. One table per run (:func:`symbol_table`; :func:`eqsat.optimize` opens one): a run's
    fingerprints do not depend on what the process registered before it, and the primes stay small (the e-graph's
    ``sym`` analysis takes fingerprints up to :data:`FP_LIMIT`)."""

    def __init__(self) -> None:
        self.primes: dict[tuple[str, int], int] = {}
        self.symbol_of: dict[int, tuple[str, int]] = {}
        self.derived: dict[tuple[str, int], tuple[Derived, dict[str, int]]] = {}
        self.derived_of: dict[int, tuple[str, int]] = {}  # a derived symbol's fingerprint -> (it, its size)
        self.ties: dict[str, str] = {}
        """symbol -> the arithmetic of others it equals wherever the model runs, though its name does not say so
        (``total`` -> ``past + seq``: :mod:`eqsat.onnx.axes.tied`); :func:`derived_symbols` reads it as it reads a name"""

    def derive(self, values: Mapping[str, int]) -> None:
        """Registers the :func:`derived_symbols` among ``values`` (symbol -> representative size) that are their
        symbols' arithmetic at these sizes: each one's fingerprint is then that arithmetic of theirs, not a prime
        of its own, so that dynamo's attention mask of length ``past + 1`` and the Concat of a past and one new
        token have one fingerprint (the mask adds to the scores over that Concat)."""
        for name, f in derived_symbols(list(values)).items():
            sizes = {u: int(values[u]) for u in sorted(f.uses) if u in values}
            size = int(values[name])
            if len(sizes) != len(f.uses) or f(sizes) != size or not _monotone(self.ties.get(name, name)):
                continue
            fp = f({u: self.value(u, v) for u, v in sizes.items()})
            if fp == size or fp <= 0 or (fp % SCALE == 0 and fp // SCALE in self.symbol_of):
                continue  # would read as a constant or as another symbol: a prime of its own, as before
            self.derived[(name, size)] = (f, sizes)
            self.derived_of[fp] = (name, size)

    def value(self, name: str, size: int) -> int:
        """The fingerprint of the symbol ``name`` at the representative ``size``: SCALE times a prime of its own
        (the next one not :meth:`related` to the earlier symbols'); one registered by :meth:`derive`: its arithmetic
        of its symbols' fingerprints."""
        key = (name, int(size))
        if key in self.derived:
            f, sizes = self.derived[key]
            return f({u: self.value(u, v) for u, v in sizes.items()})
        if key not in self.primes:
            p = _next_prime(max(self.primes.values(), default=FIRST_PRIME - 1))
            while self.related(p, int(size)):
                p = _next_prime(p)
            self.primes[key], self.symbol_of[p] = p, key
        return SCALE * self.primes[key]

    def related(self, p: int, size: int) -> bool:
        """Whether a small combination of a new symbol (prime ``p``, representative ``size``) and an earlier one,
        ``a * p + b * x`` for a, b in +-1, +-2, is a multiple of a third (times 2 or more) at both the primes and the
        sizes: that size (a concatenation, a slice, a piece used twice) would fingerprint as a multiple of the third
        and pass :attr:`Dim.mono`'s check at the representative sizes, a monomial it is not (symbols at 3 and 5 on
        primes around the one of a symbol at 4). Sums of three symbols are not covered."""
        for x, (_name, x_size) in self.symbol_of.items():
            for a in (1, 2, -1, -2):
                for b in (1, 2, -1, -2):
                    total, total_size = a * p + b * x, a * size + b * x_size
                    if total <= 0:
                        continue
                    for y, (_n, y_size) in self.symbol_of.items():
                        if y != x and total % y == 0 and total // y >= 2 and total_size == (total // y) * y_size:
                            return True
        return False

    def factor(self, fp: int) -> tuple[Fraction, list[tuple[tuple[str, int], int]]] | None:
        """``fp`` as a coefficient times powers of the symbols' fingerprints (a :meth:`derive`\\d symbol's
        fingerprint as that symbol); None where it has none, or names one symbol at two sizes."""
        if fp in self.derived_of:
            return Fraction(1), [(self.derived_of[fp], 1)]
        rest, powers = Fraction(fp), []
        if rest == 0:
            return None
        for p, key in self.symbol_of.items():
            k = 0
            while rest.numerator % p == 0:
                rest, k = rest / p, k + 1
            while rest.denominator % p == 0:
                rest, k = rest * p, k - 1
            if k:
                powers.append((key, k))
                rest /= Fraction(SCALE) ** k
        names = [name for (name, _size), _k in powers]
        if not powers or len(set(names)) != len(names):
            return None
        return rest, powers


    def split(self, fp: int) -> tuple[int, list[tuple[tuple[str, int], int]]]:
        """``fp`` (a dimension no monomial fits) as a remainder times powers of the symbols' fingerprints that divide
        it: a floor of a quotient of the samples times the batch, ``frames*batch``, is the frames' fingerprint times
        the batch's. The remainder is ``fp`` itself where none divides it."""
        powers: list[tuple[tuple[str, int], int]] = []
        if fp <= 0:  # a padding that is 0 at the fingerprints, a difference: nothing divides out
            return fp, powers
        for p, key in self.symbol_of.items():
            k = 0
            while fp % (SCALE * p) == 0 and fp != SCALE * p:
                fp, k = fp // (SCALE * p), k + 1
            if k:
                powers.append((key, k))
        return fp, powers


_PROCESS = SymbolTable()
"""the table outside any run (a script importing a model itself)"""
_CURRENT: contextvars.ContextVar[SymbolTable | None] = contextvars.ContextVar("eqsat_symbols", default=None)
"""the table of the run in progress"""


def current() -> SymbolTable:
    """The symbol table in use: the run's (:func:`symbol_table`), else the process's."""
    table = _CURRENT.get()
    return table if table is not None else _PROCESS


def tie(ties: Mapping[str, str]) -> None:
    """Read each symbol of ``ties`` as its arithmetic of others (:attr:`SymbolTable.ties`) for the rest of the run
    in progress; outside a run's table (:func:`symbol_table`), nothing: the process's table is no run's."""
    table = _CURRENT.get()
    if table is not None:
        table.ties.update(ties)


@contextlib.contextmanager
def symbol_table(table: SymbolTable | None = None) -> Iterator[SymbolTable]:
    """A fresh :class:`SymbolTable` (or ``table``) in use for the block: every Dim made in it is read back
    (:attr:`Dim.mono`) in it. The previous table is in use again after it."""
    token = _CURRENT.set(table if table is not None else SymbolTable())
    try:
        yield current()
    finally:
        _CURRENT.reset(token)


def symbol_value(name: str, size: int) -> int:
    """The fingerprint of the symbol ``name`` at the representative ``size`` in the table in use
    (:meth:`SymbolTable.value`)."""
    return current().value(name, size)


def _factor(fp: int) -> tuple[Fraction, list[tuple[tuple[str, int], int]]] | None:
    return current().factor(fp)


def fp_of(d: int) -> int:
    """A dimension's fingerprint (a constant's is itself)."""
    return d.fp if isinstance(d, Dim) else int(d)


def fingerprint(shape: Iterable[int]) -> tuple[int, ...]:
    return tuple(fp_of(d) for d in shape)


FP_LIMIT = 2 ** 40
"""the largest fingerprint the e-graph's ``sym`` analysis takes: its rules multiply up to four dimensions in i64"""


def fingerprint_fits(shape: Iterable[int]) -> bool:
    """Whether every dimension's fingerprint is at most :data:`FP_LIMIT`."""
    return all(abs(fp_of(d)) <= FP_LIMIT for d in shape)


def is_symbolic(shape: Iterable[int]) -> bool:
    return any(isinstance(d, Dim) for d in shape)


def volume_fp(shape: Iterable[int]) -> int:
    """The number of elements of a value of ``shape`` where every symbol is at its fingerprint (:attr:`Dim.fp`):
    two shapes of one volume at every size of the symbols have the same."""
    return math.prod(d.fp if isinstance(d, Dim) else int(d) for d in shape)


def combine(values: Sequence[int], fps: Sequence[int]) -> tuple[int, ...]:
    """A shape from its sizes at the representative values and at the fingerprints: a :class:`Dim` where they
    differ, the plain size where they agree (a constant)."""
    return tuple(int(v) if int(v) == int(f) else Dim(int(v), int(f)) for v, f in zip(values, fps))


def from_mono(m: Mono, sizes: Mapping[str, int], fingerprints: Mapping[str, int] | None = None) -> int:
    """The dimension a monomial of the symbols is, the symbols at their representative ``sizes`` (a plain size for
    a constant); ``fingerprints``: the fingerprints of symbols that stand for dimensions no monomial fits."""
    fixed = fingerprints or {}
    value = m.value(sizes)
    fp = m.value({s: fixed[s] if s in fixed else symbol_value(s, sizes[s]) for s, _ in m.powers})
    if value.denominator != 1 or fp.denominator != 1:
        raise ValueError(f"{m.key()} is no whole size at the representative sizes and the fingerprints")
    return combine((int(value),), (int(fp),))[0]


def _attr_fp(a: object) -> object:
    return a.fp if isinstance(a, Dim) else a


def _at_fingerprints(op: str, attrs: tuple, shapes: Sequence[Shape]) -> tuple[int, ...] | None:
    try:
        return infer_shape(op, attrs, [fingerprint(s) for s in shapes])
    except ShapeError:
        return None


def reshape_sym(target: Sequence[int], shape: Sequence[int]) -> tuple[int, ...] | None:
    """The fingerprints of a reshape to the numbers ``target`` of a value of ``shape`` (the twin of
    :mod:`eqsat.egglog.reshape_sym`'s rules on shapes): its leading dimensions kept and the rest constant, or its
    leading dimensions flattened into one and the rest kept and constant, or its leading dimensions merged into one
    and the constant rest reshaped (``[batch, seq, 4, 8]`` to ``[batch*seq, 32]``); None otherwise."""
    t, a, s = [int(d) for d in target], [int(d) for d in shape], list(fingerprint(shape))
    if _volume(t) != _volume(a):
        return None
    for lead in range(min(len(a), len(t)) + 1):
        if t[:lead] == a[:lead] and s[lead:] == a[lead:]:
            return tuple(s[:lead] + t[lead:])
    q = len(t)
    if len(a) > q and t[1:] == a[len(a) - q + 1:] == s[len(a) - q + 1:]:
        return (_volume(s[:len(a) - q + 1]), *t[1:])
    for lead in range(2, len(a)):  # leading dimensions merged into one, the constant rest reshaped
        if q >= 2 and s[lead:] == a[lead:] and t[0] == _volume(a[:lead]):
            return (_volume(s[:lead]), *t[1:])
    return None


def _volume(dims: Sequence[int]) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def sym_shape(op: str, attrs: tuple, shapes: Sequence[Shape]) -> tuple[int, ...] | None:
    """The Python twin of the e-graph's ``sym`` analysis: the output shape of ``op`` at its operands' fingerprints,
    its attributes as the e-graph's terms hold them (numbers: a reshape target at the representative sizes); None
    where the operator is not valid there. A reshape's target of numbers is read by :func:`reshape_sym` (the
    e-graph's :mod:`eqsat.egglog.reshape_sym` rules); the ``sym`` of a term of the encoded program is set by the
    encoder (from :func:`infer`, which reads the IR's symbolic attributes), never derived."""
    numbers = tuple(int(a) if isinstance(a, int) else a for a in attrs)
    if op == "reshape":
        return reshape_sym(numbers, shapes[0])
    return _at_fingerprints(op, numbers, shapes)


def _fingerprints(op: str, attrs: tuple, shapes: Sequence[Shape]) -> tuple[int, ...] | None:
    """The output shape at the fingerprints of the operands and the attributes (a reshape's target of numbers
    read by :func:`reshape_sym`); None where the operator is not valid there."""
    fps = _at_fingerprints(op, tuple(_attr_fp(a) for a in attrs), shapes)
    if fps is None and op == "reshape":  # a target of numbers: its symbols read off the operand's where they can be
        fps = reshape_sym(attrs, shapes[0])
    return fps


def holds(op: str, attrs: tuple, shapes: Sequence[Shape]) -> bool:
    """Whether ``op`` on these operands is valid for every value of the symbols (at the fingerprints), not only at
    the representative sizes (an ``addnorm`` that adds a position table of batch 1 to a batch of 1)."""
    if not (any(is_symbolic(s) for s in shapes) or any(isinstance(a, Dim) for a in attrs)):
        return True
    return _fingerprints(op, attrs, shapes) is not None


def infer(op: str, attrs: tuple, shapes: Sequence[Shape]) -> tuple[int, ...]:
    """The output shape of ``op``: its shape function at the representative sizes and, where an operand or an
    attribute is symbolic, at the fingerprints of both, the two combined (:func:`combine`). Where the operator
    is not valid at the fingerprints (a reshape target or a bound that holds only at the representative sizes),
    the output is the representative shape, with no symbol (the importer writes reshape targets symbolically; a
    target of numbers is read as :func:`reshape_sym` reads it)."""
    shape = infer_shape(op, attrs, shapes)
    if not (any(is_symbolic(s) for s in shapes) or any(isinstance(a, Dim) for a in attrs)):
        return shape
    fps = _fingerprints(op, attrs, shapes)
    if fps is None or len(fps) != len(shape):
        return tuple(int(d) for d in shape)
    return combine(shape, fps)


__all__ = ["tie", "volume_fp", "FIRST_PRIME", "FP_LIMIT", "SCALE", "Derived", "Dim", "Mono", "derived_symbols", "follow", "SymShape", "product", "combine", "fingerprint", "fingerprint_fits", "fp_of",
           "from_mono", "holds", "infer", "is_symbolic", "reshape_sym", "sym_shape", "symbol_value"]
