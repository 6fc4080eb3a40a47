"""Operator costs measured the way the end-to-end run executes the program: onnxruntime on the CPU, with the
end-to-end run's session options (:func:`eqsat.timing.session_options`: all graph optimizations, a fixed
intra-op thread count), so that what onnxruntime fuses is timed fused.

What is timed for one operator key (:func:`op_model`):

* the operator as its :mod:`eqsat.ops` ONNX emitter writes it (an opaque operator as the ONNX node it
  carries), in a model of its own. Operands that are weights in the programs eqsat imports are initializers
  (:func:`constant_operands`), because onnxruntime pre-packs constant weights and fuses only constant
  biases: a conv2d's kernel, a 2-D matmul operand B, batchnorm's parameters, a broadcast operand of an
  element-wise operator. The key does not say which operands are weights; these are the importer's forms.
* a conv2d or matmul with a fused activation (``act``) is emitted as Conv + Relu (MatMul + Tanh, ...), which
  onnxruntime fuses (FusedConv; FusedGemm after MatMul+Add): the activation costs what it costs fused.
* an *epilogue* (:func:`epilogue_producer`): batchnorm of a 4-D tensor, ``ewadd``/``ewmul`` of a 4-D tensor by
  a ``[1, C, 1, 1]`` operand (a conv's bias or folded scale) and ``ewadd`` of a 2-D/3-D tensor by a
  ``[1, N]``/``[1, 1, N]`` operand (a dense layer's bias). onnxruntime folds these into the Conv (Conv+BN,
  Conv+Add, Conv+Mul) or the MatMul (MatMul+Add -> Gemm) that produces them, so such an operator costs its
  marginal time: the producer followed by it, minus the producer alone (both timed; at least ``MIN_US``).
  Folding batch norm into the conv's weights therefore gains nearly nothing, as in onnxruntime.
* the NCHWc layout: onnxruntime runs a chain of convolutions (and the pooling, element-wise and concat
  operators between them) in a blocked layout, reordering only where the chain starts and ends. A conv timed
  alone pays a ReorderInput and a ReorderOutput that it does not pay inside a chain, so the reorders the
  optimized one-operator graph holds are subtracted (each costs half a ReorderInput + ReorderOutput pair on
  that tensor, timed once per shape). An operator onnxruntime cannot run blocked (a slice, a transpose, an
  opaque one) on a 4-D tensor whose channels fill whole blocks breaks a chain, and pays those two reorders
  (:data:`BLOCKED_OPS`): this assumes its neighbours run blocked, true for the convolutional models.

What could not be modelled, because an e-node's cost is a function of its key alone (no context):

* the producer of an epilogue: the key carries its shape signature, not its producer. A batchnorm after a
  concat, or a bias add after a pooling, is charged the fused (near-zero) price although onnxruntime runs it
  on its own. In the built-in models these signatures occur only after Conv/MatMul.
* a standalone activation (``relu`` of a conv's output when the rules split the ``act`` attribute off) costs
  its standalone time, although onnxruntime would fuse it back; after a residual add (the common case) it
  does run alone.
* fusions across more than two nodes (attention, LayerNorm, GELU), whether a chain really starts or ends at an
  operator (the reorders at a program's input and output are charged to nobody), and what running in context
  changes (caches warmed by the producer, memory reuse): a wide merged conv timed alone can take several
  times what it takes inside the program.

Each model is timed in rounds, its cost the fastest call of all rounds (:func:`min_ms`), checked against the
analytic estimate and re-measured as :func:`cost.measure.robust_time` does; the Python call overhead of one
``run`` (timed once per instance on a one-element model) is subtracted. Those checks miss contention that
slows every round alike (another process on the same core, or streaming memory on the other one, for
seconds: a conv measured 2.6x its time in two agreeing rounds, a matmul with 8 MB of weights 2.2x), so fixed
probe operators (:data:`PROBES`) are timed before and after each measurement: when one runs ``CONTENDED``
times slower than its best time on record, the measurement is repeated after a pause, and one still
contended is used for the run but, like a timing that stays an outlier, never cached. The cache key: runtime ``ort-cpu``, the CPU's name and the thread count
(the cache's device), and the onnxruntime version with the version of this timing policy (its backend).
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from eqsat.ops import OPS
from eqsat.timing import median_ms, session_options

from .analytic import AnalyticCost
from .base import OpKey
from .cache import CostCache
from .measure import CachedTimings, Timing, TorchCost, opaque_model, robust_time

RUNTIME = "ort-cpu"
POLICY = 5
"""version of what is timed for a key; part of the cache key, so that a change re-times"""
OPSET = 17
MIN_US = 0.5
"""the least an operator costs: about one kernel dispatch in onnxruntime's sequential executor"""
ROUND_S = 0.02
"""the time one round aims at: fast operators run many calls per round, slow ones a few"""
CONTENDED = 1.6
"""the machine counts as contended while the probe runs this many times slower than its best time ever seen (an
idle 2-core machine reads 1.1-1.4 against that record; the contaminated timings to catch were 2-3x)"""
CONTENTION_RETRIES = 3
PROBES = (OpKey("conv2d", (1, 1, 0, 0, 0), ((1, 64, 28, 28), (64, 64, 1, 1)), (1, 64, 28, 28)),
          OpKey("matmul", (0,), ((64, 1024), (1024, 1024)), (64, 1024)))
"""fixed operators timed around every measurement (one in cache, one streaming 4 MB of weights, which another
process's memory traffic slows); their best times are kept in the cache, across runs"""
PRODUCER_K = 64
"""the reduction size of the producer an epilogue is timed after (its own cost is subtracted)"""

BLOCKED_OPS = frozenset({"conv2d", "pool", "ewadd", "ewmul", "relu", "sigmoid", "tanh", "concat", "batchnorm"})
"""operators onnxruntime's NCHWc transformer keeps in the blocked layout when their producers are blocked"""
REORDERS = ("ReorderInput", "ReorderOutput")

Feeds = dict[str, np.ndarray]


def min_ms(call: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` individually timed calls (ms): a round's summary here. Contention from another
    process on the same core stretches most calls of a long operator (a 2.5 ms conv ran 14.6 ms in the median
    of 8 calls, 2.6 ms in the fastest, at load 8 on 2 cores), so the median of a round is no robust summary."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def nchwc_block() -> int:
    """Channels per NCHWc block on this CPU: 16 with AVX-512, else 8."""
    try:
        with open("/proc/cpuinfo") as f:
            return 16 if "avx512f" in f.read() else 8
    except OSError:
        return 8


def reorder_model(shape: tuple[int, ...]) -> tuple[onnx.ModelProto, Feeds]:
    """ReorderInput then ReorderOutput of a 4-D tensor: the two layout changes at the ends of a blocked chain."""
    domain = "com.microsoft.nchwc"
    nodes = [helper.make_node("ReorderInput", ["x"], ["b"], domain=domain),
             helper.make_node("ReorderOutput", ["b"], ["y"], domain=domain, channels=shape[1])]
    graph = helper.make_graph(nodes, "reorder", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(domain, 1)])
    model.ir_version = min(model.ir_version, 10)
    return model, {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


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
    if key.op == "batchnorm":
        return frozenset(range(1, len(shapes)))
    if key.op in ("ewadd", "ewmul") and len(shapes) == 2:
        small = [k for k, s in enumerate(shapes) if tuple(s) != tuple(key.out_shape)]
        if len(small) == 1:
            return frozenset(small)
    return frozenset()


def epilogue_producer(key: OpKey) -> tuple[OpKey, int] | None:
    """(the producer onnxruntime would fuse this operator into, the operand it produces) for an epilogue's
    shape signature (see the module docstring), or None: the operator is timed on its own."""
    out = tuple(key.out_shape)
    if key.op == "batchnorm" and len(out) == 4:
        return _conv_producer(out), 0
    if key.op not in ("ewadd", "ewmul") or len(key.in_shapes) != 2:
        return None
    shapes = [tuple(s) for s in key.in_shapes]
    main = 0 if shapes[0] == out else 1
    other = shapes[1 - main]
    if shapes[main] != out or other == out:
        return None
    if len(out) == 4 and other == (1, out[1], 1, 1):
        return _conv_producer(out), main
    if key.op == "ewadd" and len(out) in (2, 3) and other == (1,) * (len(out) - 1) + (out[-1],):
        k = min(PRODUCER_K, out[-1])
        return OpKey("matmul", (0,), ((*out[:-1], k), (k, out[-1])), out), main
    return None


def _conv_producer(out: tuple[int, ...]) -> OpKey:
    n, c, h, w = out
    k = min(PRODUCER_K, c)
    return OpKey("conv2d", (1, 1, 0, 0, 0), ((n, k, h, w), (c, k, 1, 1)), out)


class _Builder:
    """The emitter the operator table's ONNX writers write one small model through."""

    opset = OPSET

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
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
        """A seeded random float32 operand: an initializer, or a graph input fed at every run."""
        value = self.rng.standard_normal(shape).astype(np.float32)
        if constant:
            return self.const(value, "w")
        name = self.fresh("x")
        self.inputs.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape)))
        self.feeds[name] = value
        return name

    def op(self, key: OpKey, given: dict[int, str] | None = None) -> str:
        """Emit one operator of ``key`` (operands in ``given`` already exist); its output's name."""
        entry = OPS[key.op]
        assert entry.onnx is not None
        consts = constant_operands(key)
        names = [(given or {}).get(k) or self.operand(tuple(s), k in consts) for k, s in enumerate(key.in_shapes)]
        return entry.onnx(self, key.attrs, names, key.in_shapes)

    def model(self, output: str, key: OpKey) -> onnx.ModelProto:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(key.dtype))
        graph = helper.make_graph(self.nodes, key.op, self.inputs,
                                  [helper.make_tensor_value_info(output, elem, list(key.out_shape))],
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="eqsat-cost")
        model.ir_version = min(model.ir_version, 10)
        return model


def op_model(key: OpKey, producer: tuple[OpKey, int] | None = None) -> tuple[onnx.ModelProto, Feeds] | None:
    """The small ONNX model timed for ``key`` (with ``producer``'s operator feeding the given operand), and
    seeded feeds for it; None where the operator has no ONNX form (it is then estimated)."""
    if key.op == "opaque":
        return opaque_model(key) if producer is None else None
    entry = OPS.get(key.op)
    if entry is None or entry.onnx is None or (producer is not None and OPS[producer[0].op].onnx is None):
        return None
    b = _Builder(np.random.default_rng(0))
    given = {producer[1]: b.op(producer[0])} if producer is not None else None
    return b.model(b.op(key, given), key), b.feeds


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

    free_ops = TorchCost.free_ops
    """layout-only operators are free, except the ones onnxruntime runs as copies (slices, transposes)"""

    def __init__(self, cache: CostCache | None = None, threads: int = 1, repeats: int = 10, warmup: int = 2):
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads, self.repeats, self.warmup = threads, repeats, warmup
        self.device_name = f"{RUNTIME}:{cpu_name()}:{threads}t"
        self.backend = f"onnxruntime-{ort.__version__}:policy-{POLICY}"
        self.name = f"{RUNTIME}:{threads}t"
        self.cache = cache if cache is not None else CostCache()
        self._memo: dict[OpKey, float] = {}
        self._reorders: dict[tuple[int, ...], float] = {}
        self._probes: list[tuple[OpKey, Callable[[], object]]] = []
        self._fallback = AnalyticCost("cpu")
        self.measured = 0
        """operators timed by this instance (cache misses)"""
        self.sessions = 0
        """onnxruntime sessions this instance built (0 when every cost came from the cache)"""
        self.outliers = 0
        """operators whose timing stayed an outlier (used in this run, not cached)"""

    def timing(self, key: OpKey) -> Timing:
        """Time one operator now, bypassing the cache: on its own (NCHWc reorders accounted for as in a chain),
        or as the marginal cost of an epilogue."""
        estimate = self._fallback.op_cost(key)
        producer = epilogue_producer(key)
        built = op_model(key, producer)
        timed = self._time(built, estimate) if built is not None else None
        if timed is None:  # nothing onnxruntime can run: the estimate is the cost, and a deterministic one
            return Timing(estimate, (), estimate, True)
        alone, nodes = timed
        base = op_model(producer[0]) if producer is not None else None
        first = self._time(base, self._fallback.op_cost(producer[0])) if base is not None and producer else None
        if first is not None:  # the producer's reorders, and the session overhead, cancel
            return Timing(max(alone.us - first[0].us, MIN_US), alone.medians, estimate,
                          alone.trusted and first[0].trusted)
        us = alone.us - self.overhead_us - self.reorders_us(key, nodes) + self.chain_break_us(key, nodes)
        return Timing(max(us, MIN_US), alone.medians, estimate, alone.trusted)

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
        and result whose channels fill whole NCHWc blocks (0 for the operators of :data:`BLOCKED_OPS`)."""
        if key.op in BLOCKED_OPS or any(n in REORDERS for n in nodes):
            return 0.0
        consts = constant_operands(key)
        shapes = [tuple(s) for k, s in enumerate(key.in_shapes) if k not in consts] + [tuple(key.out_shape)]
        return sum(self.reorder_pair_us(s) / 2 for s in shapes if len(s) == 4 and s[1] % self.block == 0)

    def reorder_pair_us(self, shape: tuple[int, ...]) -> float:
        """Microseconds of a ReorderInput + ReorderOutput pair on a 4-D tensor (timed once per shape)."""
        if shape not in self._reorders:
            copy = 2 * self._fallback.op_cost(OpKey("relu", (), (shape,), shape))  # two passes over the tensor
            timed = self._time(reorder_model(shape), copy)
            self._reorders[shape] = max(timed[0].us - self.overhead_us, 0.0) if timed is not None else 0.0
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
        it, repeated while the probe says the machine is contended; None where onnxruntime cannot run it."""
        runner = self._runner(*built)
        if runner is None:
            return None
        run, nodes = runner
        first = median_ms(run, self.warmup, 1) * 1e3
        repeats = int(min(self.repeats, max(3, ROUND_S * 1e6 // max(first, 1e-3))))
        best: Timing | None = None
        for attempt in range(CONTENTION_RETRIES):
            before = self.contention()
            timing = robust_time(lambda n: min_ms(run, n) * 1e3, estimate_us, repeats)
            quiet = max(before, self.contention()) <= CONTENDED
            if quiet:
                return timing, nodes
            best = timing if best is None or timing.us < best.us else best
            time.sleep(0.05 * (attempt + 1))
        assert best is not None
        return Timing(best.us, best.medians, best.estimate_us, False), nodes

    def contention(self) -> float:
        """How many times slower than their best times on record the probes run now (1: an idle machine)."""
        if not self._probes:
            for probe in PROBES:
                built = op_model(probe)
                assert built is not None
                runner = self._runner(*built)
                assert runner is not None
                median_ms(runner[0], self.warmup, 1)
                self._probes.append((OpKey("probe", probe.attrs, probe.in_shapes, probe.out_shape), runner[0]))
        worst = 0.0
        for key, run in self._probes:
            now = min_ms(run, 5) * 1e3
            record = self.cache.get(self.device_name, self.backend, key)
            if record is None or now < record:
                self.cache.put(self.device_name, self.backend, key, now)
                record = now
            worst = max(worst, now / record)
        return worst

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
