"""The memory a run of a model takes at given input shapes, estimated before it runs, and the runs a run of eqsat
leaves out because they would not fit.

eqsat runs the user's model (and prefixes of it) at sizes besides the ones it is tuned at: shape probes at a batch
of 5 and twice the sequence, verification at a batch of 4. For most models such a run takes megabytes. A
mixture-of-experts decoder whose experts gather their weights per token (transformers' ``batched_mm``: a
``[tokens*top_k, 3072, 384]`` tensor per layer) takes 2 GB at a batch of 1 and 11.5 GB at a batch of 5, and two
such sessions alive at once took a 24 GB machine down. :class:`Limit` estimates a run's peak before it is made
(:func:`activation_bytes`: the values alive at once as the nodes run in order, their sizes from onnx's shape
inference at those shapes) and refuses one whose estimate is over its budget, but never the run at the sizes
tuned at, nor one estimated no larger; where a :class:`Limit` is current (:data:`LIMIT`, set for a run by
:func:`limited`), :func:`eqsat.onnx.axes.interface.zero_feeds` raises :class:`TooLarge` for such shapes, which every
probe reads as sizes the model cannot run at (a prefix of the model that a probe runs is estimated itself: the
position ids of 4096 tokens are cheap where the model at 4096 tokens is not), and the check at further sizes
(:class:`eqsat.verification.ShapesVerifier`) skips them, saying so. What follows from that depends on the memory the
machine has: a shape fit that a run at twice a size checked goes unchecked there, and a table of positions whose
largest length is searched for (:mod:`eqsat.generic.tables`) may stop shorter (its guard computes the rest as the
original does). The runs on random inputs are not estimated (the check at the tuned sizes, a guard's check beyond
its table).

The estimate leaves out the weights (the run's pool holds them once, :mod:`eqsat.onnx.pool`) and counts a value
whose shape inference cannot size as nothing. Measured on that decoder at a batch of 3: estimated 3.6 GB, the run's
peak 3.5 GB above the session's resident memory before it.

>>> import onnx.helper as h
>>> g = h.make_graph([h.make_node("Tile", ["x", "r"], ["t"]), h.make_node("ReduceSum", ["t"], ["y"])], "g",
...     [h.make_tensor_value_info("x", 1, ["n", 1000])], [h.make_tensor_value_info("y", 1, None)],
...     [h.make_tensor("r", 7, [2], [1, 250])])
>>> m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
>>> activation_bytes(m, {"x": (1, 1000)}), activation_bytes(m, {"x": (4, 1000)})  # x, its tile, the sum: 4 bytes each
(1004004, 4016004)
>>> lim = Limit(m, budget=2_000_000, tuned={"x": (1, 1000)})
>>> lim.check({"x": (1, 1000)}); lim.check({"x": (4, 1000)})
Traceback (most recent call last):
...
eqsat.onnx.footprint.TooLarge: a run there would take about 4.02 MB of memory (this run leaves 2 MB to one: eqsat.onnx.footprint)
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import onnx

from ..memory import read as read_memory

SHARE = 0.4
"""the share of the memory left when a run of eqsat starts that one run of the model may take (:class:`Limit`):
the sessions that run at further sizes hold no memory between runs (:func:`eqsat.onnx.io.session`), and the
estimate leaves out what shape inference cannot size"""
SMALL_INIT = 64
"""initializers of at most this many entries keep their values in the copy shape inference reads (a Reshape's
target, a Slice's ends); larger ones are read as inputs of their type and shape"""
GROWTH_POWER = 2
"""a value's size grows at most as this power of the growth of the largest-growing input (attention's scores, a
sequence's square; the further sizes change one symbol at a time): where the estimate at the tuned shapes, grown
so, fits, no estimate is made"""

Shapes = Mapping[str, Sequence[int]]


class TooLarge(Exception):
    """A run at shapes whose estimated memory is over the run's budget (:class:`Limit`)."""

    def __init__(self, needed: int, budget: int):
        super().__init__(f"a run there would take about {gb(needed)} of memory (this run leaves {gb(budget)} "
                         "to one: eqsat.onnx.footprint)")
        self.needed, self.budget = needed, budget

    def short(self) -> str:
        """What a report says of a size left out.

        >>> TooLarge(9_600_000_000, 5_200_000_000).short()
        'not run: about 9.6 GB of memory, over the 5.2 GB a run may take here'
        """
        return f"not run: about {gb(self.needed)} of memory, over the {gb(self.budget)} a run may take here"


def gb(n: int) -> str:
    """``n`` bytes as people read them.

    >>> gb(9_100_000_000), gb(300 << 20), gb(13_000)
    ('9.1 GB', '315 MB', '0.013 MB')
    """
    return f"{n / 1e6:.3g} MB" if n < 1e9 else f"{n / 1e9:.1f} GB"


def _light(model: onnx.ModelProto, shapes: Shapes) -> onnx.ModelProto:
    """A copy of ``model`` without its weights' values (each large initializer an input of its type and shape)
    and with its inputs at ``shapes``."""
    out = onnx.ModelProto()
    out.ir_version, out.producer_name = model.ir_version, model.producer_name
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    g = out.graph
    g.node.extend(model.graph.node)
    g.output.extend(model.graph.output)
    inits = set()
    for t in model.graph.initializer:
        inits.add(t.name)
        if int(np.prod(t.dims)) <= SMALL_INIT and t.data_location != onnx.TensorProto.EXTERNAL:
            g.initializer.append(t)
        else:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = shapes.get(vi.name)
        if shape is None or not vi.type.HasField("tensor_type"):
            g.input.append(vi)
        else:
            g.input.append(onnx.helper.make_tensor_value_info(vi.name, tt.elem_type, list(shape)))
    return out


def _bytes(vi: onnx.ValueInfoProto) -> int:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape") \
            or any(not d.HasField("dim_value") for d in tt.shape.dim):
        return 0
    try:
        size = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0
    return size * math.prod(d.dim_value for d in tt.shape.dim)


def _reads(node: onnx.NodeProto) -> set[str]:
    """The values ``node`` reads, those its subgraphs read from outside them included."""
    out = {i for i in node.input if i}
    for attr in node.attribute:
        for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in g.node:
                out |= _reads(inner)
    return out


def _inferred(model: onnx.ModelProto, shapes: Shapes) -> onnx.ModelProto:
    """A weightless copy of ``model`` (:func:`_light`) with its values' shapes inferred at the input ``shapes``."""
    light = _light(model, shapes)
    try:
        return onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception:  # noqa: BLE001 - an operator shape inference refuses: the inputs' sizes alone
        return light


def static_shapes(model: onnx.ModelProto, shapes: Shapes) -> dict[str, tuple[int, ...]]:
    """The shapes onnx's inference (its size computations propagated) gives ``model``'s values at the input
    ``shapes``: those it sizes fully."""
    out: dict[str, tuple[int, ...]] = {}
    inferred = _inferred(model, shapes).graph
    for vi in [*inferred.value_info, *inferred.output]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape") \
                and all(d.HasField("dim_value") for d in tt.shape.dim):
            out.setdefault(vi.name, tuple(int(d.dim_value) for d in tt.shape.dim))
    return out


def activation_bytes(model: onnx.ModelProto, shapes: Shapes) -> int:
    """The most bytes of the inputs and computed values alive at once when ``model``'s nodes run in order at the
    input ``shapes`` (a value freed after the last node that reads it; the inputs and outputs kept); the weights are
    not counted, nor a value onnx's shape inference cannot size."""
    inferred = _inferred(model, shapes)
    inits = {t.name for t in model.graph.initializer}
    size = {vi.name: _bytes(vi) for vi in [*inferred.graph.value_info, *inferred.graph.output,
                                             *inferred.graph.input]}
    feeds = sum(size.get(vi.name, 0) for vi in model.graph.input if vi.name not in inits)
    reads = [_reads(n) for n in model.graph.node]
    kept = {o.name for o in model.graph.output} | {vi.name for vi in model.graph.input}
    last: dict[str, int] = {}
    for k, names in enumerate(reads):
        for name in names:
            last[name] = k
    live = peak = feeds
    for k, node in enumerate(model.graph.node):
        live += sum(size.get(o, 0) for o in node.output if o)
        peak = max(peak, live)
        live -= sum(size.get(name, 0) for name in reads[k] if last.get(name) == k and name not in kept
                    and name not in inits)
        live -= sum(size.get(o, 0) for o in node.output if o and o not in last and o not in kept)
    return peak


class Limit:
    """The runs that fit a ``budget`` (bytes; by default :data:`SHARE` of the memory left now, none where that
    cannot be read), estimated on ``model`` (the user's, :meth:`watch`; None: every run fits): those at the
    ``tuned`` input shapes, and every run estimated at most as large, always fit (the run tuned at is the one the
    user runs). The estimates on ``model`` are kept per shapes; an estimate is not made at all where the tuned
    one, grown by :data:`GROWTH_POWER` of the inputs' growth, fits (not where an input was empty or absent there:
    an empty past key/value cache)."""

    def __init__(self, model: onnx.ModelProto | None = None, budget: int | None = None,
                 tuned: Shapes | None = None):
        if budget is None:
            memory = read_memory()
            budget = int(SHARE * memory.available) if memory is not None else 1 << 62
        self.budget = budget
        self.model: onnx.ModelProto | None = None
        self.watch(model, tuned)

    def watch(self, model: onnx.ModelProto | None, tuned: Shapes | None = None) -> None:
        """Estimate on ``model`` from now on, its runs at ``tuned`` (its inputs' shapes; an input not named: its
        fixed sizes, a dynamic one at 1) fitting whatever they take."""
        self.model = model
        self._known: dict[tuple, int] = {}
        self._base: tuple[dict[str, int], int] | None = None
        self.tuned = 0
        """the estimate at the tuned shapes"""
        if model is not None and tuned is not None:
            shapes = {**_fixed(model), **tuned}
            self.tuned = self.estimate(shapes)
            self._base = {k: math.prod(v) for k, v in shapes.items()}, self.tuned

    @property
    def allowed(self) -> int:
        """The most a run may take: the budget, or the run at the tuned shapes where it takes more."""
        return max(self.budget, self.tuned)

    def estimate(self, shapes: Shapes, model: onnx.ModelProto | None = None) -> int:
        """The estimated bytes of a run at ``shapes`` (0 without a model) of ``model`` (by default the one
        watched; another, a prefix of it that a probe runs, is estimated itself, where the bound from the tuned
        estimate does not already say it fits)."""
        if self.model is None:
            return 0
        numel = {k: math.prod(v) for k, v in shapes.items()}
        if self._base is not None:
            base, at = self._base
            if all(base.get(k, 0) > 0 for k in numel):
                growth = max([1.0] + [numel[k] / base[k] for k in numel])
                bound = int(at * growth ** GROWTH_POWER)
                if bound <= self.allowed:
                    return bound
        if model is not None and model is not self.model:
            return activation_bytes(model, shapes)
        key = tuple(sorted((k, tuple(v)) for k, v in shapes.items()))
        if key not in self._known:
            self._known[key] = activation_bytes(self.model, shapes)
        return self._known[key]

    def check(self, shapes: Shapes, model: onnx.ModelProto | None = None) -> None:
        """:class:`TooLarge` where a run of ``model`` (by default the one watched) at ``shapes`` would not fit."""
        needed = self.estimate(shapes, model)
        if needed > self.allowed:
            raise TooLarge(needed, self.allowed)


def _fixed(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Each input's shape with its fixed sizes, a dynamic one at 1."""
    inits = {t.name for t in model.graph.initializer}
    return {vi.name: [d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim]
            for vi in model.graph.input if vi.name not in inits and vi.type.HasField("tensor_type")}


LIMIT: contextvars.ContextVar[Limit | None] = contextvars.ContextVar("LIMIT", default=None)
"""the run's :class:`Limit` (:func:`limited`); None: every run is made"""


@contextlib.contextmanager
def limited(model: onnx.ModelProto | None = None, budget: int | None = None,
            tuned: Shapes | None = None) -> Iterator[Limit]:
    """The runs made while this holds limited by one :class:`Limit` (estimated on ``model``, or on the one
    :func:`watch` gives it later)."""
    lim = Limit(model, budget, tuned)
    token = LIMIT.set(lim)
    try:
        yield lim
    finally:
        LIMIT.reset(token)


def watch(model: onnx.ModelProto, tuned: Shapes | None = None) -> None:
    """The current :class:`Limit`'s runs estimated on ``model`` from now on (the user's model, once loaded), those
    at the ``tuned`` input shapes always made (:meth:`Limit.watch`); nothing where none is current."""
    lim = LIMIT.get()
    if lim is not None:
        lim.watch(model, tuned)


def check(shapes: Shapes, model: onnx.ModelProto | None = None) -> None:
    """:class:`TooLarge` where the current :class:`Limit` says a run of ``model`` (by default the one it watches)
    at ``shapes`` would not fit; nothing where none is current."""
    lim = LIMIT.get()
    if lim is not None:
        lim.check(shapes, model)


__all__ = ["GROWTH_POWER", "LIMIT", "Limit", "SHARE", "SMALL_INIT", "TooLarge", "activation_bytes", "check", "gb", "static_shapes",
           "limited", "watch"]
