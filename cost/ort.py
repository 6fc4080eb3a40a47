"""Operator costs measured the way the end-to-end run executes the program: onnxruntime on the CPU, with the
end-to-end run's session options (:func:`eqsat.measurement.clock.session_options`: all graph optimizations, a fixed
intra-op thread count), so that what onnxruntime fuses is timed fused.

What is timed for one operator key (:func:`op_model`):

* the operator as its :mod:`eqsat.ops` ONNX emitter writes it (an opaque operator as the ONNX node it
  carries), in a model of its own. Operands that are weights in the programs eqsat imports are initializers
  (:func:`constant_operands`), because onnxruntime pre-packs constant weights and fuses only constant
  biases: a conv2d's kernel, a 2-D matmul operand B, a linear's W and b, batchnorm's parameters, a broadcast operand of an
  element-wise operator, written as the exporter writes it (:func:`written_shape`: without its leading
  1-dimensions). The key does not say which operands are weights; these are the importer's forms.
* what one instance adds to a program (:meth:`OrtCost.in_program_us`): the model's time less the overhead of
  one ``run`` call; an operator under ``SMALL_US`` whose copies' activations fit ``HOT_BYTES`` is timed as n
  independent copies in one model against one copy, (n copies - one) / (n - 1), so the overhead (several times a small operator's time, drifting by
  +-2 us between sessions) cancels exactly and each instance keeps its dispatch. Timed alone, a small matmul
  read anywhere from ``MIN_US`` to 2x its time, and the ILP picked a merged Q/K/V projection five times wider
  than the one it replaced at ``MIN_US``: bert measured 0.80x.
* a conv2d or matmul with a fused activation (``act``) is emitted as Conv + Relu (MatMul + Tanh, ...), which
  onnxruntime fuses (FusedConv; FusedGemm only after MatMul+Add became a Gemm, none into a MatMul:
  :data:`eqsat.onnx.fusions.GEMM_ACTIVATION`): the activation costs what it costs fused.
* an *epilogue* (:func:`epilogue_producer`; the fusions: :func:`eqsat.onnx.fusions.epilogue`): batchnorm of a
  4-D tensor, ``ewadd``/``ewmul`` of a 4-D tensor by a ``[1, C, 1, 1]`` operand (a conv's bias or folded scale)
  and ``ewadd`` of a 2-D/3-D tensor by a ``[1, N]``/``[1, 1, N]`` operand (a dense layer's bias), and ``scale``
  (attention's scale of the scores, split off by ``attention_split``: FusedMatMul's alpha). onnxruntime folds
  these into the Conv (Conv+BN, Conv+Add, Conv+Mul) or the MatMul (MatMul+Add -> Gemm; with a 3-D operand
  Reshape + Gemm + Reshape) that produces them, so such an operator costs its marginal time: the producer
  followed by it, minus the producer alone as the IR holds it (:func:`ir_spelling`: the 2-D matmul between
  reshapes that the exporter writes as one N-D MatMul), both timed, at least ``MIN_US``.
* one kernel, one price (:meth:`OrtCost.op_cost`): a matmul of an N-D operand by a 2-D weight costs its 2-D
  key's price (one GEMM of the flattened rows either way), and a ``linear`` the sum of its parts' prices
  (:func:`linear_parts`: the 2-D matmul and the bias epilogue), as the exporter writes both alike. A dense layer
  split into matmul and bias add then costs what the ``linear`` costs, exactly: timed twice, the same kernel
  read 10-40% apart, and the extraction took the difference for a gain. Folding batch norm into the conv's weights
  therefore gains nearly nothing, as in onnxruntime.
* the NCHWc layout: onnxruntime runs a chain of convolutions (and the pooling, element-wise and concat
  operators between them) in a blocked layout, reordering only where the chain starts and ends. A conv timed
  alone pays a ReorderInput and a ReorderOutput that it does not pay inside a chain, so the reorders the
  optimized one-operator graph holds are subtracted (each costs half a ReorderInput + ReorderOutput pair on
  that tensor, timed once per shape). An operator onnxruntime cannot run blocked (a slice, a transpose, an
  opaque one) on a 4-D tensor whose channels fill whole blocks breaks a chain, and pays those two reorders
  (:data:`BLOCKED_OPS`): this assumes its neighbours run blocked, true for the convolutional models. So does a
  conv that onnxruntime runs unblocked timed alone (a grouped conv of fewer channels a group than a block:
  :data:`BLOCKED_ALONE`).

* a runtime kernel of a newer opset (``sdpa``, ``rope``): its one-operator model is upgraded to opset 23 as the
  exporter writes it (:mod:`eqsat.onnx.kernels`); ``rotary``'s and ``rope``'s cos and sin are initializers (the
  importer takes only constant tables). ``sdpa``'s model transposes its keys, which in a program onnxruntime merges
  with the keys' own Transpose: an overestimate by at most one transpose, against the kernel.

What could not be modelled, because an e-node's cost is a function of its key alone (no context):

* the producer of an epilogue: the key carries its shape signature, not its producer. A batchnorm after a
  concat, or a bias add after a pooling, is charged the fused (near-zero) price although onnxruntime runs it
  on its own. In the built-in models these signatures occur only after Conv/MatMul.
* a standalone activation (``relu`` of a conv's output when the rules split the ``act`` attribute off) costs
  its standalone time, although onnxruntime would fuse it back; after a residual add (the common case) it
  does run alone.
* a value cut into parts by slices: each slice costs one Slice of its part, while the exporter writes one
  Split of all parts (:mod:`eqsat.onnx.forms`), and a bias added to each part after a merged matmul is
  charged as an epilogue although the Split sits between (the exporter moves it before the Split, where
  onnxruntime fuses it).
* a reshape the exporter's forms absorb: the importer's ``reshape -> 2-D matmul -> reshape`` is written as one
  N-D MatMul, yet its two reshapes are charged (``matmul_flatten`` puts the N-D matmul, priced as its 2-D key, beside
  it). And a fused epilogue still costs at least ``MIN_US``, though it dispatches nothing: a 2-D dense layer's
  bias is charged 0.5 us where onnxruntime's Gemm adds about nothing, so on a small model (a [1, 16, 32]
  activation) two dense layers do not pay for the two reshapes that flatten them (a whole ViT does).
* fusions across more than two nodes (attention, LayerNorm, GELU), whether a chain really starts or ends at an
  operator (the reorders at a program's input and output are charged to nobody), and what running in context
  changes (weights a program streams from memory while an operator timed alone keeps them cached; memory
  reuse): a wide merged conv timed alone can take several times what it takes inside the program. (Timing
  large-weight operators as copies with cold weights was tried: it ranked the built-in BERT's merged programs
  worse, Spearman 0.75 against 0.97.)

Each model is timed in rounds, its cost the fastest call of all rounds (:func:`~eqsat.cost.measure.min_ms`),
checked against the analytic estimate and re-measured as :func:`~eqsat.cost.measure.robust_time` does, and
guarded by the contention probes (:class:`~eqsat.cost.measure.Contention`: timed before and after each
measurement; a measurement taken while a probe runs ``CONTENDED`` times slower than its baseline is repeated,
and one still contended is used for the run but, like a timing that stays an outlier, never cached).
The cache key: runtime ``ort-cpu``, the CPU's name and the thread count (the cache's device), and the
onnxruntime version with the version of this timing policy (its backend).
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from eqsat.measurement.clock import median_ms, session_options
from eqsat.onnx import fusions
from eqsat.onnx.kernels import UpgradeError, pending, upgrade
from eqsat.ops import OPS
from eqsat.ops.base import UPGRADE_DOMAIN

from .analytic import AnalyticCost
from .base import OpKey
from .cache import CostCache
from .measure import (
    PROBES,
    CachedTimings,
    Contention,
    Timing,
    TorchCost,
    min_ms,
    opaque_model,
    probe_reading,
    robust_time,
)

RUNTIME = "ort-cpu"
POLICY = 15
"""version of what is timed for a key; part of the cache key, so that a change re-times"""
OPSET = 17
MIN_US = 0.5
"""the least an operator costs: about one kernel dispatch in onnxruntime's sequential executor"""
ROUND_S = 0.02
"""the time one round aims at: fast operators run many calls per round, slow ones a few"""
SMALL_US = 100.0
"""an operator faster than this (one copy, run overhead removed) is timed as several copies in one model"""
COPIES_US = 400.0
"""the time the copies of a small operator aim at together (between ``MIN_COPIES`` and ``MAX_COPIES`` copies)"""
MIN_COPIES, MAX_COPIES = 4, 64
HOT_BYTES = 512 << 10
"""the activations (fed operands and results) that copies of a small operator may hold in all"""
PRODUCER_K = 64
"""the reduction size of the producer an epilogue is timed after (its own cost is subtracted)"""

BLOCKED_OPS = frozenset({"conv2d", "pool", "ewadd", "ewmul", "relu", "sigmoid", "tanh", "concat", "batchnorm"})
"""operators onnxruntime's NCHWc transformer keeps in the blocked layout when their producers are blocked"""
BLOCKED_ALONE = frozenset({"conv2d"})
"""operators of :data:`BLOCKED_OPS` that onnxruntime runs blocked timed alone, wherever it can (a conv: reorders around
it): one timed alone without reorders breaks a blocked chain in a program too. PP-OCRv5's detector, its depthwise
1x1 convs merged into grouped ones of 2-4 channels a group, measured 0.85x end to end for an estimated gain: each
such conv, and the adds, batch norms and activations around it, ran unblocked between reorders"""
REORDERS = ("ReorderInput", "ReorderOutput")

Feeds = dict[str, np.ndarray]


def nchwc_block() -> int:
    """Channels per NCHWc block on this CPU: 16 with AVX-512, else 8."""
    try:
        with open("/proc/cpuinfo") as f:
            return 16 if "avx512f" in f.read() else 8
    except OSError:
        return 8


def reorder_model(shape: tuple[int, ...], copies: int = 1) -> tuple[onnx.ModelProto, Feeds]:
    """ReorderInput then ReorderOutput of a 4-D tensor (``copies`` independent pairs): the two layout changes at
    the ends of a blocked chain."""
    domain = "com.microsoft.nchwc"
    nodes, inputs, outputs = [], [], []
    for c in range(copies):
        nodes += [helper.make_node("ReorderInput", [f"x{c}"], [f"b{c}"], domain=domain),
                  helper.make_node("ReorderOutput", [f"b{c}"], [f"y{c}"], domain=domain, channels=shape[1])]
        inputs.append(helper.make_tensor_value_info(f"x{c}", onnx.TensorProto.FLOAT, shape))
        outputs.append(helper.make_tensor_value_info(f"y{c}", onnx.TensorProto.FLOAT, shape))
    graph = helper.make_graph(nodes, "reorder", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(domain, 1)])
    model.ir_version = min(model.ir_version, 10)
    rng = np.random.default_rng(0)
    return model, {f"x{c}": rng.standard_normal(shape).astype(np.float32) for c in range(copies)}


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or ``cpu`` where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def constant_operands(key: OpKey) -> frozenset[int]:
    """Operands timed as initializers (weights in the imported programs; see the module docstring)."""
    shapes = key.in_shapes
    if key.op == "conv2d":
        return frozenset({1})
    if key.op == "matmul" and len(shapes) == 2 and len(shapes[1]) == 2:
        return frozenset({1})
    if key.op == "linear":  # W and b: constants wherever a linear is made (importer, rules)
        return frozenset({1, 2})
    if key.op == "batchnorm":
        return frozenset(range(1, len(shapes)))
    if key.op in ("rotary", "rope", "rotary_part", "rope_part"):  # the caches: constants the importer checked (eqsat.ops.rotary)
        return frozenset({1, 2})
    if key.op in ("ewadd", "ewmul") and len(shapes) == 2:
        small = [k for k, s in enumerate(shapes) if tuple(s) != tuple(key.out_shape)]
        if len(small) == 1:
            return frozenset(small)
    return frozenset()


def written_shape(key: OpKey, k: int) -> tuple[int, ...]:
    """The shape the exporter writes constant operand ``k`` in (:mod:`eqsat.onnx.forms`): an element-wise
    operator's broadcast constant without its leading 1-dimensions (:func:`eqsat.onnx.fusions.stripped`), which
    is the spelling onnxruntime fuses (a dense layer's ``[1, 1, N]`` bias as ``[N]``: MatMul + Add -> Gemm)."""
    shape = tuple(key.in_shapes[k])
    if key.op not in ("ewadd", "ewmul") or shape == tuple(key.out_shape) or len(shape) < 2 or shape[0] != 1:
        return shape
    return fusions.stripped(shape)


def epilogue_producer(key: OpKey) -> tuple[OpKey, int] | None:
    """(the producer onnxruntime would fuse this operator into, the operand it produces) for an epilogue's
    shape signature (:func:`eqsat.onnx.fusions.epilogue`), or None: the operator is timed on its own. The
    producer: a conv2d, a matmul by a 2-D weight (a dense layer's bias), or for a ``scale`` (attention's scale of
    the scores, FusedMatMul's alpha) a batched matmul of two computed operands."""
    found = fusions.epilogue(key.op, key.in_shapes, key.out_shape)
    if found is None:
        return None
    fusion, operand = found
    out = tuple(key.out_shape)
    if fusion.ir[0] == "conv2d":
        return _conv_producer(out), operand
    k = min(PRODUCER_K, out[-1])
    weight = (k, out[-1]) if fusion is fusions.MATMUL_ADD else (*out[:-2], k, out[-1])
    return OpKey("matmul", (0,), ((*out[:-1], k), weight), out), operand


def linear_parts(key: OpKey) -> tuple[OpKey, ...]:
    """The IR's parts of a ``linear`` of an x of rank 2 or more (``linear_split``'s form): the 2-D matmul of the
    flattened rows by W and the bias add of the product by ``[1, .., 1, n]``, which the exporter writes as the
    ``linear`` itself is written (MatMul + Add, which onnxruntime fuses alike: :data:`eqsat.onnx.fusions.MATMUL_ADD`).
    Priced so, a ``linear`` costs what its parts cost, not what a second timing of the same ONNX said: timed
    apart, the two differed by 10-40% on the 384-wide decoders' dense layers (noise and the Gemm's bias pass beside
    the epilogue's producer), and the search split every dense layer for an estimated 1.25x that measured 1.00x.
    Empty for any other key.

    >>> [(p.op, p.in_shapes) for p in linear_parts(OpKey("linear", (), ((1, 16, 32), (32, 8), (8,)), (1, 16, 8)))]
    [('matmul', ((16, 32), (32, 8))), ('ewadd', ((1, 16, 8), (1, 1, 8)))]
    """
    if key.op != "linear" or len(key.in_shapes) != 3 or len(key.in_shapes[0]) < 2 or len(key.in_shapes[1]) != 2:
        return ()
    x, (k, n) = tuple(key.in_shapes[0]), tuple(key.in_shapes[1])
    rows = int(np.prod(x[:-1]))
    out = (*x[:-1], n)
    return (OpKey("matmul", (0,), ((rows, k), (k, n)), (rows, n), key.dtype),
            OpKey("ewadd", (), (out, (1,) * (len(x) - 1) + (n,)), out, key.dtype))


def ir_spelling(key: OpKey) -> OpKey:
    """The key the IR holds for a producer that the exporter writes as ``key``: a matmul of an N-D operand by a
    2-D weight is ``reshape -> 2-D matmul -> reshape`` in the importer's IR (the exporter writes it back as one N-D
    MatMul), so its epilogue's marginal cost is counted from the 2-D matmul's. (``matmul_flatten`` also puts the
    N-D matmul itself in the e-graph; onnxruntime runs it as the 2-D one's kernel, at about its cost.)

    >>> ir_spelling(OpKey("matmul", (0,), ((1, 16, 32), (32, 8)), (1, 16, 8))).in_shapes
    ((16, 32), (32, 8))
    """
    a, b = (tuple(s) for s in key.in_shapes[:2]) if len(key.in_shapes) >= 2 else ((), ())
    if key.op != "matmul" or len(a) <= 2 or len(b) != 2:
        return key
    rows = int(np.prod(a[:-1]))
    return OpKey("matmul", key.attrs, ((rows, a[-1]), b), (rows, b[-1]), key.dtype)


def reshape_dispatch(key: OpKey) -> OpKey:
    """The key timed and cached for ``key``: for a reshape, one reshape of a one-element float32 tensor, whatever
    the shapes and element type. Inside a program onnxruntime's Reshape aliases its input, so it costs its
    dispatch whatever its size (timed alone, a graph input to a graph output, it would copy the tensor); and one
    key for all keeps the e-graph's price of a reshape equal to the decoded program's where the e-graph does not
    know a shape (rank 5), and the same price for a mask's (bool) reshapes as for a float32 one's.

    >>> reshape_dispatch(OpKey("reshape", (1, 16, 32), ((16, 32),), (1, 16, 32)))
    OpKey(op='reshape', attrs=(1,), in_shapes=((1,),), out_shape=(1,), dtype='float32')
    """
    return OpKey("reshape", (1,), ((1,),), (1,)) if key.op == "reshape" else key


def _conv_producer(out: tuple[int, ...]) -> OpKey:
    n, c, h, w = out
    k = min(PRODUCER_K, c)
    return OpKey("conv2d", (1, 1, 0, 0, 0), ((n, k, h, w), (c, k, 1, 1)), out)


class _Builder:
    """The emitter the operator table's ONNX writers write one small model through."""

    opset = OPSET
    upgrade = True

    def __init__(self, rng: np.random.Generator, dtype: str = "float32"):
        self.rng = rng
        self.dtype = np.dtype(dtype)
        """the element type of the operands and results (a float16 program's operators are timed in float16)"""
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: Feeds = {}

    def fresh(self, base: str) -> str:
        return f"{base}_{len(self.nodes) + len(self.inits) + len(self.inputs)}"

    def emit(self, op_type: str, inputs: list[str], base: str, **attrs: Any) -> str:
        out = self.fresh(base)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def const(self, array: np.ndarray, base: str) -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array, order="C"), name))
        return name

    def operand(self, shape: tuple[int, ...], constant: bool) -> str:
        """A seeded random operand of the builder's element type: an initializer, or a graph input fed at every
        run."""
        value = self.rng.standard_normal(shape).astype(self.dtype)
        if constant:
            return self.const(value, "w")
        name = self.fresh("x")
        self.inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(self.dtype),
                                                         list(shape)))
        self.feeds[name] = value
        return name

    def op(self, key: OpKey, given: dict[int, str] | None = None) -> str:
        """Emit one operator of ``key`` (operands in ``given`` already exist); its output's name."""
        entry = OPS[key.op]
        assert entry.onnx is not None
        consts = constant_operands(key)
        names = [(given or {}).get(k) or self.operand(written_shape(key, k) if k in consts else tuple(s), k in consts)
                 for k, s in enumerate(key.in_shapes)]
        return entry.onnx(self, key.attrs, names, key.in_shapes)

    def model(self, outputs: list[str], key: OpKey) -> onnx.ModelProto:
        elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        graph = helper.make_graph(self.nodes, key.op, self.inputs,
                                  [helper.make_tensor_value_info(o, elem, list(key.out_shape)) for o in outputs],
                                  initializer=self.inits)
        opsets = [helper.make_opsetid("", OPSET)]
        if any(n.domain == UPGRADE_DOMAIN for n in self.nodes):  # a kernel of a newer opset: timed upgraded
            opsets.append(helper.make_opsetid(UPGRADE_DOMAIN, 1))
        model = helper.make_model(graph, opset_imports=opsets, producer_name="eqsat-cost")
        model.ir_version = min(model.ir_version, 10)
        return upgrade(model) if pending(model) else model


def op_model(key: OpKey, producer: tuple[OpKey, int] | None = None,
             copies: int = 1) -> tuple[onnx.ModelProto, Feeds] | None:
    """The small ONNX model timed for ``key`` (with ``producer``'s operator feeding the given operand), and
    seeded feeds for it; None where the operator has no ONNX form (it is then estimated). ``copies``: that many
    independent instances, each on operands of its own (distinct values, so that onnxruntime's common
    subexpression elimination keeps them apart), each output a graph output."""
    if key.op == "opaque":
        return opaque_model(key, copies) if producer is None else None
    entry = OPS.get(key.op)
    if entry is None or entry.onnx is None or (producer is not None and OPS[producer[0].op].onnx is None):
        return None
    b = _Builder(np.random.default_rng(0), key.dtype if np.dtype(key.dtype).kind == "f" else "float32")
    outputs = []  # a float key's operators timed in its type; another's (a mask's, an index's) as float32
    for _ in range(copies):
        given = {producer[1]: b.op(producer[0])} if producer is not None else None
        outputs.append(b.op(key, given))
    try:
        return b.model(outputs, key), b.feeds
    except UpgradeError:  # a kernel of a newer opset that cannot be written here: estimated
        return None


def activation_bytes(model: onnx.ModelProto, feeds: Feeds) -> int:
    """Bytes of the model's fed operands and results (float32 results assumed)."""
    outs = sum(4 * int(np.prod([d.dim_value for d in o.type.tensor_type.shape.dim])) for o in model.graph.output)
    return sum(v.nbytes for v in feeds.values()) + outs


def runtime_nodes(model: onnx.ModelProto, threads: int = 1) -> list[str]:
    """The operator types onnxruntime runs for ``model`` after its graph optimizations, NCHWc reorders left
    out (the structure of what is timed: a fused pattern shows as one node)."""
    return [n for n in _session(model, threads)[1] if n not in REORDERS]


def _session(model: onnx.ModelProto, threads: int) -> tuple[ort.InferenceSession, list[str]]:
    """A session with the end-to-end run's options, and the operator types it runs after optimization."""
    with tempfile.TemporaryDirectory() as tmp:
        opts = session_options(threads)
        opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        optimized = onnx.load(opts.optimized_model_filepath)
    return sess, [n.op_type for n in optimized.graph.node]


class OrtCost(CachedTimings):
    """Times each operator (or the pattern onnxruntime fuses it into) in onnxruntime on the CPU.

    ``threads`` must be the end-to-end run's intra-op thread count (``--measure-threads``).
    """

    free_ops = TorchCost.free_ops - {"reshape"}
    """layout-only operators are free, except the ones onnxruntime runs as copies (slices, transposes) and
    ``reshape``: onnxruntime runs each Reshape as a kernel of its own (it aliases its input, but its dispatch
    costs about as much as a small element-wise operator), so a program pays for its reshapes (timed as
    :func:`reshape_dispatch`)"""

    def __init__(self, cache: CostCache | None = None, threads: int = 1, repeats: int = 10, warmup: int = 2):
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads, self.repeats, self.warmup = threads, repeats, warmup
        self.device_name = f"{RUNTIME}:{cpu_name()}:{threads}t"
        self.backend = f"onnxruntime-{ort.__version__}:policy-{POLICY}"
        self.name = f"{RUNTIME}:{threads}t"
        super().__init__(cache, AnalyticCost("cpu"))
        self._reorders: dict[tuple[int, ...], float] = {}
        self.sessions = 0
        """onnxruntime sessions this instance built (0 when every cost came from the cache)"""
        self.contention = Contention(self.cache, self.device_name, self.backend, self._probe_readers)

    def op_cost(self, key: OpKey) -> float:
        """Cached as :class:`~eqsat.cost.measure.CachedTimings` does, every reshape under one key
        (:func:`reshape_dispatch`), a matmul of an N-D operand by a 2-D weight under its 2-D key (:func:`ir_spelling`:
        onnxruntime runs both as one GEMM of the flattened rows), a ``linear`` as the sum of its parts
        (:func:`linear_parts`). One kernel, one price: two timings of one kernel differ by their noise (5-15% on a
        loaded machine), which the extraction would otherwise take for a gain."""
        parts = linear_parts(key)
        if parts:
            return sum(self.op_cost(p) for p in parts)
        return super().op_cost(reshape_dispatch(ir_spelling(key)))

    def timing(self, key: OpKey) -> Timing:
        """Time one operator now, bypassing the cache: on its own (NCHWc reorders accounted for as in a chain),
        or as the marginal cost of an epilogue."""
        estimate = self._fallback.op_cost(key)
        producer = epilogue_producer(key)
        timed = self.in_program_us(lambda copies: op_model(key, producer, copies), estimate)
        if timed is None:  # nothing onnxruntime can run: the estimate is the cost, and a deterministic one
            return Timing(estimate, (), estimate, True)
        own, nodes = timed
        if producer is not None:
            base = ir_spelling(producer[0])
            first = self.in_program_us(lambda copies: op_model(base, None, copies), self._fallback.op_cost(base))
            if first is not None:  # the producer's reorders cancel
                return Timing(max(own.us - first[0].us, MIN_US), own.medians, estimate, own.trusted and first[0].trusted)
        us = own.us - self.reorders_us(key, nodes) + self.chain_break_us(key, nodes)
        return Timing(max(us, MIN_US), own.medians, estimate, own.trusted)

    def in_program_us(self, build: Callable[[int], tuple[onnx.ModelProto, Feeds] | None],
                      estimate_us: float) -> tuple[Timing, list[str]] | None:
        """What one instance of the model ``build(copies)`` makes costs inside a program (us), and the operators
        onnxruntime runs for one: its time minus the run overhead (:attr:`overhead_us`). One that takes less
        than ``SMALL_US`` is timed as n copies (about ``COPIES_US`` in all) against one, (n copies - one) /
        (n - 1), which leaves out the overhead exactly and keeps each instance's dispatch: one small operator
        timed alone is mostly the overhead, whose drift between sessions (+-2 us) is larger than the operator.
        Copies have operands of their own, so only operators whose activations stay within ``HOT_BYTES`` in
        all are timed so (in a program, the producer leaves them in cache; 23 copies of a 173 KB reorder read 3.5x
        its time alone). None where onnxruntime cannot run it."""
        built = build(1)
        one = self._time(built, estimate_us) if built is not None else None
        if one is None:
            return None
        alone = one[0].us - self.overhead_us
        assert built is not None
        copies = min(MAX_COPIES, int(COPIES_US // max(alone, 1.0)), HOT_BYTES // max(activation_bytes(*built), 1))
        if alone >= SMALL_US or copies < MIN_COPIES:  # the overhead is small beside it, or its copies go cold
            return Timing(alone, one[0].medians, estimate_us, one[0].trusted), one[1]
        built = build(copies)
        many = self._time(built, copies * estimate_us) if built is not None else None
        if many is None:
            return Timing(alone, one[0].medians, estimate_us, one[0].trusted), one[1]
        us = (many[0].us - one[0].us) / (copies - 1)
        return Timing(us, one[0].medians, estimate_us, one[0].trusted and many[0].trusted), one[1]

    def reorders_us(self, key: OpKey, nodes: list[str]) -> float:
        """What the reorders onnxruntime put around this operator (``nodes``: what it ran) cost, one per side:
        a ReorderInput per blocked operand, a ReorderOutput of the result."""
        consts = constant_operands(key)
        fed = [tuple(s) for k, s in enumerate(key.in_shapes) if k not in consts and len(s) == 4]
        ins = fed[:nodes.count("ReorderInput")]
        outs = [tuple(key.out_shape)] * min(nodes.count("ReorderOutput"), 1 if len(key.out_shape) == 4 else 0)
        return sum(self.reorder_pair_us(s) / 2 for s in ins + outs)

    def chain_break_us(self, key: OpKey, nodes: list[str]) -> float:
        """The reorders an operator onnxruntime cannot run blocked costs between blocked neighbours: 4-D operands
        and result whose channels fill whole NCHWc blocks (0 for the operators of :data:`BLOCKED_OPS`, except a
        conv that onnxruntime runs unblocked on its own: a grouped conv of fewer channels a group than a block,
        which the rule merging grouped convs makes of depthwise ones; see :data:`BLOCKED_ALONE`)."""
        if any(n in REORDERS for n in nodes) or key.op in BLOCKED_OPS and key.op not in BLOCKED_ALONE:
            return 0.0
        consts = constant_operands(key)
        shapes = [tuple(s) for k, s in enumerate(key.in_shapes) if k not in consts] + [tuple(key.out_shape)]
        return sum(self.reorder_pair_us(s) / 2 for s in shapes if len(s) == 4 and s[1] % self.block == 0)

    def reorder_pair_us(self, shape: tuple[int, ...]) -> float:
        """Microseconds of a ReorderInput + ReorderOutput pair on a 4-D tensor (timed once per shape)."""
        if shape not in self._reorders:
            copy = 2 * self._fallback.op_cost(OpKey("relu", (), (shape,), shape))  # two passes over the tensor
            timed = self.in_program_us(lambda copies: reorder_model(shape, copies), copy)
            self._reorders[shape] = max(timed[0].us, 0.0) if timed is not None else 0.0
        return self._reorders[shape]

    @functools.cached_property
    def block(self) -> int:
        return nchwc_block()

    @functools.cached_property
    def overhead_us(self) -> float:
        """Microseconds of one ``run`` call of a one-element model: the Python and session overhead that every
        timed model pays once and the end-to-end program pays once in all."""
        key = OpKey("relu", (), ((1,),), (1,))
        built = op_model(key)
        assert built is not None
        timed = self._time(built, self._fallback.op_cost(key))
        return timed[0].us if timed is not None else 0.0

    def _time(self, built: tuple[onnx.ModelProto, Feeds], estimate_us: float) -> tuple[Timing, list[str]] | None:
        """Robust timing (us, overhead included) of one model's ``run`` and the operators onnxruntime ran for
        it, guarded by the probes (:class:`~eqsat.cost.measure.Contention`); None where onnxruntime cannot run
        it."""
        runner = self._runner(*built)
        if runner is None:
            return None
        run, nodes = runner
        first = median_ms(run, self.warmup, 1) * 1e3
        repeats = int(min(self.repeats, max(3, ROUND_S * 1e6 // max(first, 1e-3))))
        return self.contention.guard(lambda: robust_time(lambda n: min_ms(run, n) * 1e3, estimate_us, repeats)), nodes

    def _probe_readers(self) -> list[tuple[OpKey, Callable[[], float]]]:
        """The :data:`~eqsat.cost.measure.PROBES` as onnxruntime readings (us, :func:`~eqsat.cost.measure.probe_reading`)."""
        readers: list[tuple[OpKey, Callable[[], float]]] = []
        for probe in PROBES:
            built = op_model(probe)
            assert built is not None
            runner = self._runner(*built)
            assert runner is not None
            run = runner[0]
            median_ms(run, self.warmup, 1)
            readers.append((probe, functools.partial(probe_reading, run)))
        return readers

    def _runner(self, model: onnx.ModelProto, feeds: Feeds) -> tuple[Callable[[], object], list[str]] | None:
        try:
            sess, nodes = _session(model, self.threads)
        except Exception:  # an operator onnxruntime does not implement for these types: estimated instead
            return None
        self.sessions += 1
        binding = sess.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        for out in sess.get_outputs():
            binding.bind_output(out.name)
        quiet = ort.RunOptions()
        quiet.log_severity_level = 4  # a failing trial run is expected here (it is estimated): no error line
        try:
            sess.run_with_iobinding(binding, quiet)
        except Exception:  # fails at run time (operands it needs constant, a layout it cannot take): estimated
            return None
        return (lambda: sess.run_with_iobinding(binding)), nodes
