"""What the importer asks onnxruntime (and onnx) for: constant nodes folded to their values, the output types of
operators carried opaque (onnx shape inference on the node alone, else an onnxruntime run of the part of the
model they depend on),
and the values of Constant nodes and sparse initializers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from ..errors import InputError
from ..ir import Node
from .io import session
from .subgraphs import implicit_inputs
from .windows import pooled, rounds_up

NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                              "Multinomial", "Bernoulli"})
"""operators never folded to constants: each run of the model draws new values"""

Type = tuple[tuple[int, ...], str]
"""a value's static shape and dtype name"""


def dtype_name(elem_type: int) -> str:
    """The numpy dtype name of an ONNX element type."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def dense(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """A sparse tensor (initializer or Constant) as a dense array."""
    values = numpy_helper.to_array(sparse.values)
    out = np.zeros(tuple(sparse.dims), values.dtype)
    indices = numpy_helper.to_array(sparse.indices) if sparse.HasField("indices") else np.zeros(0, np.int64)
    if indices.ndim == 2:  # [NNZ, rank] coordinates
        out[tuple(indices.T)] = values
    else:  # [NNZ] positions in the flattened tensor
        out.reshape(-1)[indices] = values
    return out


_CONSTANT_DTYPES = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                    "value_ints": np.int64, "value_string": np.object_, "value_strings": np.object_}


def constant_value(attr: onnx.AttributeProto) -> np.ndarray:
    """The value of a Constant node, whichever of its attributes holds it."""
    if attr.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(attr.t)
    if attr.type == onnx.AttributeProto.SPARSE_TENSOR:
        return dense(attr.sparse_tensor)
    return np.array(helper.get_attribute_value(attr), dtype=_CONSTANT_DTYPES.get(attr.name))


GATHERS = {"Gather": 1, "GatherElements": 1, "GatherND": 1}
"""operators that read an integer operand as indices: op type -> its position"""


def indices_read(graph: onnx.GraphProto) -> set[str]:
    """The values ``graph``'s nodes read as indices (:data:`GATHERS`): a run that only needs sizes feeds them zeros,
    which index every axis, and every other integer input ones, an attention mask keeping every position (a zero
    mask would mask them all, which some kernels refuse: onnxruntime's GroupQueryAttention reads the sequence
    lengths off the mask, and a length of -1 is out of its range)."""
    return {n.input[k] for n in graph.node if (k := GATHERS.get(n.op_type)) is not None and len(n.input) > k}


FOLD_MEMO_BYTES = 1 << 16
"""folds whose inputs and values are each at most this many bytes are kept (:attr:`ModelRuns.folds`): shape
arithmetic, not a weight transposed"""


def _fold_key(node: onnx.NodeProto, feeds: Mapping[str, np.ndarray]) -> bytes | None:
    """A digest of ``node`` and its inputs' values (None where they are large)."""
    if sum(np.asarray(v).nbytes for v in feeds.values()) > FOLD_MEMO_BYTES or \
            any(np.asarray(v).dtype.kind not in "biufc" for v in feeds.values()):
        return None
    h = hashlib.blake2b(node.SerializeToString(deterministic=True), digest_size=20)
    for name, v in feeds.items():
        a = np.ascontiguousarray(v)
        h.update(b"|%s|%s|%s|" % (name.encode(), a.dtype.str.encode(), ",".join(map(str, a.shape)).encode()))
        h.update(a.tobytes())
    return h.digest()


@dataclass
class Walks:
    """What the walks of one model at one set of sizes share (:func:`eqsat.onnx.importer.import_model` walks it up
    to three times): its live Shapes (:func:`eqsat.onnx.axes.live.live_shapes`) and the folds made."""

    live: set[str]
    folds: dict[bytes, dict[str, np.ndarray] | None] = field(default_factory=dict)


class ModelRuns:
    """onnxruntime and onnx on the model being imported. ``values`` and ``weights`` are the importer's (read when
    asked: the input leaves for a run of the model, the integer weights shape inference may read)."""

    def __init__(self, model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]],
                 values: Mapping[str, Node], weights: Mapping[str, np.ndarray],
                 folds: dict[bytes, dict[str, np.ndarray] | None] | None = None):
        self.model = model
        self.folds = {} if folds is None else folds
        """small folds made so far (a digest of the node and its inputs -> its values), shared by the imports of
        one model (:func:`eqsat.onnx.importer.import_model` walks it up to three times: a 30-layer decoder's 3,000
        folds of shape arithmetic, each a session, made once)"""
        self.g = model.graph
        self.input_shapes = input_shapes
        self.values = values
        self.weights = weights
        self._runtime: dict[str, Type] = {}
        self.runs = 0
        """the runs of (parts of) the model made for the shapes shape inference cannot give"""
        self.ran = 0
        self._whole_tried = False
        """the nodes those runs ran, together (a node of a part run again counted again)"""

    def node_model(self, node: onnx.NodeProto, names: list[str], types: list[Type],
                    inits: list[onnx.TensorProto] | None = None) -> onnx.ModelProto:
        """A one-node model of ``node`` whose inputs are ``names`` (explicit, then implicit inputs)."""
        vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), s)
               for n, (s, d) in zip(names, types)]
        graph = helper.make_graph([node], "node", vis, [onnx.ValueInfoProto(name=o) for o in node.output if o],
                                  initializer=inits or [])
        opsets = [helper.make_opsetid(o.domain, o.version) for o in self.model.opset_import]
        return helper.make_model(graph, opset_imports=opsets, ir_version=self.model.ir_version or 8)

    def fold(self, node: onnx.NodeProto, implicit: list[str], consts: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The values of a node of constant inputs (``consts`` holds them), computed now (onnxruntime, else onnx's
        reference evaluator); None if neither can, and the node is then carried as an opaque operator."""
        from onnx.reference import ReferenceEvaluator

        names = list(dict.fromkeys([i for i in node.input if i] + implicit))
        feeds = {n: consts[n] for n in names}
        key = _fold_key(node, feeds)
        if key is not None and key in self.folds:
            return self.folds[key]
        model = self.node_model(node, names, [(v.shape, v.dtype.name) for v in feeds.values()])
        outs = [o for o in node.output if o]
        got: dict[str, np.ndarray] | None = None
        try:
            results = session(model).run(outs, feeds)
            got = {name: np.asarray(val) for name, val in zip(outs, results)}
        except Exception:  # noqa: BLE001 - a kernel onnxruntime lacks for these dtypes, ...
            try:
                results = ReferenceEvaluator(model).run(outs, feeds)
                got = {name: np.asarray(val) for name, val in zip(outs, results)}
            except Exception:  # noqa: BLE001 - neither can: carry the node
                got = None
        if key is not None and (got is None or sum(v.nbytes for v in got.values()) <= FOLD_MEMO_BYTES):
            self.folds[key] = got
        return got

    def output_types(self, node: onnx.NodeProto, names: list[str], ins: list[Node],
                     sized: Mapping[str, np.ndarray] | None = None) -> list[Type]:
        """Static output shapes and dtypes: onnx shape inference on the node alone, else a run of the model.
        ``sized``: the values at these sizes of small integer vectors the model computes from its shapes (the
        importer's, :attr:`eqsat.onnx.importer.Importer.sized`), read by the inference as constants: an Expand to a
        computed shape (transformers' ``repeat_kv`` in every layer) is then typed without running the layers before
        it."""
        unique = dict(zip(names, ins))
        inits = [numpy_helper.from_array(self.weights[n.name], name) for name, n in unique.items()
                 if n.op == "weight" and n.name is not None and n.name in self.weights
                 and self.weights[n.name].dtype.kind in "iub"]
        inits += [numpy_helper.from_array(np.asarray(sized[name]), name) for name in unique
                  if sized is not None and name in sized and name not in {t.name for t in inits}]
        model = self.node_model(node, list(unique), [(n.shape, n.dtype) for n in unique.values()], inits)
        found: dict[str, onnx.ValueInfoProto] = {}
        try:
            inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
            found = {v.name: v for v in list(inferred.graph.output) + list(inferred.graph.value_info)}
        except Exception:  # noqa: BLE001 - the run below gives the shapes, or names the problem
            pass
        result: list[Type] = []
        for o in node.output:
            if not o:
                result.append(((), "float32"))
                continue
            v = found.get(o)
            tt = v.type.tensor_type if v is not None else None
            if tt is None or not tt.elem_type or not tt.HasField("shape") \
                    or any(not d.HasField("dim_value") for d in tt.shape.dim):
                result.append(self._runtime_type(node, o))
            else:
                result.append((tuple(d.dim_value for d in tt.shape.dim), dtype_name(tt.elem_type)))
        if result and rounds_up(node) and node.input[0] in unique:  # onnxruntime's lengths, not onnx's (.windows)
            lengths = pooled(node, [int(d) for d in unique[node.input[0]].shape])
            result[0] = (tuple(lengths), result[0][1]) if lengths is not None else self._runtime_type(node, node.output[0])
        return result

    def _runtime_type(self, node: onnx.NodeProto, value: str) -> Type:
        """Shape and dtype of ``value`` from one onnxruntime run of the part of the model that ``node`` depends on
        (every value of it exposed, kept for the nodes asked about next), for operators onnx's shape inference
        cannot type (custom domains, Loop outputs, a Slice to a computed end)."""
        if value not in self._runtime and self.ran > len(self.g.node) and not self._whole_tried:
            # the parts run so far ran more nodes than the model has: every value of the model, in one run (tried
            # once: where the whole model does not run at these sizes, the parts go on as before)
            self._whole_tried = True
            try:
                self._runtime.update(self._run_all(node, whole=True))
            except InputError:
                pass
        if value not in self._runtime:
            self._runtime.update(self._run_all(node))
        if value not in self._runtime:
            raise InputError(f"{node.op_type} node {node.name!r}: onnxruntime gave no value for its output {value!r}")
        return self._runtime[value]

    def _part(self, node: onnx.NodeProto, whole: bool = False) -> onnx.ModelProto:
        """The model's nodes that ``node`` depends on (``node`` with them), every value they compute an output,
        with only the inputs and initializers they read: a run of it holds what those nodes compute, not the whole
        model's values and weights. ``whole``: every node of the model (where node after node asks, each part
        runs the one before it again: Swin V2's windows asked 48 times)."""
        producer = {o: n for n in self.g.node for o in n.output if o}
        wanted = [i for i in [*node.input, *implicit_inputs(node)] if i]
        seen: set[str] = set()
        kept: dict[int, onnx.NodeProto] = {id(node): node}
        if whole:
            kept = {id(n): n for n in self.g.node}
            wanted = []
        while wanted:
            name = wanted.pop()
            if name in seen or name not in producer:
                continue
            seen.add(name)
            n = producer[name]
            if id(n) not in kept:
                kept[id(n)] = n
                wanted.extend(i for i in [*n.input, *implicit_inputs(n)] if i)
        order = [n for n in self.g.node if id(n) in kept]  # the model's (topological) order
        read = {i for n in order for i in [*n.input, *implicit_inputs(n)] if i}
        model = onnx.ModelProto()
        model.ir_version = self.model.ir_version
        model.opset_import.extend(self.model.opset_import)
        model.functions.extend(self.model.functions)
        g = model.graph
        g.name = self.g.name
        g.node.extend(order)
        g.input.extend(vi for vi in self.g.input if vi.name in read)
        g.initializer.extend(t for t in self.g.initializer if t.name in read)
        g.sparse_initializer.extend(t for t in self.g.sparse_initializer if t.values.name in read)
        g.output.extend(onnx.ValueInfoProto(name=o) for n in order for o in n.output if o)
        return model

    def _run_all(self, node: onnx.NodeProto, whole: bool = False) -> dict[str, Type]:
        self.runs += 1
        model = self._part(node, whole)
        self.ran += len(model.graph.node)
        g = model.graph
        for vi in g.input:
            if vi.name in self.input_shapes:
                for d, n in zip(vi.type.tensor_type.shape.dim, self.input_shapes[vi.name]):
                    d.Clear()
                    d.dim_value = n
        rng = np.random.default_rng(0)
        feeds: dict[str, np.ndarray] = {}
        initialized = {t.name for t in g.initializer}
        indices = indices_read(g)
        for vi in g.input:
            leaf = self.values.get(vi.name)
            if leaf is None or leaf.op != "input" or vi.name in initialized:
                continue
            dt = np.dtype(leaf.dtype)
            feeds[vi.name] = rng.standard_normal(leaf.shape).astype(dt) if dt.kind == "f" else \
                np.zeros(leaf.shape, dt) if vi.name in indices else np.ones(leaf.shape, dt)
        try:
            sess = session(model)
            names = [o.name for o in sess.get_outputs()]
            return {k: (tuple(int(d) for d in np.shape(v)), np.asarray(v).dtype.name)
                    for k, v in zip(names, sess.run(names, feeds))}
        except Exception as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(
                f"{node.op_type} node {node.name!r} (domain {node.domain or 'ai.onnx'}): onnx shape inference cannot "
                f"give its output shapes, and onnxruntime cannot run the model ({reason}); eqsat needs every value's "
                "shape and verifies in onnxruntime, so it cannot optimize this model") from exc
