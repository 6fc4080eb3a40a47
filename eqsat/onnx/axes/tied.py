"""Symbols of a model's interface tied to others, though their names do not say so.

An exporter names each dynamic axis; it need not say how the axes relate. A decoder with a key/value cache exported
with ``attention_mask: [batch, total]`` beside ``past_key_values.*: [batch, heads, past, dim]`` and ``input_ids:
[batch, seq]`` is fed ``total = past + seq`` (the mask covers the past and the new tokens). Read as three free
symbols, every run that changes one of them alone is refused: the sizes the import and the shape-generic writer read
off runs at further sizes are not fitted (a causal mask's index stays a number at the representative sizes, a decode
step's one new token), and the verification at further sizes is refused there too. Dynamo and optimum write such a
relation into the name (``past + 1``, ``past_sequence_length + sequence_length``), which
:func:`eqsat.dims.derived_symbols` reads.

A tie makes the run read a symbol as the arithmetic of others (:attr:`eqsat.dims.SymbolTable.ties`): its runs at
further sizes move it with them, its fingerprint is theirs, and the interface keeps the user's name. There are two:

- found (:func:`tied_symbols`): a length symbol ``T`` whose representative size is the sum of two others' (``A +
  B``), or of one other's and a small constant (``A + c``), where onnxruntime refuses the original with each of them
  changed alone, runs it with each of them and ``T`` changed together (an operand refused there is bounded by
  something else: the tie is another), and refuses it with ``T`` alone changed by each of :data:`ALONE`, up and
  down. The original then runs only where the tie holds, at the sizes tried; since runs sample, the check at further
  sizes also tries ``T`` alone changed (:meth:`eqsat.app.shaping.Shaping.check`), where a program written for the
  tie must match the original wherever it runs. Tried where the input sizes are given (``--input-shape``), on the
  session that checks them.
- read at its head (:attr:`Ties.head`): the original also runs with ``T`` longer, never shorter, and reads every
  input axis of ``T`` at its first ``A + B`` positions only (transformers slices its mask to the keys' length): a
  random feed with those axes longer, their tails random or zeros, gives the same outputs bit for bit. The run reads
  the tie, and each written program reads those inputs through a Slice to ``A + B``
  (:func:`eqsat.onnx.axes.heads.sliced_heads`), so it computes what the original computes with ``T`` longer too; the
  check at further sizes runs both there.
- assumed (``--assume-dim total=past+seq``, :func:`parse_assumed`, :func:`assumed_ties`): where the original also
  runs with ``T`` otherwise (shorter, or reading the mask's tail), reading the tie would change what the written
  model does at sizes a user may never feed; the user vouches for it, the report's assumptions name it, and a run
  that sees such a likely tie says so (:attr:`Ties.likely`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import onnx

from ...dims import Derived, derived_symbols, follow
from ...errors import InputError
from .interface import batch_symbols, length_symbols, symbols

STEP = 3
"""what an operand is changed by in the runs that test a tie"""
ALONE = (1, 2, 3, 5, 8)
"""what the tied symbol alone is changed by, up and down, in the runs that test a tie: the original must refuse
every one (a model that takes only even differences, or lengths of a multiple of 4, runs at some); it is also tried
at 1, a half and a quarter of its size (:func:`alone_sizes`: a length of 1 broadcasts, one that divides another
reshapes)"""


def alone_sizes(t: int) -> list[int]:
    """The sizes a symbol at ``t`` is tried at alone (:data:`ALONE`).

    >>> alone_sizes(8)
    [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 13, 16]
    """
    sizes = {t + d * sign for d in ALONE for sign in (1, -1)} | {1, t // 2, t // 4}
    return sorted(v for v in sizes if v >= 1 and v != t)
MAX_CONSTANT = 16
"""the largest constant ``c`` of a tie ``T = A + c`` tried (a decode step of one to a few new tokens)"""


@dataclass
class Ties:
    """What :func:`tied_symbols` found: symbol -> the arithmetic of others it is."""

    found: dict[str, str] = field(default_factory=dict)
    """ties the original runs only under (at every size tried)"""
    likely: dict[str, str] = field(default_factory=dict)
    """ties the original needs its operands to keep (each changed alone is refused) but not the symbol: it also runs
    at other sizes of it (a mask longer than the keys, sliced)"""
    head: dict[str, str] = field(default_factory=dict)
    """likely ties where the original runs with the symbol longer only, and reads its inputs' axes of that symbol at
    their first (arithmetic) positions only (transformers' mask, sliced to the keys): read so by the run, its programs
    reading those inputs through a Slice to that length (:func:`eqsat.onnx.axes.heads.sliced_heads`)"""


def _candidates(target: str, others: list[str], values: Mapping[str, int]) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(expression, operands) of each tie ``target`` could be at ``values``: sums of two others first."""
    t = values[target]
    for a, b in combinations(others, 2):
        if values[a] + values[b] == t:
            yield f"{a} + {b}", (a, b)
    for a in others:
        if 0 < t - values[a] <= MAX_CONSTANT:
            yield f"{a} + {t - values[a]}", (a,)


def _equal_classes(group: list[str], values: Mapping[str, int],
                   places: Mapping[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The symbols of ``group`` of one size, each class in the group's order and no two members on one input (an
    image's sides are no class): the lengths of the ids, the mask and the token types, each named apart."""
    out: list[list[str]] = []
    for s in group:
        inputs = {name for name, _ in places[s]}
        home = next((c for c in out if values[c[0]] == values[s]
                     and not any(inputs & {name for name, _ in places[m]} for m in c)), None)
        if home is None:
            out.append([s])
        else:
            home.append(s)
    return [c for c in out if len(c) >= 2]


def _equal_reading(members: list[str], values: Mapping[str, int],
                   runs: Callable[[dict[str, int]], bool]) -> tuple[list[str], dict[str, str]]:
    """(the members tied, each later one's reading: "found", "longer" or "likely") of a class of equal sizes: the
    members that run changed alone by :data:`STEP` vary apart and are left out (an encoder's length beside a
    decoder's), until none does; the rest must run changed together; each later one is then read as
    :func:`_reading` reads a tie, changed alone by :data:`ALONE`."""
    members = list(members)
    while len(members) >= 2:
        apart = [m for m in members if runs({**values, m: values[m] + STEP})]
        if not apart:
            break
        members = [m for m in members if m not in apart]
    if len(members) < 2 or not runs({**values, **{m: values[m] + STEP for m in members}}):
        return [], {}
    first = values[members[0]]
    if any(runs({**values, members[0]: v}) for v in alone_sizes(first)):  # (the ids' length at 1, broadcast)
        return members, dict.fromkeys(members[1:], "likely")
    readings: dict[str, str] = {}
    for m in members[1:]:
        t = values[m]
        if any(runs({**values, m: v}) for v in alone_sizes(t) if v < t):
            readings[m] = "likely"
        else:
            readings[m] = "longer" if any(runs({**values, m: v}) for v in alone_sizes(t) if v > t) else "found"
    return members, readings


def _reading(target: str, operands: tuple[str, ...], values: Mapping[str, int],
             runs: Callable[[dict[str, int]], bool], others: Sequence[str] = ()) -> str | None:
    """"found" where the model refuses each operand changed alone (by :data:`STEP`) and runs with each of them and
    ``target`` changed together (an operand refused there is bounded by something else: a position table), and
    refuses ``target`` changed alone by every one of :data:`ALONE`, up and down; "longer" where it runs at one of
    those but at none below; "likely" where it runs below, or with one of ``others`` (the other lengths) and
    ``target`` changed together (the tie may be another: ``past + 1`` at one new token where ``past + seq`` holds,
    a slice of one broadcast); else None."""
    for x in operands:
        alone = {**values, x: values[x] + STEP}
        if runs(alone):
            return None  # they vary apart
        if not runs({**alone, target: values[target] + STEP}):
            return None
    t = values[target]
    if any(runs({**values, target: v}) for v in alone_sizes(t) if v < t):
        return "likely"
    if any(runs({**values, x: values[x] + STEP, target: t + STEP}) for x in others if x not in operands):
        return "likely"  # another length moved with it runs too (past + 1 read at one new token, where past + seq is)
    if any(runs({**values, target: v}) for v in alone_sizes(t) if v > t):
        return "longer"
    return "found"


def _cached(runs: Callable[[dict[str, int]], bool]) -> Callable[[dict[str, int]], bool]:
    """``runs``, each set of sizes run once."""
    seen: dict[tuple[tuple[str, int], ...], bool] = {}

    def once(at: dict[str, int]) -> bool:
        key = tuple(sorted(at.items()))
        if key not in seen:
            seen[key] = runs(at)
        return seen[key]
    return once


def tied_symbols(model: onnx.ModelProto, values: Mapping[str, int], runs: Callable[[dict[str, int]], bool],
                 given: Mapping[str, str] | None = None, reads_head: Callable[[str], bool] | None = None) -> Ties:
    """The model's length symbols (:func:`eqsat.onnx.axes.interface.length_symbols`) tied to others at ``values`` (their
    representative sizes), tried by ``runs`` (whether the original runs at those symbols' sizes); ``given``: ties
    already read (assumed), not tried again, their operands no symbol to tie; ``reads_head``: whether the original
    reads a symbol's axes at their first ``values[symbol]`` positions only (run where it runs with the symbol longer
    only: :attr:`Ties.head`; None: not tried). A symbol tied is no operand of another's tie. Then symbols of one
    size on different inputs (the ids', the mask's and the token types' lengths, or their batches, each named apart)
    are tried as a class (:func:`_equal_reading`), each later one tied to the first. No run is made where no size is
    another's sum, nor any two inputs' symbols of one size."""
    given, runs = dict(given or {}), _cached(runs)
    syms = symbols(model)
    lengths = [s for s in length_symbols(model) if s in values and s not in given and s.isidentifier()]
    batches = [s for s in batch_symbols(model) if s in values and s not in given and s.isidentifier()]
    out = Ties()
    used = {u for e in given.values() for u in expression_names(e)}
    for target in lengths:
        if target in used:
            continue
        others = [s for s in lengths if s != target and s not in out.found and s not in out.head]
        for expression, operands in _candidates(target, others, values):
            reading = _reading(target, operands, values, runs, [s for s in lengths if s != target])
            if reading == "found" or (reading == "longer" and reads_head is not None and reads_head(target)):
                (out.found if reading == "found" else out.head)[target] = expression
                out.likely.pop(target, None)
                used.update(operands)
                break
            if reading in ("likely", "longer"):
                out.likely.setdefault(target, expression)
    for group in (lengths, batches):
        free = [s for s in group if s not in used and s not in out.found and s not in out.head]
        for members in _equal_classes(free, values, syms):
            tied, readings = _equal_reading(members, values, runs)
            for m, reading in readings.items():
                if reading == "found" or (reading == "longer" and reads_head is not None and reads_head(m)):
                    (out.found if reading == "found" else out.head)[m] = tied[0]
                else:
                    out.likely[m] = tied[0]
    return out


def expression_names(expression: str) -> set[str]:
    """The symbols an arithmetic ``expression`` reads."""
    return {n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)}


def _arithmetic(expression: str) -> Derived | None:
    """``expression`` read as :func:`eqsat.dims.derived_symbols` reads a name (``past + seq``); None where it is no
    integer arithmetic of symbols."""
    return derived_symbols([*sorted(expression_names(expression)), expression]).get(expression)


def check_assumed(assumed: object) -> None:
    """InputError unless ``assumed`` is ``--assume-dim``'s mapping (symbol -> integer arithmetic of others)."""
    if not isinstance(assumed, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in assumed.items()):
        raise InputError(f"assume_dims {assumed!r}: give a dict of symbol -> arithmetic of other symbols "
                         "({'total': 'past + seq'})")
    parse_assumed([f"{k}={v}" for k, v in assumed.items()])


def parse_assumed(specs: Sequence[str] | None) -> dict[str, str]:
    """``--assume-dim SYMBOL=EXPR`` flags: symbol -> the integer arithmetic of other symbols it is assumed to be.

    >>> parse_assumed(["total=past+seq", "mask = past + 1"])
    {'total': 'past + seq', 'mask': 'past + 1'}
    """
    out: dict[str, str] = {}
    for spec in specs or []:
        name, sep, text = spec.partition("=")
        name = name.strip()
        try:
            expression = ast.unparse(ast.parse(text.strip(), mode="eval"))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            expression = ""
        if not sep or not name.isidentifier() or not expression or _arithmetic(expression) is None \
                or name in expression_names(expression):
            raise InputError(f"--assume-dim {spec!r}: expected SYMBOL=EXPR, a dynamic dimension's name and integer "
                             "arithmetic of others' (e.g. total=past+seq; eqsat info lists the names)")
        if name in out:
            raise InputError(f"--assume-dim {spec!r}: {name} is given twice; give each symbol once")
        out[name] = expression
    return out


def assumed_ties(model: onnx.ModelProto, assumed: Mapping[str, str], values: Mapping[str, int],
                 given: Sequence[str]) -> dict[str, str]:
    """The ``--assume-dim`` ties (``assumed``) that apply to ``model``: InputError where one names a symbol the
    model does not have, or where the sizes given (``values``; ``given``: the symbols the user's shapes size) do
    not satisfy it."""
    syms = symbols(model)
    free = set(syms) - set(derived_symbols(list(syms)))
    if assumed and not free:
        raise InputError("--assume-dim: the model has no free dynamic dimensions; it applies to ONNX models whose "
                         "inputs' sizes are named (eqsat info lists them)")
    for name, expression in assumed.items():
        chained = sorted(expression_names(expression) & set(assumed))
        if chained:
            raise InputError(f"--assume-dim {name}={expression}: {', '.join(chained)} is assumed too; write each "
                             "assumed dimension in free ones only")
        unknown = sorted(({name} | expression_names(expression)) - free)
        if unknown:
            raise InputError(f"--assume-dim {name}={expression}: {', '.join(unknown)} "
                             f"{'is' if len(unknown) == 1 else 'are'} not a free dynamic dimension of the model; its "
                             f"free dimensions: {', '.join(sorted(free))}")
        arithmetic = _arithmetic(expression)
        if arithmetic is None:
            raise InputError(f"--assume-dim {name}={expression}: give integer arithmetic of other dimensions")
        want = arithmetic(values)
        if name in given and values.get(name) != want:
            raise InputError(f"--assume-dim {name}={expression}: the input shapes give {name} = {values.get(name)} "
                             f"where {expression} = {want}; give sizes that satisfy it")
    return dict(assumed)


def assumed_values(values: Mapping[str, int], ties: Mapping[str, str]) -> dict[str, int]:
    """``values`` with each tied symbol at its arithmetic of the others'."""
    derived = {name: f for name, e in ties.items() if (f := _arithmetic(e)) is not None}
    return follow(values, derived)


__all__ = ["ALONE", "MAX_CONSTANT", "alone_sizes", "STEP", "Ties", "assumed_ties", "assumed_values", "check_assumed", "expression_names",
           "parse_assumed", "tied_symbols"]
