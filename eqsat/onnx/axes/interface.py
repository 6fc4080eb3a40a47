"""A model's interface: its inputs and outputs (names, element types, dimensions with their ``dim_param``
symbols), the shapes a run tunes at and the shapes its result is verified at.

A dynamic dimension is a symbol: its ``dim_param`` name, or for an unnamed one ``INPUT:AXIS``. Two inputs naming the
same ``dim_param`` share the symbol (they take one value). A run tunes and measures at one **representative**
shape: the user's ``--input-shape`` where given, else :data:`BATCH_DEFAULT` for a batch-like symbol,
:data:`IMAGE_DEFAULT` for an image's side and :data:`OTHER_DEFAULT` for any other (:func:`symbol_values`), a default
the model refuses moved to a size it runs at (:func:`runnable_values`), the shapes there by :func:`shapes_at`; the result is verified there and at
:func:`probe_values` of each symbol, one symbol changed at a time.

>>> is_batch_like("batch_size"), is_batch_like("N"), is_batch_like("sequence")
(True, True, False)
>>> probe_values(1, batch=True), probe_values(128, batch=False)
([2, 3], [1, 37, 256, 127])
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort

from ...dims import derived_symbols, follow
from ...errors import InputError
from .. import footprint
from ..folding import indices_read
from ..io import session

BATCH_DEFAULT = 1
"""the representative value of a batch-like symbol (a ``dim_param`` named like a batch, or an unnamed axis 0)"""
IMAGE_DEFAULT = 224
"""the representative value of an image's side (:func:`is_image_side`): the size vision models are trained and fed
at most (ImageNet's 224), where a power of two is often refused (Swin's windows of 7 patches of 4) or runs another
path (its padding)"""
OTHER_DEFAULT = 128
"""the representative value of every other symbol (a sequence, audio samples, ...)"""
BATCH_PROBES = (2, 3, 4)
"""the further values a batch-like symbol is verified at: the first two that are not its representative value"""
MIN_DEFAULT = 8
"""a default size the model refuses is halved down to this (a position table shorter than 128)"""
MAX_DEFAULT = 4096
"""... and, where no smaller size runs, doubled up to this (an audio waveform's samples: a convolutional front-end
needs hundreds)"""
ROUNDER = (Fraction(1), Fraction(5, 4))
"""the defaults doubled as they are, then from 5/4 of them where no doubling runs (128 samples: 160, 320, 640, ...; a
speech model that frames its samples by 80 runs at no power of two)"""
OTHER_PROBES = (1, 37, 256, 64)
"""the further values any other symbol is verified at: the first three that are not its representative value; a
symbol represented above them (audio samples) also at two sizes near its own (:func:`probe_values`)"""

QUIET = ort.RunOptions()
QUIET.log_severity_level = 4  # a size the model refuses is an answer here, not an error to print

_BATCH = re.compile(r"^(n|b|bs|batch|batch_?size|batch_?dim|.*batch.*)$", re.IGNORECASE)
_LISTED = re.compile(r"^(.+_dynamic_axes_\d+|s\d+)$")
"""the name TorchScript gives an axis listed without a name (``dynamic_axes={"input_ids": [0, 1]}``:
``input_ids_dynamic_axes_1``), and the one torch.export gives a dimension it made symbolic itself (``s33``: a
``Dim.AUTO`` or a listed axis, torch's default exporter): it says nothing of what the axis is, so it is read as an
unnamed one (axis 0 the batch)"""
_NOT_SIDE = re.compile(r"seq|past|total|cache|kv|head|token|len", re.IGNORECASE)
"""a symbol named like a sequence, a cache or a head's size is not an image's side, whatever its input's shape"""
_CACHE = re.compile(r"past|cache|present", re.IGNORECASE)
"""an input named like a key/value cache is not an image (``[batch, 2, past, 64]``: two key/value heads)"""

Shapes = dict[str, tuple[int, ...]]


def is_batch_like(symbol: str) -> bool:
    """Whether ``symbol`` names a batch axis (``batch``, ``batch_size``, ``N``, ``B``, ``bs``, ...)."""
    return bool(_BATCH.match(symbol))


@dataclass(frozen=True)
class Port:
    """One input or output of the interface: name, ONNX element type, dimensions (None: no shape declared)."""

    name: str
    elem_type: int
    dims: tuple[int | str, ...] | None
    """each a size, or the symbol it is"""

    def shown(self) -> str:
        dims = "?" if self.dims is None else ",".join(map(str, self.dims))
        return f"{self.name}:{onnx.TensorProto.DataType.Name(self.elem_type).lower()}[{dims}]"


def _port(vi: onnx.ValueInfoProto, declared_only: bool = False) -> Port:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return Port(vi.name, tt.elem_type, None)
    dims: list[int | str] = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):  # a static size (0 included: the importer refuses it by name)
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param if d.dim_param or declared_only else f"{vi.name}:{k}")
    return Port(vi.name, tt.elem_type, tuple(dims))


def interface(model: onnx.ModelProto) -> tuple[tuple[Port, ...], tuple[Port, ...]]:
    """(inputs, outputs) as declared: the graph inputs that are not initializers, and the outputs; an unnamed
    dynamic dimension shows as ``""``."""
    inits = {i.name for i in model.graph.initializer}
    return (tuple(_port(vi, True) for vi in model.graph.input if vi.name not in inits),
            tuple(_port(vi, True) for vi in model.graph.output))


def interface_difference(original: onnx.ModelProto, other: onnx.ModelProto) -> str:
    """What differs between the two models' interfaces (names, element types, dimensions and ``dim_param``
    names), or "" when they are the same."""
    (i1, o1), (i2, o2) = interface(original), interface(other)
    for kind, a, b in (("inputs", i1, i2), ("outputs", o1, o2)):
        if a != b:
            shown_a = ", ".join(p.shown() for p in a)
            shown_b = ", ".join(p.shown() for p in b)
            return f"{kind} [{shown_b}] instead of the original's [{shown_a}]"
    return ""


def symbols(model: onnx.ModelProto) -> dict[str, list[tuple[str, int]]]:
    """Each symbol of the model's inputs -> the (input, axis) places it sizes, in input order."""
    inits = {i.name for i in model.graph.initializer}
    out: dict[str, list[tuple[str, int]]] = {}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        port = _port(vi)
        for k, d in enumerate(port.dims or ()):
            if isinstance(d, str):
                out.setdefault(d, []).append((vi.name, k))
    return out


def _batch(symbol: str, places: list[tuple[str, int]]) -> bool:
    return _batch_axis(symbol, places[0][1])


def _batch_axis(symbol: str, axis: int) -> bool:
    """Whether ``symbol`` at ``axis`` is a batch: by its name, or where it has none (unnamed, or TorchScript's name
    of a listed axis) at axis 0."""
    if not symbol or ":" in symbol or _LISTED.match(symbol):
        return axis == 0
    return is_batch_like(symbol)


_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


def is_image_side(model: onnx.ModelProto, places: Sequence[tuple[str, int]]) -> bool:
    """Whether a symbol sizing ``places`` (input, axis) is an image's side: every place is a spatial axis of a 4-D
    floating-point input with 1 to 4 channels, declared static, and both its sides dynamic (axes 2 and 3 of
    ``[N, C, H, W]``, or 1 and 2 of channels-last ``[N, H, W, C]``; a cache ``[batch, heads, past, 64]`` is not
    one, nor is one with up to four heads where its input or the symbol is named like a cache or a sequence:
    ``past_key_values.0.key`` of ``[batch_size, 2, past_sequence_length, kv_cache_dim]``)."""
    ports = {p.name: p for p in interface(model)[0]}

    def spatial(name: str, axis: int) -> bool:
        port = ports.get(name)
        if port is None or port.elem_type not in _FLOATS or port.dims is None or len(port.dims) != 4:
            return False
        if _CACHE.search(name) or any(isinstance(d, str) and _NOT_SIDE.search(d) for d in port.dims[1:]):
            return False
        for k, sides in ((1, (2, 3)), (3, (1, 2))):
            channels = port.dims[k]
            if isinstance(channels, int) and 1 <= channels <= 4 and axis in sides \
                    and all(isinstance(port.dims[j], str) for j in sides):
                return True
        return False

    return bool(places) and all(spatial(name, axis) for name, axis in places)


def default_value(model: onnx.ModelProto, symbol: str, places: Sequence[tuple[str, int]]) -> int:
    """The representative value of a free symbol the user did not size: :data:`BATCH_DEFAULT` for a batch-like
    one, :data:`IMAGE_DEFAULT` for an image's side, :data:`OTHER_DEFAULT` for any other."""
    if _batch(symbol, list(places)):
        return BATCH_DEFAULT
    return IMAGE_DEFAULT if is_image_side(model, places) else OTHER_DEFAULT


def _solve(f: Callable[[Mapping[str, int]], int], known: Mapping[str, int], free: str, target: int) -> int | None:
    """The value of ``free`` at which ``f`` (linear in it; the other symbols at ``known``) is ``target``, or None."""
    try:
        b = f({**known, free: 0})
        a = f({**known, free: 1}) - b
    except (ZeroDivisionError, NameError):  # not linear in it (a divisor), or it reads a symbol not known
        return None
    if a == 0 or (target - b) % a:
        return None
    x = (target - b) // a
    return x if x >= 0 and f({**known, free: x}) == target else None


def symbol_values(model: onnx.ModelProto, given: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """The representative value of each symbol: from the user's shapes (``given``: input -> full shape) where one
    sizes it, else the documented default; a :func:`derived_symbols` one from the symbols it is written in (given
    only through it, a symbol it is linear in is solved for). Raises InputError when two given shapes disagree on
    a symbol, or give a derived one another value than its symbols'."""
    values: dict[str, int] = {}
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    for sym, places in syms.items():
        for name, axis in places:
            if name in given and axis < len(given[name]):
                v = int(given[name][axis])
                if sym in values and values[sym] != v:
                    raise InputError(f"--input-shape gives the dimension {sym!r} two sizes, {values[sym]} and {v}; "
                                     "inputs that share a dim_param take one size")
                values[sym] = v
    for sym, f in derived.items():  # a cache's length given, its past not: the past follows
        unknown = sorted(f.uses - set(values))
        if sym in values and len(unknown) == 1:
            solved = _solve(f, values, unknown[0], values[sym])
            if solved is not None:
                values[unknown[0]] = solved
    for sym, places in syms.items():
        if sym not in derived and sym not in values:
            values[sym] = default_value(model, sym, places)
    for sym, f in derived.items():
        v = f(values)
        if sym in values and values[sym] != v:
            raise InputError(f"--input-shape gives the dimension {sym!r} the size {values[sym]}, but its symbols' "
                             f"sizes make it {v}; give sizes that agree")
        values[sym] = v
    return values


def zero_feeds(model: onnx.ModelProto, at: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Zeros for every input of ``model``, its symbols at ``at`` (a symbol not given: 1); only sizes are read. An
    integer input that no node reads as indices is ones (:func:`eqsat.onnx.folding.indices_read`: an attention
    mask keeping every position, which every kernel takes). :class:`eqsat.onnx.footprint.TooLarge` where the run's
    memory limit says a run of ``model`` there would not fit (:func:`eqsat.onnx.footprint.check`): every caller
    reads it as sizes the model cannot run at."""
    ports = [p for p in interface(model)[0] if p.dims is not None]
    shapes = {p.name: [d if isinstance(d, int) else at.get(d or f"{p.name}:{k}", 1) for k, d in enumerate(p.dims)]
              for p in ports if p.dims is not None}
    footprint.check(shapes, model)
    feeds = {}
    indices = indices_read(model.graph)
    for port in ports:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(port.elem_type)
        ones = np.dtype(dtype).kind in "iu" and port.name not in indices
        feeds[port.name] = (np.ones if ones else np.zeros)(shapes[port.name], dtype)
    return feeds


def shapes_at(model: onnx.ModelProto, values: Mapping[str, int]) -> Shapes:
    """Every input with a dynamic dimension -> its shape with each symbol at ``values``."""
    inits = {i.name for i in model.graph.initializer}
    out: Shapes = {}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = _port(vi).dims or ()
        if any(isinstance(d, str) for d in dims):
            out[vi.name] = tuple(values[d] if isinstance(d, str) else d for d in dims)
    return out


def shapes_text(shapes: Mapping[str, Sequence[int]]) -> str:
    """``NAME=D1,D2, ...`` for each input: the sizes as the flags take them.

    >>> shapes_text({"input_ids": (1, 128), "attention_mask": [1, 128]})
    'input_ids=1,128, attention_mask=1,128'
    """
    return ", ".join(f"{k}={','.join(map(str, v))}" for k, v in shapes.items())


def runnable_values(model: onnx.ModelProto, values: Mapping[str, int],
                    defaulted: list[str]) -> tuple[dict[str, int], bool]:
    """(``values`` with the ``defaulted`` non-batch symbols at their defaults (:func:`default_value`) halved
    together (while each stays at least :data:`MIN_DEFAULT`) while onnxruntime cannot run ``model`` there (zeros
    fed), and where no smaller size runs, doubled (while each stays at most :data:`MAX_DEFAULT`: a waveform's
    samples, which a convolutional front-end needs hundreds of; the doubling stops where the model is refused with
    the same error at two sizes in turn, which its size does not cause; a doubled size at which an output's dynamic
    dimension is shorter than :data:`MIN_DEFAULT` is doubled again, so that no symbol is tuned where it looks like
    a constant), then each moved symbol back at its default where the model still runs there (only some sizes were
    refused; an image's sides together; repeated while one more goes back), as they were if it runs; where no such
    size runs, one symbol at 1, the others at their defaults, where it is refused at 2 and the outputs' sizes follow
    it at 1 (a decode step traced at one new token, which runs at a sequence of 1 only; not a table added whole,
    broadcast at 1, nor a short table that a user sizes: ``--input-shape``); where none runs either, one length
    symbol at one more than another's with the rest at 1, or at the sum of two others' defaults (a decode step's mask
    over the cache and the new tokens, its length named apart: :mod:`eqsat.onnx.axes.tied` then reads the tie); whether it
    ran at one: False where it never did, True where it did or nothing was tried (no such symbol, or the model does not load: the importer names what is wrong with it))."""
    derived = derived_symbols(list(values))
    syms = symbols(model)
    start = {s: default_value(model, s, syms.get(s, [])) for s in defaulted if s not in derived}
    movable = {s: v for s, v in start.items() if v != BATCH_DEFAULT and values[s] == v}  # derived ones follow
    if not movable:
        return dict(values), True
    try:
        sess = session(model)
    except Exception:  # noqa: BLE001 - the importer names what is wrong with the model
        return dict(values), True
    current = footprint.LIMIT.get()  # (the run's memory limit, the model not watched yet: its sizes are chosen here)
    limits: list[footprint.Limit] = []

    refusals: list[str] = []
    short: set[int] = set()  # the shifts whose outputs came out short (short_outputs)

    base = dict(movable)

    def sizes(shift: int) -> dict[str, int]:  # each default doubled ``shift`` times (halved where negative)
        return {s: v << shift if shift >= 0 else v >> -shift for s, v in base.items()}

    def is_short(at: dict[str, int]) -> bool | None:  # None: refused there; else whether an output came out short
        try:
            if current is not None and at != values:  # a size the memory would not hold is not tried (an image's
                # sides doubled to 3584 pixels; a batch read as a length and doubled with the samples)
                limits[:] = limits or [footprint.Limit(model, current.budget)]  # (each estimated: no tuned size runs)
                limits[0].check(shapes_at(model, at))
            outputs = sess.run(None, zero_feeds(model, at), QUIET)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors have no common type: a size it refuses
            refusals.append(str(exc))
            return None
        return short_outputs(model, [np.shape(o) for o in outputs])

    def runs(shift: int | None) -> dict[str, int] | None:  # None: ``values`` as given
        at = dict(values) if shift is None else follow({**values, **sizes(shift)}, derived)
        if (was_short := is_short(at)) is None:
            return None
        if shift is not None and was_short:
            short.add(shift)
        return at

    def restored(at: dict[str, int]) -> dict[str, int]:
        """``at`` with each moved symbol back at its default where the model still runs (one of several sizes
        refused it: a head's size of 64 among sequences of 128), again while one more goes back (a sequence's
        length back once the total length it is part of is)."""
        sides = [s for s in movable if is_image_side(model, syms.get(s, []))]
        groups = ([sides] if sides else []) + [[s] for s in movable if s not in sides]  # an image stays square
        if len(groups) < 2:
            return at
        refused: set[tuple[tuple[str, int], ...]] = set()
        changed = True
        while changed:
            changed = False
            for group in groups:
                trial = follow({**at, **{s: movable[s] for s in group}}, derived)
                key = tuple(sorted(trial.items()))
                if all(at[s] == movable[s] for s in group) or key in refused:
                    continue
                if is_short(trial) is False:
                    at, changed = trial, True
                else:  # refused there, or an output short: the symbol stays moved
                    refused.add(key)
        return at

    def follows(at: dict[str, int], symbol: str) -> bool:
        """Whether the model runs at ``at`` with every output axis named by a symbol of that size there, one of
        them named by ``symbol`` or a sum of it (a decode step's one new token; not a table broadcast at 1)."""
        try:
            outputs = sess.run(None, zero_feeds(model, at), QUIET)
        except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: a size it refuses
            return False
        named = False
        for vi, out in zip(model.graph.output, outputs):
            for k, d in enumerate(vi.type.tensor_type.shape.dim):
                if d.dim_param in at and k < np.ndim(out):
                    if np.shape(out)[k] != at[d.dim_param]:
                        return False
                    named |= d.dim_param == symbol or symbol in getattr(derived.get(d.dim_param), "uses", ())
        return named

    if (at := runs(None)) is not None:
        return at, True
    shift = -1
    while min(sizes(shift).values()) >= MIN_DEFAULT:
        if (at := runs(shift)) is not None:
            return restored(at), True
        shift -= 1
    for scale in ROUNDER:  # doubled; then, where no doubling runs, from a rounder size (a multiple of 80 samples)
        base = {s: v * scale.numerator // scale.denominator for s, v in movable.items()}
        shift = 0 if scale != 1 else 1
        while max(sizes(shift).values()) <= MAX_DEFAULT:
            if (at := runs(shift)) is not None:
                while shift in short and max(sizes(shift + 1).values()) <= MAX_DEFAULT \
                        and (more := runs(shift + 1)) is not None:
                    at, shift = more, shift + 1  # an output's dynamic length under MIN_DEFAULT: no size to tune at
                return restored(at), True
            if len(refusals) > 1 and refusals[-1] == refusals[-2]:  # refused alike at two sizes: not for its size
                break
            shift += 1
    base = dict(movable)
    for s in movable:  # a size only 1 runs at (a decode step traced at one new token): it alone at 1, not at 2
        at = follow({**values, s: 1}, derived)
        if follows(at, s) and is_short(follow({**values, s: 2}, derived)) is None:
            return at, True
    names = length_symbols(model)
    lengths = [s for s in movable if s in names]
    for s in lengths:  # a length the sum of others' (a mask over the cache and the new tokens, named apart)
        sums = [{s: values[a] + values[b]} for k, a in enumerate(lengths) for b in lengths[k + 1:] if s not in (a, b)]
        ones = [{s: values[a] + 1, **{b: 1 for b in lengths if b not in (a, s)}} for a in lengths if a != s]
        for tried in [*ones, *sums]:  # (one more than another, the rest at 1: a decode step's one new token, first)
            if is_short(at := follow({**values, **tried}, derived)) is not None:
                return at, True
    return dict(values), False


def short_outputs(model: onnx.ModelProto, shapes: Sequence[tuple[int, ...]]) -> bool:
    """Whether an output's dynamic dimension that is not batch-like came out shorter than :data:`MIN_DEFAULT` in a
    run (``shapes``: the outputs' shapes there): a waveform front-end's frames at 1 in a run of 512 samples, a size
    at which a symbol and the constant 1 cannot be told apart (a program fitted there would not run at 16000)."""
    for port, shape in zip(interface(model)[1], shapes):
        for k, (dim, size) in enumerate(zip(port.dims or (), shape)):
            if not isinstance(dim, str):
                continue
            if not _batch_axis(dim, k) and size < MIN_DEFAULT:
                return True
    return False


def batch_symbols(model: onnx.ModelProto) -> list[str]:
    """The model's free symbols that are batch-like (derived ones follow them)."""
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    return [s for s, places in syms.items() if s not in derived and _batch(s, places)]


def length_symbols(model: onnx.ModelProto) -> list[str]:
    """The model's free symbols that are not batch-like (sequences, samples, image sides): those a size is
    doubled in (derived ones follow them)."""
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    return [s for s, places in syms.items() if s not in derived and not _batch(s, places)]


def probe_values(value: int, batch: bool) -> list[int]:
    """The further values a symbol at ``value`` is verified at (its representative value left out; a batch-like one
    also at 1 where it is represented above: a batch of 1 broadcasts where others are refused): for a symbol
    represented above every one of :data:`OTHER_PROBES` (a waveform's samples, which refuses them all), also
    ``value + 37``, ``value // 2 + 1`` and ``2 * value + 37`` (odd offsets: a strided front-end's rounding; the
    last well above it, so that a size derived from it, a waveform's frames, is larger there than at every size
    verified below: a constant that equals such a size at ``value`` fails there, where it may pass below, as a Slice
    to a constant end does); any other symbol also at twice its value where that is not among them (an image's side
    at 448: a windowed model refuses 1, 37 and 256, and the sizes it takes are multiples of the one it was tuned at);
    and any other symbol above 2 also at one below its value (223 pixels: a size that is one side's floor times a
    constant, ``2 * floor(h / 16)``, written as another floor, ``floor(h / 8)``, is right at 37, 256 and 448 and wrong
    wherever ``h mod 16`` is 8 or more; one below a size of many factors of 2 is the largest remainder of each).

    >>> probe_values(3, batch=True), probe_values(37, batch=False), probe_values(512, batch=False)
    ([2, 4, 1], [1, 256, 64, 74, 36], [1, 37, 256, 549, 257, 1061, 511])
    >>> probe_values(128, batch=False), probe_values(224, batch=False)
    ([1, 37, 256, 127], [1, 37, 256, 448, 223])
    """
    probes = BATCH_PROBES if batch else OTHER_PROBES
    out = [v for v in probes if v != value][:len(probes) - 1]
    if batch and value != 1:
        out.append(1)  # a batch of 1 broadcasts where a larger one is refused
    if not batch and value > max(OTHER_PROBES):
        out += [value + 37, value // 2 + 1, 2 * value + 37]
    elif not batch and 2 * value not in out:
        out.append(2 * value)
    if not batch and value > 2 and value - 1 not in out:
        out.append(value - 1)
    return out


def probe_shapes(model: onnx.ModelProto, values: Mapping[str, int]) -> list[tuple[str, Shapes]]:
    """(label, shapes) to verify a shape-generic result at: each symbol at each of its :func:`probe_values`,
    the others at their representative ``values``; the label names the change (``batch=2``). Where two or more
    symbols are free, also every one of them changed at once (the first of :func:`joint_values`;
    ``batch=2,seq=37``; the second where the original refuses it: :func:`near_shapes`): a value computed from two
    sizes (CLIP's pooled rows, ``Range(batch) * seq``) that a program fixed at one of them is right wherever only
    one changes."""
    return [(label, shapes_at(model, at)) for label, at in probe_sizes(model, values)]


def probe_sizes(model: onnx.ModelProto, values: Mapping[str, int]) -> list[tuple[str, dict[str, int]]]:
    """(label, the symbols' sizes) of :func:`probe_shapes`: the sizes a shape-generic result is verified at."""
    out: list[tuple[str, dict[str, int]]] = []
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    free = {sym: _batch(sym, places) for sym, places in syms.items() if sym not in derived}  # (the others follow)
    for sym, batch in free.items():
        for v in probe_values(values[sym], batch):
            out.append((f"{sym}={v}", follow({**values, sym: v}, derived)))
    return out + _joint_sizes(model, values)[:1]


def _joint_shapes(model: onnx.ModelProto, values: Mapping[str, int]) -> list[tuple[str, Shapes]]:
    """(label, shapes) of each of :func:`joint_values` of the model's free symbols; none where fewer than two are
    free."""
    return [(label, shapes_at(model, at)) for label, at in _joint_sizes(model, values)]


def _joint_sizes(model: onnx.ModelProto, values: Mapping[str, int]) -> list[tuple[str, dict[str, int]]]:
    """(label, the symbols' sizes) of :func:`_joint_shapes`."""
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    free = {sym: _batch(sym, places) for sym, places in syms.items() if sym not in derived}
    if len(free) < 2:
        return []
    joints = joint_values({sym: values[sym] for sym in free}, {sym for sym, batch in free.items() if batch})
    return [(joint_label(j), follow({**values, **j}, derived)) for j in joints]


def joint_label(joint: Mapping[str, int]) -> str:
    """The label of a check with several symbols changed (``batch=2,seq=37``)."""
    return ",".join(f"{sym}={v}" for sym, v in joint.items())


def joint_values(values: Mapping[str, int], batch: set[str]) -> list[dict[str, int]]:
    """The sizes every symbol of ``values`` is verified at at once: each at the first of its :func:`probe_values`
    above 1 (a batch of 2, 37 tokens), and, where the original refuses those, each at twice its value (a batch-like
    one at 2: a windowed model refuses 37 pixels and takes a multiple of its side). Symbols that are not batch-like
    each take a size no other of them takes (the next of their probe values; three times the value in place of
    twice): an image's height and width, both changed, at 37 and 256 pixels, not a square, so that a size written
    for the one and read for the other (a grid's rows and columns swapped where both change) shows.

    >>> joint_values({"batch": 1, "seq": 128}, {"batch"})
    [{'batch': 2, 'seq': 37}, {'batch': 2, 'seq': 256}]
    >>> joint_values({"batch": 1, "height": 224, "width": 224}, {"batch"})
    [{'batch': 2, 'height': 37, 'width': 256}, {'batch': 2, 'height': 448, 'width': 672}]
    """
    first: dict[str, int] = {}
    twice: dict[str, int] = {}
    for sym, value in values.items():
        taken = {v for s, v in first.items() if s not in batch}
        above = [v for v in probe_values(value, sym in batch) if v > 1]
        first[sym] = next((v for v in above if sym in batch or v not in taken), above[0] if above else 2 * value)
        doubled = {v for s, v in twice.items() if s not in batch}
        twice[sym] = BATCH_PROBES[0] if sym in batch else 2 * value if 2 * value not in doubled else 3 * value
    return [first] + ([twice] if twice != first else [])


NEAR = (3, 4), (5, 4)
"""the fractions of its representative value a symbol is verified at besides where the original refuses each of
its :func:`probe_values` (:func:`near_shapes`)"""


def near_shapes(model: onnx.ModelProto, values: Mapping[str, int]) -> list[tuple[str, str, Shapes]]:
    """(symbol, label, shapes) to verify a shape-generic result at where every one of the symbol's
    :func:`probe_shapes` is skipped, refused by the original or too large for the memory (a traced model that runs between half and twice its tuned length only: a program
    that fixed a size computed from the symbol would otherwise pass unchecked): each symbol that is not batch-like at
    :data:`NEAR`'s fractions of its value (3/4 and 5/4), the others at their representative values. Where two or
    more symbols are free, the second of :func:`joint_values` too, in place of the first (its label the "symbol").

    >>> import onnx.helper as h
    >>> m = h.make_model(h.make_graph([h.make_node("Identity", ["x"], ["y"])], "g",
    ...     [h.make_tensor_value_info("x", 1, ["batch", "seq"])], [h.make_tensor_value_info("y", 1, ["batch", "seq"])]))
    >>> [(sym, label, shapes["x"]) for sym, label, shapes in near_shapes(m, {"batch": 1, "seq": 128})]
    [('seq', 'seq=96 (near its size: the others skipped)', (1, 96)), ('seq', 'seq=160 (near its size: the others skipped)', (1, 160)), ('batch=2,seq=37', 'batch=2,seq=256', (2, 256))]
    """
    out: list[tuple[str, str, Shapes]] = []
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    for sym, places in syms.items():
        value = values[sym]
        if sym in derived or _batch(sym, places) or value < 8:
            continue
        for num, den in NEAR:
            v = value * num // den
            if v != value and v not in probe_values(value, False):
                out.append((sym, f"{sym}={v} (near its size: the others skipped)",
                            shapes_at(model, follow({**values, sym: v}, derived))))
    joints = _joint_shapes(model, values)
    if len(joints) > 1:
        out.append((joints[0][0], *joints[1]))
    return out


__all__ = ["BATCH_DEFAULT", "batch_symbols", "NEAR", "near_shapes", "BATCH_PROBES", "IMAGE_DEFAULT", "default_value", "is_image_side", "MAX_DEFAULT", "MIN_DEFAULT", "QUIET", "OTHER_DEFAULT", "OTHER_PROBES", "Port", "Shapes", "derived_symbols", "interface", "length_symbols", "short_outputs",
           "interface_difference", "is_batch_like", "joint_label", "joint_values", "probe_shapes", "probe_sizes", "probe_values",
           "runnable_values", "shapes_at", "symbol_values", "symbols", "zero_feeds"]
