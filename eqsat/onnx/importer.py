"""ONNX -> IR.

Every static-shaped ONNX model (opset >= 13) imports: operators the rules know become IR operators
(Conv bias, broadcasting MatMul and a Gemm that is not exactly a ``linear`` are decomposed into them), constant
subgraphs (weight-only subgraphs, the Shape/Gather/Unsqueeze/Concat chains torch exports) are folded with
onnxruntime (onnx's reference evaluator where onnxruntime cannot), Identity and Dropout are dropped, and every
other operator (a custom domain, If/Loop/Scan, a node that cannot be folded) is carried as an opaque node with its
attributes, subgraphs, omitted optional inputs and implicit inputs (the outer-scope values its subgraphs
read). Output shapes come from onnx shape inference, else from one onnxruntime run of the model
(:mod:`eqsat.onnx.folding`).
Overridable initializers stay inputs with their defaults, and declared input/output types are kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import ir
from ..errors import DynamicShapeError, InputError, ShapeError
from ..ir import Graph, Node, Origin
from ..ops.batchnorm import EPS_UNIT
from ..shapes import SAME
from . import origins
from .folding import NONDETERMINISTIC, ModelRuns, constant_value, dense, dtype_name
from .io import check_bfloat16, load_model
from .patterns import Match, find_composites, resolve_axis
from .subgraphs import implicit_inputs

MIN_OPSET = 13


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=D1,D2,...`` flags."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            shape = ()
        if not sep or not name or not shape:
            raise InputError(f"--input-shape {spec!r}: expected NAME=D1,D2,... with positive integers")
        if any(d <= 0 for d in shape):
            raise InputError(f"--input-shape {spec!r}: dimension {min(shape)} is not positive; every dimension "
                             "must be at least 1 (eqsat cannot optimize empty or negative-size tensors)")
        if name in out and out[name] != shape:
            raise InputError(f"--input-shape {name} is given twice, as {out[name]} and {shape}; give it once")
        out[name] = shape
    return out


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


class _Importer:
    def __init__(self, model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]]):
        self.model = model
        self.g = model.graph
        self.input_shapes = dict(input_shapes)
        self.opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
        self.values: dict[str, Node] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.weights: dict[str, np.ndarray] = {}
        self._names: set[str] = set()
        self.origins: list[Origin] = []
        self.runs = ModelRuns(model, self.input_shapes, self.values, self.weights)

    # -- helpers -------------------------------------------------------------------------------
    def _unique(self, base: str) -> str:
        base = base or "w"
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        self._names.add(name)
        return name

    def weight(self, array: np.ndarray, hint: str) -> Node:
        name = self._unique(hint)
        arr = np.asarray(array, order="C")
        self.weights[name] = arr
        return ir.weight(name, arr.shape, arr.dtype.name)

    def value(self, name: str) -> Node:
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            node = self.weight(self.consts[name], name)
            self.values[name] = node
            return node
        raise InputError(f"value {name!r} is used before it is defined; the model is not topologically sorted")

    def reshape(self, node: Node, shape: tuple[int, ...]) -> Node:
        if tuple(node.shape) == tuple(shape):
            return node
        if node.op == "weight" and node.name is not None:
            return self.weight(self.weights[node.name].reshape(shape), node.name)
        return ir.make("reshape", [node], tuple(shape))

    # -- main ----------------------------------------------------------------------------------
    def run(self) -> Graph:
        if self.opset < MIN_OPSET:
            raise InputError(f"model uses opset {self.opset}; eqsat needs opset >= {MIN_OPSET} "
                             "(convert it with onnx.version_converter.convert_version(model, 13))")
        check_bfloat16(self.model)
        for init in self.g.initializer:
            self.consts[init.name] = numpy_helper.to_array(init)
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
        self._covered: dict[str, Match] = {n.output[0]: m for m in find_composites(self.g, self.consts, self.opset)
                                             for n in m.nodes}
        for node in self.g.node:
            if not self._composite(node):
                self._node(node)
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
        node = ir.input_(vi.name, dims, dtype_name(tt.elem_type))
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
        if node.op_type == "Shape" and ins[0] in self.values and node.domain in ("", "ai.onnx"):
            shape = np.array(self.values[ins[0]].shape, dtype=np.int64)
            a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
            self.consts[node.output[0]] = shape[a.get("start", 0): a.get("end", len(shape))]
            return
        if any(ins + implicit) and all((i == "" or i in self.consts) for i in ins + implicit) \
                and node.domain in ("", "ai.onnx") and node.op_type not in NONDETERMINISTIC:
            folded = self.runs.fold(node, implicit, self.consts)
            if folded is not None:
                self.consts.update(folded)
                return
        if node.op_type in ("Identity", "Dropout") and node.domain in ("", "ai.onnx") and ins[0]:
            self.values[node.output[0]] = self.value(ins[0])
            return
        mapped = None
        if node.domain in ("", "ai.onnx") and not implicit:
            handler = getattr(self, f"_op_{node.op_type}", None)
            if handler is not None:
                try:
                    mapped = handler(node, [self.value(i) if i else None for i in ins])
                except ShapeError:
                    mapped = None
        if mapped is None:
            self._opaque(node, implicit)
        else:
            self.values[node.output[0]] = mapped
            self.record_origin([node], [node.output[0]])

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
            if match.op == "attention" and len(ins) == 4 and ins[3].op == "weight" and len(ins[3].shape) < len(ins[0].shape):
                # a constant mask of lower rank (e.g. [S, Sk]): the IR adds at equal rank
                ins[3] = self.reshape(ins[3], (1,) * (len(ins[0].shape) - len(ins[3].shape)) + tuple(ins[3].shape))
            attrs = match.ir_attrs([i.shape for i in ins])
            if self._is_float(*ins) and attrs is not None:
                try:
                    mapped = ir.make(match.op, ins, attrs)
                except ShapeError:
                    mapped = None
        if mapped is None:
            for inner in match.nodes:
                self._node(inner)
        else:
            self.values[match.output] = mapped
            if len(match.nodes) == 1 or match.op == "linear":  # a MatMul and its bias Add: written back as they were
                self.record_origin(list(match.nodes), [match.output])
        return True

    def _opaque(self, node: onnx.NodeProto, implicit: list[str]) -> None:
        present = [i for i in node.input if i]
        slots, k = [], 0
        for name in node.input:
            slots.append(k if name else -1)
            k += bool(name)
        names = present + implicit
        ins = [self.value(i) for i in names]
        shapes = self.runs.output_types(node, names, ins)
        attr_bytes = tuple(a.SerializeToString() for a in node.attribute)
        outs = [o for o in node.output]
        for k, name in enumerate(outs):
            if not name:
                continue
            shape, dtype = shapes[k]
            self.values[name] = ir.opaque(node.op_type, ins, shape, dtype, domain=node.domain,
                                          attr_bytes=attr_bytes, out_index=k, n_outputs=len(outs),
                                          slots=slots, implicit=implicit)

    # -- operators the rules know ----------------------------------------------------------------
    @staticmethod
    def _attrs(node: onnx.NodeProto) -> dict:
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    @staticmethod
    def _is_float(*nodes: Node | None) -> bool:
        return all(n is not None and n.dtype == "float32" for n in nodes)

    def _unary(self, op: str, node: onnx.NodeProto, ins: list) -> Node | None:
        return ir.make(op, [ins[0]]) if self._is_float(ins[0]) else None

    def _op_Relu(self, node, ins):
        return self._unary("relu", node, ins)

    def _op_Tanh(self, node, ins):
        return self._unary("tanh", node, ins)

    def _op_Sigmoid(self, node, ins):
        return self._unary("sigmoid", node, ins)

    def _binary(self, op: str, a: Node, b: Node) -> Node | None:
        if not self._is_float(a, b):
            return None
        ra, rb = len(a.shape), len(b.shape)
        if ra < rb:
            a = self.reshape(a, (1,) * (rb - ra) + tuple(a.shape))
        elif rb < ra:
            b = self.reshape(b, (1,) * (ra - rb) + tuple(b.shape))
        if not a.shape or len(a.shape) > 4:
            return None
        return ir.make(op, [a, b])

    def _op_Softmax(self, node, ins):
        """A Softmax a composite match gave back (an attention the operator refused): still one softmax node."""
        (x,) = ins
        axis = resolve_axis(int(self._attrs(node).get("axis", -1)), len(x.shape))
        if not self._is_float(x) or not 1 <= len(x.shape) <= 4 or axis is None:
            return None
        return ir.make("softmax", [x], (axis,))

    def _op_Add(self, node, ins):
        return self._binary("ewadd", ins[0], ins[1])

    def _op_Mul(self, node, ins):
        return self._binary("ewmul", ins[0], ins[1])

    def _op_MatMul(self, node, ins):
        a, b = ins
        if not self._is_float(a, b):
            return None
        sa, sb = tuple(a.shape), tuple(b.shape)
        if len(sa) < 2 or len(sb) < 2:
            return None
        if len(sb) == 2:  # [..., M, K] x [K, N]: flatten the leading dimensions
            lead = sa[:-1]
            a2 = self.reshape(a, (int(np.prod(lead)), sa[-1]))
            out = ir.make("matmul", [a2, b], (0,))
            return self.reshape(out, lead + (sb[-1],))
        if len(sa) == len(sb) and sa[:-2] == sb[:-2]:
            batch = int(np.prod(sa[:-2]))
            out = ir.make("matmul", [self.reshape(a, (batch,) + sa[-2:]), self.reshape(b, (batch,) + sb[-2:])], (0,))
            return self.reshape(out, sa[:-1] + (sb[-1],))
        return None

    def _op_Gemm(self, node, ins):
        """``linear(A, B, C)`` where the Gemm is exactly one (:meth:`_gemm_linear`), else ``matmul`` (of ``A`` and
        ``B`` transposed as the Gemm says), times ``alpha``, plus ``beta * C``. A transposed constant ``B`` is a new
        weight; the origin record keeps the original, so an unchanged Gemm is written back as it was."""
        a, b = ins[0], ins[1]
        c = ins[2] if len(ins) > 2 else None
        at = self._attrs(node)
        if not self._is_float(a, b) or len(a.shape) != 2 or len(b.shape) != 2:
            return None
        if at.get("transB", 0):
            b = self.weight(self.weights[b.name].T, b.name) if b.op == "weight" else ir.make("transpose", [b], (1, 0))
        alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
        linear = self._gemm_linear(a, b, c) if not at.get("transA", 0) and alpha == beta == 1.0 else None
        if linear is not None:
            return linear
        if at.get("transA", 0):
            a = ir.make("transpose", [a], (1, 0))
        out = ir.make("matmul", [a, b], (0,))
        if alpha != 1.0:
            out = ir.make("ewmul", [out, self.weight(np.full((1, 1), alpha, np.float32), "alpha")])
        if c is not None:
            if beta != 1.0:
                if c.op != "weight":
                    return None
                c = self.weight(self.weights[c.name] * np.float32(beta), c.name)
            out = self._binary("ewadd", out, c)
        return out

    def _gemm_linear(self, a: Node, b: Node, c: Node | None) -> Node | None:
        """``linear(a, b, c)`` for ``Gemm(a, b, c)`` (no transA, alpha and beta 1, ``b`` already [k, n]) when ``b`` and
        ``c`` are constants and ``c`` is a bias over the columns ([n], or [1, n] as a new weight of shape [n]); else
        None. Without ``c`` the Gemm stays a ``matmul``: a zero bias would be an Add no one wrote once the program
        changes it (its ``linear`` is written as a Gemm with that bias)."""
        n = b.shape[1]
        if b.op != "weight" or c is None or c.op != "weight" or not self._is_float(c) or c.shape not in ((n,), (1, n)):
            return None
        return ir.make("linear", [a, b, self.reshape(c, (n,))])

    def _window_attrs(self, node, kernel: tuple[int, int]) -> tuple[int, int, int, int] | None:
        at = self._attrs(node)
        if any(d != 1 for d in at.get("dilations", [1, 1])) or at.get("ceil_mode", 0):
            return None
        sh, sw = at.get("strides", [1, 1])
        auto = at.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto == "VALID":
            return sh, sw, 0, 0
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if sh == 1 and sw == 1 and kernel[0] % 2 and kernel[1] % 2:
                return sh, sw, SAME, SAME
            return None
        pads = at.get("pads", [0, 0, 0, 0])
        if pads[0] != pads[2] or pads[1] != pads[3]:
            return None
        ph, pw = pads[0], pads[1]
        if kernel[0] % 2 and ph == kernel[0] // 2 and kernel[1] % 2 and pw == kernel[1] // 2:
            ph, pw = SAME, SAME  # the IR's canonical spelling of "k // 2 on each side"
        return sh, sw, ph, pw

    def _op_Conv(self, node, ins):
        x, w = ins[0], ins[1]
        bias = ins[2] if len(ins) > 2 else None
        if not self._is_float(x, w) or len(x.shape) != 4 or len(w.shape) != 4:
            return None
        win = self._window_attrs(node, tuple(w.shape[2:]))
        if win is None:
            return None
        sh, sw, ph, pw = win
        kh, kw = w.shape[2], w.shape[3]
        if (ph == SAME) != (pw == SAME):  # mixed: spell both out
            ph, pw = (kh // 2 if ph == SAME else ph), (kw // 2 if pw == SAME else pw)
        out = ir.make("conv2d", [x, w], (sh, sw, ph, pw, 0))
        if bias is not None:
            out = ir.make("ewadd", [out, self.reshape(bias, (1, w.shape[0], 1, 1))])
        return out

    def _pool(self, node, ins, kind: int):
        (x,) = ins[:1]
        at = self._attrs(node)
        if not self._is_float(x) or len(x.shape) != 4 or len(node.output) > 1 and node.output[1]:
            return None
        kh, kw = at["kernel_shape"]
        win = self._window_attrs(node, (kh, kw))
        if win is None:
            return None
        sh, sw, ph, pw = win
        if (ph == SAME) != (pw == SAME):
            ph, pw = (kh // 2 if ph == SAME else ph), (kw // 2 if pw == SAME else pw)
        if kind == 1 and at.get("count_include_pad", 0) and (ph != 0 or pw != 0):
            return None
        return ir.make("pool", [x], (kind, kh, kw, sh, sw, ph, pw, 0))

    def _op_MaxPool(self, node, ins):
        return self._pool(node, ins, 0)

    def _op_AveragePool(self, node, ins):
        return self._pool(node, ins, 1)

    def _op_GlobalAveragePool(self, node, ins):
        (x,) = ins
        if not self._is_float(x) or len(x.shape) != 4:
            return None
        return ir.make("pool", [x], (1, x.shape[2], x.shape[3], 1, 1, 0, 0, 0))

    def _op_BatchNormalization(self, node, ins):
        if len(node.output) > 1 and any(node.output[1:]):
            return None
        x = ins[0]
        if not self._is_float(*ins) or len(x.shape) != 4:
            return None
        eps = float(self._attrs(node).get("epsilon", 1e-5))
        return ir.make("batchnorm", ins, (int(round(eps * (1 / EPS_UNIT))),))  # 1 / EPS_UNIT is exactly 1e12

    def _op_Concat(self, node, ins):
        if not self._is_float(*ins) or len(ins[0].shape) > 4:
            return None
        axis = self._attrs(node)["axis"] % len(ins[0].shape)
        return ir.make("concat", ins, (axis,)) if len(ins) > 1 else ins[0]

    def _op_Transpose(self, node, ins):
        (x,) = ins
        if len(x.shape) > 4:
            return None
        perm = tuple(self._attrs(node).get("perm", list(reversed(range(len(x.shape))))))
        return ir.make("transpose", [x], perm)

    def _target(self, node, x: Node) -> tuple[int, ...] | None:
        out = None
        if node.op_type == "Reshape":
            if node.input[1] not in self.consts:
                return None
            shape = [int(d) for d in self.consts[node.input[1]]]
            allowzero = self._attrs(node).get("allowzero", 0)
            shape = [x.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
            if -1 in shape:
                known = int(np.prod([d for d in shape if d != -1]))
                shape[shape.index(-1)] = int(np.prod(x.shape)) // max(known, 1)
            out = tuple(shape)
        elif node.op_type == "Flatten":
            axis = self._attrs(node).get("axis", 1) % (len(x.shape) + 1) if x.shape else 0
            out = (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
        else:  # Squeeze / Unsqueeze
            axes = self._attrs(node).get("axes")
            if axes is None and len(node.input) > 1:
                if node.input[1] not in self.consts:
                    return None
                axes = [int(a) for a in self.consts[node.input[1]]]
            if node.op_type == "Squeeze":
                axes = [a % len(x.shape) for a in axes] if axes else [i for i, d in enumerate(x.shape) if d == 1]
                out = tuple(d for i, d in enumerate(x.shape) if i not in axes)
            else:
                if not axes:
                    return None  # Unsqueeze without axes: not a valid node; carried as an opaque operator
                rank = len(x.shape) + len(axes)
                axes = sorted(a % rank for a in axes)
                dims = list(x.shape)
                for a in axes:
                    dims.insert(a, 1)
                out = tuple(dims)
        return out

    def _reshape_like(self, node, ins):
        x = ins[0]
        target = self._target(node, x)
        if target is None or not target or len(target) > 4 or int(np.prod(target)) != int(np.prod(x.shape)):
            return None
        if tuple(target) == tuple(x.shape):
            return x
        return ir.make("reshape", [x], target)

    _op_Reshape = _reshape_like
    _op_Flatten = _reshape_like
    _op_Squeeze = _reshape_like
    _op_Unsqueeze = _reshape_like


def import_model(model: onnx.ModelProto | str | os.PathLike,
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Graph:
    """Import an ONNX model (a ModelProto or a path) into the IR."""
    if not isinstance(model, onnx.ModelProto):
        model = load_model(model)
    return _Importer(model, input_shapes or {}).run()
