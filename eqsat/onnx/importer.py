"""ONNX -> IR.

Every static-shaped ONNX model (opset >= 13) imports: operators the rules know become IR operators
(Conv bias, broadcasting MatMul and a Gemm that is not exactly a ``linear`` are decomposed into them), constant
subgraphs (weight-only subgraphs, the Shape/Gather/Unsqueeze/Concat chains torch exports) are folded with
onnxruntime (onnx's reference evaluator where onnxruntime cannot; never Quantize/DequantizeLinear), Identity,
inference Dropout, a Cast to its input's own type and an operation with a neutral constant (``x + 0``, ``x * 1``)
are dropped, and every other operator (a custom domain, If/Loop/Scan, a node that cannot be folded, a training
Dropout) is carried as an opaque node with its attributes, subgraphs, omitted optional inputs and implicit
inputs (the outer-scope values its subgraphs read). Output shapes come from onnx shape inference, else from one onnxruntime run of the model
(:mod:`eqsat.onnx.folding`).
Overridable initializers stay inputs with their defaults, and declared input/output types are kept.
A generic import (dynamic axes kept symbolic) starts from a rewrite of the prepared model where its caller passes
one (``simplify``: the shape-generic writer's forms, a causal mask as a Trilu and a position or rotary table as a
Slice of a constant, :func:`eqsat.generic.import_generic`), then keeps the Shape computations that meet the data
(:mod:`eqsat.onnx.axes.live`); a Reshape whose target such a kept Shape computes (with constants) alone is imported
as a ``reshape`` to the target's value at the representative sizes, as a folded one is (its symbols read off its
input's, :func:`eqsat.onnx.axes.dimensions.symbolic_target`; the export writes it shape-generic).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import ir, ops
from ..dims import Dim, holds, is_symbolic, volume_fp
from ..dims import current as current_symbols
from ..errors import DynamicShapeError, InputError, ShapeError
from ..ir import Graph, Node, Origin, leaf_name
from ..ops.attention import MATCHED as ATTENTION_OPS
from ..ops.elementwise import binary
from ..ops.mapping import ImportContext, floats, onnx_attrs
from ..ops.rotary import computed_halves_repeat, halves_repeat
from ..ops.rotary_part import tables_repeat
from . import origins, pool
from .axes.dimensions import (
    carried,
    fitted_fingerprints,
    input_dims,
    opaque_fingerprints,
    opaque_shape,
    symbolic_target,
    values_at_fingerprints,
)
from .axes.interface import symbol_values
from .axes.live import live_shapes
from .determinism import check_deterministic
from .folding import NONDETERMINISTIC, ModelRuns, Walks, constant_value, dense, dtype_name
from .forms import repeated_heads
from .io import check_bfloat16, is_large
from .neutral import kept_operand
from .patterns import Match, find_composites
from .prepare import QUANTIZATION, check_loads, check_value_sizes, prepare, removable_pass_through
from .reading import load_model
from .subgraphs import implicit_inputs

MIN_OPSET = 13

Simplify = Callable[[onnx.ModelProto, Mapping[str, tuple[int, ...]]], onnx.ModelProto]
"""a rewrite of a prepared model, at its representative input shapes, that a generic import starts from"""

SMALL_FOLDED = 64
"""entries up to which a value the import folded is read by the composite patterns of a second import
(:meth:`_Importer.small_folded`): sizes, bounds, scales; never a weight's computation"""



def parse_input_shapes(specs: list[str] | None, flag: str = "--input-shape") -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=D1,D2,...`` flags (``flag``: how messages name them)."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            shape = ()
        if not sep or not name or not shape:
            raise InputError(f"{flag} {spec!r}: expected NAME=D1,D2,... with positive integers")
        if any(d <= 0 for d in shape):
            raise InputError(f"{flag} {spec!r}: dimension {min(shape)} is not positive; every dimension "
                             "must be at least 1 (eqsat cannot optimize empty or negative-size tensors)")
        if name in out and out[name] != shape:
            raise InputError(f"{flag} {name} is given twice, as {out[name]} and {shape}; give it once")
        out[name] = shape
    return out


def parse_sizes(specs: list[str] | None, flag: str = "--also-at") -> tuple[dict[str, int], ...]:
    """Parse ``SYMBOL=N[,SYMBOL=N...]`` flags (sizes of dynamic dimensions, by their ``dim_param`` names).

    >>> parse_sizes(["past=511", "batch=8,past=255"])
    ({'past': 511}, {'batch': 8, 'past': 255})
    """
    out = []
    for spec in specs or []:
        size: dict[str, int] = {}
        for part in spec.split(","):
            name, sep, value = part.partition("=")
            name = name.strip()
            try:
                n = int(value)
            except ValueError:
                n = 0
            if not sep or not name or n <= 0:
                raise InputError(f"{flag} {spec!r}: expected SYMBOL=N[,SYMBOL=N...] with the dynamic dimensions' "
                                 "names (eqsat info lists them) and positive sizes")
            if name in size:
                raise InputError(f"{flag} {spec!r}: {name} is given twice; give each symbol once")
            size[name] = n
        out.append(size)
    return tuple(out)


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


class _Importer:
    def __init__(self, model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]], generic: bool = False,
                 fitted: Mapping[str, tuple[int, ...]] | None = None, source: str | None = None,
                 folded: Mapping[str, np.ndarray] | None = None, shared: Walks | None = None):
        shared = shared or Walks(live_shapes(model) if generic else set())
        self.model = model
        self.folded = dict(folded or {})
        """small values an earlier import of the model folded (:meth:`small_folded`): the composite patterns read
        them, as they read the initializers (TorchScript computes a rotary half's bound, ``x.shape[-1] // 2``,
        from a Shape that only the walk folds)"""
        self.source = source  # the user's name of the model (its path), for messages
        self.live = shared.live  # Shape nodes kept: their values meet the data
        self.generic = generic  # dynamic dimensions are symbolic (eqsat.dims)
        self.fitted = dict(fitted or {})  # opaque output -> its shape at the fingerprints, read off runs
        self.fp_values: dict[str, np.ndarray] = {}  # a value computed from shapes -> it at the fingerprints, if small
        self.fp_opaque: set[str] = set()  # those of fp_values that follow a size no monomial fits
        self.unfitted: list[str] = []  # opaque outputs whose symbolic shape is not inferred (generic imports)
        self.g = model.graph
        self.input_shapes = dict(input_shapes)
        if generic:  # a symbol written as others' arithmetic fingerprints as that arithmetic (past + 1)
            current_symbols().derive(symbol_values(model, self.input_shapes))
        self.opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
        self.values: dict[str, Node] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.sized: dict[str, np.ndarray] = {}
        """the small integer values computed from kept (live) Shapes alone, at the representative sizes: a Reshape
        to one is imported as a reshape to that target (its symbols read as a folded target's are)"""
        self.typed: dict[str, np.ndarray] = {}
        """small booleans computed as :attr:`sized` values are, and what is computed from them (torch's ``Where(Equal(
        t, -1), 1, t)`` before an Expand): they type the opaque nodes reading them, never a Reshape target"""
        self.weights: dict[str, np.ndarray] = {}
        self._names: set[str] = set()
        self.origins: list[Origin] = []
        self.runs = ModelRuns(model, self.input_shapes, self.values, self.weights, shared.folds)

    # -- helpers -------------------------------------------------------------------------------
    def _unique(self, base: str | None) -> str:
        base = base or "w"
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        self._names.add(name)
        return name

    def value(self, name: str) -> Node:
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            node = self.weight(self.consts[name], name)
            self.values[name] = node
            return node
        raise InputError(f"value {name!r} is used before it is defined; the model is not topologically sorted")

    # -- what the operator table's mappers build through (eqsat.ops.mapping.ImportContext) --------
    def make(self, op: str, inputs: Sequence[Node], attrs: tuple = ()) -> Node:
        """An IR node; in a generic import, one valid for every value of the symbols (else ShapeError: the ONNX
        nodes are imported one by one, or carried opaque)."""
        if op == "reshape" and is_symbolic(inputs[0].shape) and not carried(inputs[0].shape, attrs):
            attrs = symbolic_target(inputs[0].shape, attrs)
        node = ir.make(op, inputs, attrs)
        if self.generic and not holds(op, tuple(attrs), [i.shape for i in inputs]):
            raise ShapeError(f"{op}{tuple(attrs)} on {[i.shape for i in inputs]} holds at the representative sizes only")
        return node

    def data(self, node: Node) -> np.ndarray:
        return self.weights[leaf_name(node)]

    def weight(self, array: np.ndarray, hint: str | None) -> Node:
        name = self._unique(hint)
        arr = np.asarray(array, order="C")
        self.weights[name] = arr
        return ir.weight(name, arr.shape, arr.dtype.name)

    def rest(self, target: str, shape: Sequence[int], others: Sequence[int]) -> int:
        size = math.prod(int(d) for d in shape) // max(math.prod(int(d) for d in others), 1)
        if not is_symbolic(shape) or not self.given(target):
            return size
        whole, known = volume_fp(shape), volume_fp(others)
        if known <= 0 or whole % known:
            return size
        return size if whole // known == size else Dim(size, whole // known)

    def given(self, name: str) -> bool:
        """Whether ``name`` is a constant the model gives (an initializer, a Constant node), not one folded at the
        representative sizes (a batch of 1 read off a shape)."""
        return name in self._given or getattr(self._producers.get(name), "op_type", None) == "Constant"

    def reshape(self, node: Node, shape: tuple[int, ...]) -> Node:
        if tuple(node.shape) == tuple(shape):
            return node
        if node.op == "weight" and node.name is not None:
            return self.weight(self.weights[node.name].reshape(shape), node.name)
        return self.make("reshape", [node], tuple(shape))

    # -- main ----------------------------------------------------------------------------------
    def run(self) -> Graph:
        shared = pool.current()  # where a run's pool is current, large weights are its (mapped) arrays: no copy
        for init in self.g.initializer:
            entry = shared.entry(init) if shared is not None else None
            self.consts[init.name] = np.asarray(entry.array) if entry is not None else numpy_helper.to_array(init)
        for sparse in self.g.sparse_initializer:
            self.consts[sparse.values.name] = dense(sparse)
        input_names = [vi.name for vi in self.g.input if vi.name not in self.consts]
        unknown = set(self.input_shapes) - set(input_names)
        if unknown:
            raise InputError(f"--input-shape names {sorted(unknown)}, which are not model inputs "
                             f"(inputs: {input_names})")
        defaults = {vi.name: self.consts.pop(vi.name) for vi in self.g.input if vi.name in self.consts}
        inputs = [self._default_input(vi.name, defaults[vi.name]) if vi.name in defaults else self._graph_input(vi)
                  for vi in self.g.input]
        self.composites = find_composites(self.g, {**self.folded, **self.consts}, self.opset, self.live)
        self._covered: dict[str, Match] = {n.output[0]: m for m in self.composites for n in m.nodes}
        self._producers = {o: n for n in self.g.node for o in n.output if o}
        self._given = {t.name for t in self.g.initializer}
        for node in self.g.node:
            if not self._composite(node):
                self._node(node)
            if self.generic:
                self._fingerprint_values(node)
        outputs, names = [], []
        for vo in self.g.output:
            names.append(vo.name)
            outputs.append(self.value(vo.name))
        used = {n.name for n in ir.topo_order(outputs) if n.op == "weight"}
        weights = {k: v for k, v in self.weights.items() if k in used}
        domains = {o.domain: o.version for o in self.model.opset_import if o.domain not in ("", "ai.onnx")}
        return Graph(tuple(inputs), tuple(outputs), tuple(names), weights,
                     name=self.g.name or "model", opset=max(self.opset, 17), input_defaults=defaults,
                     interface_types=self._interface_types(outputs), domains=domains,
                     origins=origins.live(self.origins, outputs))

    def _fingerprint_values(self, node: onnx.NodeProto) -> None:
        """Keep the small values ``node`` computes where every symbol is at its fingerprint
        (:func:`eqsat.onnx.axes.dimensions.values_at_fingerprints`), for the shapes that follow them."""
        if node.op_type != "Shape" and not any(i in self.fp_values for i in node.input):
            return
        names = [i for i in node.input if i]
        shapes = {n: self.values[n].shape for n in names if n in self.values}
        # constants the model gives (initializers, Constant nodes), not values folded at the representative sizes
        # (a batch of 1 read off a shape is not the batch where every symbol is at its fingerprint)
        consts = {n: np.asarray(self.consts[n]) for n in names if n in self.consts and self.given(n)}
        values, follows = values_at_fingerprints(self.runs, node, shapes, consts, self.fp_values, self.fp_opaque)
        self.fp_values.update(values)
        if follows:
            self.fp_opaque.update(values)

    def small_folded(self) -> dict[str, np.ndarray] | None:
        """The small values (at most :data:`SMALL_FOLDED` entries) that this import folded (computed, not given:
        no initializer), where the composite patterns read with them find more composites than this import did;
        else None (nothing to import again for)."""
        given = {t.name for t in self.g.initializer} | {t.values.name for t in self.g.sparse_initializer}
        folded = {k: v for k, v in self.consts.items() if k not in given and np.asarray(v).size <= SMALL_FOLDED}
        if not folded:
            return None
        known = {k: v for k, v in self.consts.items() if k in given}
        more = find_composites(self.g, {**folded, **known}, self.opset, self.live)
        return folded if len(more) > len(self.composites) else None

    def record_origin(self, nodes: list[onnx.NodeProto], outputs: list[str]) -> None:
        """Remember that the ONNX ``nodes`` (a region) became the IR nodes now bound to their ``outputs``, so that
        the exporter can write them back verbatim (:mod:`eqsat.onnx.origins`). Call it once the outputs are bound."""
        produced = {o for n in nodes for o in n.output if o}
        external = list(dict.fromkeys(i for n in nodes for i in n.input if i and i not in produced))
        constants = {i: self.consts[i] for i in external if i in self.consts}
        inputs = [(i, self.values.get(i)) for i in external]
        record = origins.make([_copy(n) for n in nodes], inputs, [(o, self.values[o]) for o in outputs], constants)
        if record is not None:
            self.origins.append(record)

    def _default_input(self, name: str, default: np.ndarray) -> Node:
        """An overridable initializer: a graph input with a default value (never folded into constants)."""
        node = ir.input_(name, default.shape, default.dtype.name)
        self._names.add(name)
        self.values[name] = node
        return node

    def _interface_types(self, outputs: list[Node]) -> dict[str, bytes]:
        """The declared types to write back: every input's (but those --input-shape fixed), and every
        output's that agrees with the imported dtype and shape."""
        types: dict[str, bytes] = {}
        for vi in self.g.input:
            if vi.name not in self.input_shapes and vi.type.HasField("tensor_type"):
                types[vi.name] = vi.type.SerializeToString()
        for vo, node in zip(self.g.output, outputs):
            tt = vo.type.tensor_type
            if not vo.type.HasField("tensor_type") or tt.elem_type != helper.np_dtype_to_tensor_dtype(np.dtype(node.dtype)):
                continue
            if tt.HasField("shape") and (len(tt.shape.dim) != len(node.shape) or any(
                    d.HasField("dim_value") and d.dim_value != n for d, n in zip(tt.shape.dim, node.shape))):
                continue
            types[vo.name] = vo.type.SerializeToString()
        return types

    def _graph_input(self, vi: onnx.ValueInfoProto) -> Node:
        tt = vi.type.tensor_type
        dims: list[int] = []
        if vi.name in self.input_shapes:
            dims = list(self.input_shapes[vi.name])
            if len(dims) != len(tt.shape.dim):
                raise InputError(f"--input-shape {vi.name}: model input has rank {len(tt.shape.dim)}, "
                                 f"got {len(dims)} dimensions")
            for k, (d, fixed) in enumerate(zip(tt.shape.dim, dims)):
                if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != fixed:
                    raise InputError(f"--input-shape {vi.name}={','.join(map(str, dims))}: dimension {k} of input "
                                     f"{vi.name!r} is static ({d.dim_value}); only dynamic dimensions can be fixed")
        else:
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(d.dim_value)
                else:
                    shown = ",".join(str(x.dim_value) if x.HasField("dim_value") and x.dim_value > 0
                                     else (x.dim_param or "?") for x in tt.shape.dim)
                    raise DynamicShapeError(
                        f"input {vi.name!r} has a dynamic shape [{shown}]; fix it with "
                        f"--input-shape {vi.name}=D1,D2,... (e.g. "
                        f"--input-shape {vi.name}={','.join('1' if not (x.HasField('dim_value') and x.dim_value > 0) else str(x.dim_value) for x in tt.shape.dim)})")
        node = ir.input_(vi.name, input_dims(vi, dims) if self.generic else dims, dtype_name(tt.elem_type))
        self._names.add(vi.name)
        self.values[vi.name] = node
        return node

    # -- per node ------------------------------------------------------------------------------
    def _node(self, node: onnx.NodeProto) -> None:
        ins = [i for i in node.input]
        implicit = implicit_inputs(node)
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            self.consts[node.output[0]] = constant_value(node.attribute[0])
            return
        if node.op_type == "Shape" and ins[0] in self.values and node.domain in ("", "ai.onnx") \
                and node.output[0] not in self.live:
            shape = np.array(self.values[ins[0]].shape, dtype=np.int64)
            a = onnx_attrs(node)
            self.consts[node.output[0]] = shape[a.get("start", 0): a.get("end", len(shape))]
            return
        if node.op_type == "Shape" and node.output[0] in self.folded and node.output[0] not in self.live:
            self.consts[node.output[0]] = self.folded[node.output[0]]  # of a value inside a composite (its shape known)
            return
        if any(ins + implicit) and all((i == "" or i in self.consts) for i in ins + implicit) \
                and node.domain in ("", "ai.onnx") and node.op_type not in NONDETERMINISTIC | QUANTIZATION:
            folded = self.runs.fold(node, implicit, self.consts)
            if folded is not None:
                self.consts.update(folded)
                return
        if self.generic:
            self._sized(node, ins, implicit)
        if node.op_type in ("Identity", "Dropout") and node.domain in ("", "ai.onnx") and ins[0] \
                and removable_pass_through(node, self.consts) or self._same_type_cast(node):
            self.values[node.output[0]] = self.value(ins[0])
            return
        kept = self._neutral_operand(node)
        if kept is not None:
            self.values[node.output[0]] = self.value(kept)
            return
        mapped, sized = None, False
        if node.domain in ("", "ai.onnx") and not implicit:
            mapper = ops.IMPORTS.get(node.op_type)
            if mapper is not None:
                context: ImportContext[Node] = self  # the table's mappers build through this importer
                target = ins[1] if node.op_type == "Reshape" and len(ins) > 1 and ins[1] in self.sized \
                    and ins[1] not in self.consts else None
                if target is not None:
                    self.consts[target] = self.sized[target]  # (make refuses a reshape valid at these sizes only)
                    sized = True
                try:
                    mapped = mapper(context, node, [self.value(i) if i else None for i in ins])
                except ShapeError:
                    mapped = None
                finally:
                    if target is not None:
                        del self.consts[target]
        if mapped is None:
            self._opaque(node, implicit)
        else:
            self.values[node.output[0]] = mapped
            anew = ops.WRITTEN_ANEW.get(node.op_type)
            # (a Reshape to a sized target is written from the IR: its target, a constant; a form written anew too)
            if not sized and not (anew is not None and anew(mapped)):
                self.record_origin([node], [node.output[0]])
        repeated = repeated_heads(self.values[node.output[0]]) if node.op_type == "Reshape" and self.generic else None
        if repeated is not None:  # transformers' repeat_kv: one operator that rules see through
            self.values[node.output[0]] = self.make("repeat_heads", [repeated[0]], (repeated[1],))

    def _sized(self, node: onnx.NodeProto, ins: list[str], implicit: list[str]) -> None:
        """Records the value at the representative sizes of a kept Shape's output, and of a small integer value
        computed from those and constants alone (:attr:`sized`)."""
        if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC | QUANTIZATION or implicit:
            return
        if node.op_type == "Shape" and ins[0] in self.values and node.output[0] in self.live:
            shape = np.array(self.values[ins[0]].shape, dtype=np.int64)
            a = onnx_attrs(node)
            self.sized[node.output[0]] = shape[a.get("start", 0): a.get("end", len(shape))]
            return
        known = {**self.sized, **self.typed}
        if not any(i in known for i in ins) or not all(i == "" or i in self.consts or i in known for i in ins):
            return
        folded = self.runs.fold(node, implicit, {**self.consts, **{i: known[i] for i in ins if i in known}})
        through = any(i in self.typed for i in ins)
        for name, value in (folded or {}).items():
            value = np.asarray(value)
            if value.dtype.kind in "iub" and value.size <= 8 and value.ndim <= 1:
                (self.sized if value.dtype.kind in "iu" and not through else self.typed)[name] = value

    def _same_type_cast(self, node: onnx.NodeProto) -> bool:
        """Whether ``node`` is a Cast to its input's own element type (torch writes them, e.g. T5's LayerNorm
        casting float32 to float32): it passes its input on, and kept opaque it would hide the value's
        producer from the rules."""
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or node.input[0] not in self.values:
            return False
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        return to is not None and dtype_name(to) == self.values[node.input[0]].dtype

    def _neutral_operand(self, node: onnx.NodeProto) -> str | None:
        """The operand that ``node`` passes on unchanged (``x + 0``, ``x * 1``, ...: :func:`~eqsat.onnx.neutral.
        kept_operand`; e.g. the zero biases of freshly initialized layers), else None. The importer drops such a
        node: ``x`` is its value."""
        def value(name: str) -> tuple[tuple[int, ...], str] | None:
            v = self.values.get(name)
            return (tuple(v.shape), v.dtype) if v is not None else None

        return kept_operand(node, self.consts.get, value)

    def _composite(self, node: onnx.NodeProto) -> bool:
        """Whether ``node`` is part of a composite (:mod:`eqsat.onnx.patterns`): its inner nodes are skipped, and
        at its last one the composite IR node is made; where it cannot be (not float32, a shape the operator
        refuses, constant operands to fold), the covered nodes are imported one by one instead. A one-node
        composite (a LayerNormalization, Softmax or Gelu node) is an origin record, written back verbatim while
        the program keeps it; a decomposed one is not: the exporter writes its own form, the one onnxruntime
        fuses (the exporters' forms are not always fused: dynamo's erf-GELU and LLaMA's RMSNorm are not)."""
        match = self._covered.get(node.output[0]) if node.output else None
        if match is None:
            return False
        if match.output not in node.output:
            return True
        mapped = None
        if not all(i in self.consts for i in match.inputs):
            ins = [self.value(i) for i in match.inputs]
            if match.op in ATTENTION_OPS and len(ins) == 5:  # two masks added in turn: one, their sum
                try:
                    both = binary(self, "ewadd", ins[3], ins[4])
                except ShapeError:  # a sum that broadcasts otherwise at other sizes (T5's bias [1, H, S, S]
                    both = None     # plus the mask [B, 1, S, S] at batch 1): the nodes one by one
                ins = [*ins[:3], both] if both is not None else ins
            if match.op in ATTENTION_OPS and len(ins) == 4 and ins[3].op == "weight" and len(ins[3].shape) < len(ins[0].shape):
                # a constant mask of lower rank (e.g. [S, Sk]): the IR adds at equal rank
                ins[3] = self.reshape(ins[3], (1,) * (len(ins[0].shape) - len(ins[3].shape)) + tuple(ins[3].shape))
            attrs = match.ir_attrs([i.shape for i in ins]) if len(ins) < 5 else None
            if match.op == "rotary" and not all(halves_repeat(self._table(i)) or self._computed_table(i)
                                                for i in match.inputs[1:]):
                attrs = None  # cos and sin, now folded, are not rotary caches: the nodes one by one
            if match.op == "rotary_part" and attrs is not None and not all(
                    tables_repeat(attrs, self._table(i)) or not attrs[1] and self._computed_table(i)
                    for i in match.inputs[1:]):
                attrs = None  # likewise: the entries the operator reads must repeat
            if floats(ins) is not None and attrs is not None:
                try:
                    mapped = self.make(match.op, ins, attrs)
                except ShapeError:
                    mapped = None
        if mapped is None and match.op == "addnorm":  # operands of two shapes: the Add, then the norm alone
            add, norm = match.nodes
            self._node(add)
            self._covered[norm.output[0]] = Match("layernorm", match.attrs, (norm.input[0], *match.inputs[2:]),
                                                  match.output, (norm,))
            return self._composite(norm)
        if mapped is None:
            for inner in match.nodes:
                self._node(inner)
        else:
            self.values[match.output] = mapped
            if len(match.nodes) == 1 or match.op in ("linear", "addnorm"):  # written back as they were
                self.record_origin(list(match.nodes), [match.output])
        return True

    def _computed_table(self, name: str) -> bool:
        """Whether ``name`` is a rotary table computed each call whose halves repeat by construction (a decode
        step's, from the position: :func:`eqsat.ops.rotary.computed_halves_repeat`)."""
        def shape(n: str) -> tuple[int, ...] | None:
            v = self.values.get(n)
            return tuple(v.shape) if v is not None else None
        return name not in self.consts and computed_halves_repeat(name, self._producers.get, self.consts.get, shape)

    def _table(self, name: str) -> np.ndarray | None:
        """The constant ``name`` is, or the constant table it is a Slice of along its other axes than the last (a
        generic import's rotary cos and sin: :func:`eqsat.generic.import_generic` writes them so), with the value's rank."""
        if name in self.consts or (node := self._producers.get(name)) is None:
            return self.consts.get(name)
        if node.op_type != "Slice" or len(node.input) < 4 or node.input[0] not in self.consts \
                or node.input[1] not in self.consts or node.input[3] not in self.consts:
            return None
        table = self.consts[node.input[0]]
        axes = [int(a) % max(table.ndim, 1) for a in np.asarray(self.consts[node.input[3]]).reshape(-1)]
        if table.ndim == 0 or table.ndim - 1 in axes or np.any(np.asarray(self.consts[node.input[1]]) != 0):
            return None
        return table

    def _unit_range(self, node: onnx.NodeProto) -> bool:  # (a decode step's new positions: no run fits them)
        step = self.consts.get(node.input[2]) if node.op_type == "Range" and len(node.input) == 3 else None
        return step is not None and np.asarray(step).size == 1 and abs(float(step)) == 1.0

    def _opaque(self, node: onnx.NodeProto, implicit: list[str]) -> None:
        present = [i for i in node.input if i]
        slots = [sum(1 for i in node.input[:k] if i) if name else -1 for k, name in enumerate(node.input)]
        names = present + implicit
        ins = [self.value(i) for i in names]
        shapes = self.runs.output_types(node, names, ins, {**self.sized, **self.typed})
        # values at the fingerprints past a size no monomial fits, and for a Range of step 1 (length: their difference)
        touches = self._unit_range(node) or any(n in self.fp_opaque for n in names) or any(
            isinstance(d, Dim) and d.mono is None for i in ins for d in i.shape)
        known = {n: self.fp_values[n] for n in names if n in self.fp_values} if touches else {}
        fps = opaque_fingerprints(self.runs, node, names, ins, self.weights, known)
        attr_bytes = tuple(a.SerializeToString() for a in node.attribute)
        outs = [o for o in node.output]
        for k, name in enumerate(outs):
            if not name:
                continue
            shape, dtype = shapes[k]
            if fps[k] is None and name in self.fitted:
                fps[k] = self.fitted[name]
            elif fps[k] is None and self.generic and self.input_shapes:
                self.unfitted.append(name)
            self.values[name] = ir.opaque(node.op_type, ins, opaque_shape(shape, fps[k]), dtype, domain=node.domain,
                                          attr_bytes=attr_bytes, out_index=k, n_outputs=len(outs),
                                          slots=slots, implicit=implicit)


def check_importable(model: onnx.ModelProto, source: str | None = None) -> None:
    """Refuse a model the import cannot take, each check before any work on it: an opset below :data:`MIN_OPSET`,
    bfloat16 values, an operator whose output is random, a model onnxruntime cannot load (:func:`check_loads`;
    ``source``: the user's name of the model)."""
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < MIN_OPSET:
        raise InputError(f"model uses opset {opset}; eqsat needs opset >= {MIN_OPSET} "
                         "(convert it with onnx.version_converter.convert_version(model, 13))")
    check_bfloat16(model)
    check_deterministic(model)
    check_loads(model, source)


def import_model(model: onnx.ModelProto | str | os.PathLike,
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None, generic: bool = False,
                 source: str | None = None, simplify: Simplify | None = None) -> Graph:
    """Import an ONNX model (a ModelProto or a path) into the IR, its dynamic dimensions at ``input_shapes``.
    ``generic``: the program is to work at every size (:mod:`eqsat.generic`): the shape computations that
    meet the data are kept, not folded at these sizes (:func:`eqsat.onnx.axes.live.live_shapes`). ``source``: how
    messages name the model (default: its path, where a path is given). ``simplify``: a rewrite of the prepared model
    a generic import starts from (:func:`eqsat.generic.import_generic` passes the shape-generic writer's, which sits
    above this layer)."""
    if not isinstance(model, onnx.ModelProto):
        source = source or os.fsdecode(model)
        model = load_model(model)
    prepared = prepare(model, input_shapes or {})
    check_importable(prepared, source)  # before any work: the rewrite below runs the model at further sizes
    if generic and simplify is not None:
        prepared = simplify(prepared, input_shapes or {})
    shared = Walks(live_shapes(prepared) if generic else set())  # (the walks below share it)
    importer = _Importer(prepared, input_shapes or {}, generic, source=source, shared=shared)
    graph = importer.run()
    folded = importer.small_folded()
    if folded is not None:  # composites whose constants the walk computes (TorchScript's rotary bounds): again
        importer = _Importer(prepared, input_shapes or {}, generic, source=source, folded=folded, shared=shared)
        graph = importer.run()
    if importer.unfitted and not is_large(prepared):  # shapes that follow the data: read off runs, imported again
        fitted = fitted_fingerprints(prepared, importer.unfitted, symbol_values(prepared, input_shapes or {}))
        if fitted:
            graph = _Importer(prepared, input_shapes or {}, generic, fitted, source, folded, shared).run()
    check_value_sizes(graph)
    return graph
