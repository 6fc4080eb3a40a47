"""Operator costs measured with torch, on the CPU (median of repeats, fixed thread count) or on a GPU
(cuDNN benchmark mode picking the fastest algorithm, TASO's 8 warm-ups + 32 runs, each run a CUDA-graph replay of
``GRAPH_COPIES`` back-to-back calls timed by CUDA events: what a node costs in the program replayed as a CUDA graph,
as ``--runtime torch-cuda`` runs it, not the Python launch loop that an eager timing measures; an operator that
cannot be captured is timed eagerly).
Opaque ONNX operators are timed as one-node models in onnxruntime (CPU).

Each operator is timed in rounds and costs the minimum of the rounds' medians. A timing far above the
analytic estimate, or a minimum that no second round confirms, is taken for contention (another process
on the same cores) and re-measured; one that stays an outlier is used for this run but never cached.

Those checks miss contention that slows every round alike (another process on the same core, or streaming
memory on the other one, for seconds: a conv measured 2.6x its time in two agreeing rounds), so fixed probe
operators (:data:`PROBES`) are timed before and after each measurement (:class:`Contention`, shared by every
measured cost model): when one runs ``CONTENDED`` times slower than its baseline, the measurement is repeated
after a pause, and one still contended is used for the run but never cached. A probe's baseline is a low
quantile (``BASELINE_QUANTILE``) of its recent readings (the last ``HISTORY``, kept in the cache across runs),
and never more than ``BASELINE_CAP`` times its best reading ever: the best reading alone is an extreme that
sinks with every reading taken and that idle readings stay 1.1-1.4x above, so a share of an idle run's timings
was refused the cache; a quantile does not sink as readings accumulate, and the cap keeps a long contended
spell from raising it. What
the guard cannot see: contention that already lasts through a fresh cache's first readings (they are the
baseline), and contention that slows the measured operator but not the probes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import AttributeProto, helper

from eqsat.errors import InputError
from eqsat.measurement.clock import cuda_event_ms, median_ms
from eqsat.measurement.torch_run import Replay, capture, exact_float32, require_torch
from eqsat.ops import OPS

from .analytic import AnalyticCost
from .base import OpKey
from .cache import CostCache

OUTLIER_FACTOR = 20.0
"""A timing above this many times the analytic estimate (of at least ``ESTIMATE_FLOOR_US``) is suspect."""
ESTIMATE_FLOOR_US = 10.0
AGREEMENT = 2.0
"""The minimum round median counts as confirmed when another round lies within this factor of it."""
CONTENDED = 1.4
"""the machine counts as contended while a probe runs this many times slower than its baseline (the contaminated
timings to catch were 1.7-3x); onnxruntime's probes read above 1.4x their baseline 2% of the time at load 4 on
2 cores. A timing is thus cached only while the probes ran within CONTENDED x BASELINE_CAP = 1.6x of their best."""
TORCH_CONTENDED = 1.6
"""torch's threshold: its probes jitter more (their median reading 1.34x the baseline at load 4 on 2 cores)"""
CONTENTION_RETRIES = 3
PROBES = (OpKey("conv2d", (1, 1, 0, 0, 0), ((1, 64, 28, 28), (64, 64, 1, 1)), (1, 64, 28, 28)),
          OpKey("matmul", (0,), ((64, 1024), (1024, 1024)), (64, 1024)))
"""fixed operators timed around every measurement (one in cache, one streaming 4 MB of weights, which another
process's memory traffic slows); their recent and best readings are kept in the cache, across runs. A call of
the matmul lasts a few milliseconds, longer than the scheduler's time slice: another process sharing the core
then stretches every call, as it stretches a long operator's. A probe of 0.25 ms (tried) slipped between time
slices and read idle while a 4.5 ms matmul was timed at 12.8 ms in two agreeing rounds."""
PROBE_CALLS = 3
"""calls per probe reading (its fastest), after one unmeasured call"""
REUSE_S = 0.05
"""a probe level read this recently (the previous measurement's closing one) also opens the next measurement"""
HISTORY = 64
"""recent readings per probe that the baseline is a quantile of"""
GRAPH_COPIES = 10
"""calls of an operator captured in one CUDA graph (its cost: a replay's time over this); each is a node of the
graph, as the operator is in a replayed program"""
BASELINE_QUANTILE = 0.2
BASELINE_CAP = 1.15
"""the baseline is at most this many times the probe's best reading ever (idle readings: 1.1-1.4x of it)"""


def _torch_fn(torch: Any, key: OpKey) -> Callable[..., Any] | None:
    """The operator as a function of torch tensors (its :mod:`eqsat.ops` entry's), or None if it has none."""
    entry = OPS.get(key.op)
    if entry is None or entry.torch is None:
        return None
    return entry.torch(torch, key.attrs, key.in_shapes)


@dataclass(frozen=True)
class Timing:
    """One operator's measured cost: ``us`` the minimum of the round medians; ``trusted`` False when it stayed
    an outlier after every re-measurement (such a timing is not cached)."""

    us: float
    medians: tuple[float, ...]
    estimate_us: float
    trusted: bool


def suspicious(medians: list[float], estimate_us: float) -> bool:
    """Whether the best of ``medians`` (us) looks like contention: far above the analytic estimate, or not
    confirmed by a second round within ``AGREEMENT`` of it."""
    ordered = sorted(medians)
    if ordered[0] > OUTLIER_FACTOR * max(estimate_us, ESTIMATE_FLOOR_US):
        return True
    return len(ordered) < 2 or ordered[1] > AGREEMENT * ordered[0]


def robust_time(time_round: Callable[[int], float], estimate_us: float, repeats: int, min_rounds: int = 2,
                max_rounds: int = 5, retry_repeats: int = 3, backoff_s: float = 0.005) -> Timing:
    """Time an operator in rounds (``time_round(n)`` returns the median of ``n`` runs, us) until the minimum
    is credible (see :func:`suspicious`) or ``max_rounds`` have run. Re-measurements take fewer runs
    (``retry_repeats``) and wait a little longer each time, so that a passing burst of contention can end."""
    medians = [float(time_round(repeats)) for _ in range(min_rounds)]
    while suspicious(medians, estimate_us) and len(medians) < max_rounds:
        time.sleep(backoff_s * len(medians))
        medians.append(float(time_round(min(repeats, retry_repeats))))
    return Timing(min(medians), tuple(medians), estimate_us, not suspicious(medians, estimate_us))


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


def probe_reading(run: Callable[[], object]) -> float:
    """One reading of a probe (us): the fastest of ``PROBE_CALLS`` calls after one unmeasured call (the first
    call after other work runs cold: torch's conv took 1.5-3x its time there)."""
    run()
    return min_ms(run, PROBE_CALLS) * 1e3


def probe_key(key: OpKey) -> OpKey:
    """The cache key of a probe's readings (never an operator's: its op is ``probe``)."""
    return OpKey("probe", key.attrs, key.in_shapes, key.out_shape, key.dtype)


def baseline(recent: list[float], best: float) -> float:
    """A probe's baseline (us): the ``BASELINE_QUANTILE`` of its ``recent`` readings (nearest rank), at most
    ``BASELINE_CAP`` times its ``best`` reading ever.

    >>> baseline([10.0, 11.0, 12.0, 30.0, 31.0], 10.0)
    11.0
    >>> baseline([30.0] * 10, 10.0)  # a long contended spell does not lift it past the cap
    11.5
    """
    ordered = sorted(recent)
    return min(ordered[int(BASELINE_QUANTILE * (len(ordered) - 1) + 0.5)], BASELINE_CAP * best)


class Contention:
    """The contention guard: probe operators read before and after a measurement (see the module docstring).

    ``probes`` builds, on first use, (key, reading) pairs: a reading returns the probe's time now (us)."""

    def __init__(self, cache: CostCache, device: str, backend: str,
                 probes: Callable[[], list[tuple[OpKey, Callable[[], float]]]], contended: float | None = None):
        self.cache, self.device, self.backend = cache, device, backend
        self.contended = contended
        """the level above which the machine counts as contended (None: ``CONTENDED``)"""
        self._build = probes
        self._probes: list[tuple[OpKey, Callable[[], float]]] | None = None
        self.refused = 0
        """measurements still contended after every retry (used, not cached)"""
        self._last: tuple[float, float] | None = None
        """(when, level) of the last reading that closed a measurement"""

    def level(self) -> float:
        """How many times slower than their baselines the probes run now (about 1 on an idle machine). Each
        reading joins the probe's history."""
        if self._probes is None:
            self._probes = self._build()
        worst = 0.0
        for key, read in self._probes:
            now = read()
            pkey = probe_key(key)
            best = self.cache.get(self.device, self.backend, pkey)
            if best is None or now < best:
                self.cache.put(self.device, self.backend, pkey, now)
                best = now
            self.cache.add_reading(self.device, self.backend, pkey, now, HISTORY)
            recent = self.cache.readings(self.device, self.backend, pkey, HISTORY)
            worst = max(worst, now / baseline(recent, best))
        return worst

    def guard(self, measure: Callable[[], Timing]) -> Timing:
        """``measure()`` while the probes say the machine is quiet before and after it; repeated after a pause
        while contended (``CONTENTION_RETRIES`` tries), and a measurement still contended is returned untrusted
        (the fastest of the tries: used for this run, never cached)."""
        best: Timing | None = None
        for attempt in range(CONTENTION_RETRIES):
            last = self._last
            before = last[1] if last is not None and time.perf_counter() - last[0] < REUSE_S else self.level()
            timing = measure()
            after = self.level()
            self._last = (time.perf_counter(), after)
            if max(before, after) <= (CONTENDED if self.contended is None else self.contended):
                return timing
            best = timing if best is None or timing.us < best.us else best
            time.sleep(0.05 * (attempt + 1))
        assert best is not None
        self.refused += 1
        return Timing(best.us, best.medians, best.estimate_us, False)


class CachedTimings:
    """What the measured cost models share: an operator's cost from this run's memo, else the cache, else timed
    now (and cached only when the timing is trusted).

    Past :attr:`deadline` (``time.perf_counter()``; set by :func:`timing_until`) an operator not timed yet is not
    timed: ``--time-limit`` bounds the search and extraction, and timing a cold cache's operators took 20 s of a
    6 s limit. It costs its analytic estimate scaled by what this run's timings made of the estimates (the median
    ratio of the operators of its kind, else of all; 1 before any), kept for the run, never cached, and counted
    in :attr:`estimated`."""

    def __init__(self, cache: CostCache | None, fallback: AnalyticCost):
        self.cache = cache if cache is not None else CostCache()
        self._fallback = fallback
        self._memo: dict[OpKey, float] = {}
        self._ratios: dict[str, list[float]] = {}
        """measured over estimated, by operator, of the costs this run read or timed"""
        self.measured = 0
        """operators timed by this instance (cache misses)"""
        self.outliers = 0
        """operators whose timing stayed an outlier (used in this run, not cached)"""
        self.estimated = 0
        """operators estimated, not timed, because :attr:`deadline` had passed"""
        self.deadline: float | None = None

    device_name: str
    backend: str

    def timing(self, key: OpKey) -> Timing:
        raise NotImplementedError

    def op_cost(self, key: OpKey) -> float:
        if key in self._memo:
            return self._memo[key]
        us = self.cache.get(self.device_name, self.backend, key)
        if us is None and self.deadline is not None and time.perf_counter() > self.deadline:
            self.estimated += 1
            self._memo[key] = self.scaled_estimate(key)
            return self._memo[key]
        if us is None:
            timing = self.timing(key)
            us = timing.us
            self.measured += 1
            if timing.trusted:
                self.cache.put(self.device_name, self.backend, key, us)
            else:
                self.outliers += 1
        estimate = self._fallback.op_cost(key)
        if estimate > 0 and us > 0:
            self._ratios.setdefault(key.op, []).append(us / estimate)
        self._memo[key] = us
        return us

    def scaled_estimate(self, key: OpKey) -> float:
        """``key``'s analytic estimate times the median of this run's measured-over-estimated ratios of its
        operator (of every operator where none of its own was read; 1 before any)."""
        ratios = self._ratios.get(key.op) or [r for rs in self._ratios.values() for r in rs] or [1.0]
        return self._fallback.op_cost(key) * float(np.median(ratios))


@contextlib.contextmanager
def timing_until(model: object, deadline: float) -> Iterator[None]:
    """Within the block, a measured cost model (:class:`CachedTimings`) times no operator past ``deadline``
    (``time.perf_counter()``): it estimates it (:meth:`CachedTimings.scaled_estimate`). Other models are
    unaffected."""
    if not isinstance(model, CachedTimings):
        yield
        return
    before, model.deadline = model.deadline, deadline
    try:
        yield
    finally:
        model.deadline = before


class TorchCost(CachedTimings):
    """Times each operator with torch on ``device`` ("cpu" or "cuda"); results cached persistently.

    Unlike TASO's model, slices and transposes are timed: onnxruntime materializes them as copies, so
    calling them free would favour programs that are slower end to end.
    """

    free_ops = frozenset(d.op for d in OPS.values() if d.free and not d.copies)

    def __init__(self, device: str = "cpu", cache: CostCache | None = None, threads: int | None = None,
                 warmup: int | None = None, repeats: int | None = None):
        # torch is optional (the torch extra): imported here, where a torch cost model is asked for
        torch = require_torch(f"--cost {device}", "use --cost ort-cpu or --cost analytic")
        self.torch = torch
        self.device = device
        if device == "cuda":
            if not torch.cuda.is_available():
                raise InputError("--cost cuda: torch sees no GPU; use --cost cpu or --cost analytic")
            torch.backends.cudnn.benchmark = True
            exact_float32(torch)  # each operator timed as the program runs it: float32, not TensorFloat-32
            self.device_name = torch.cuda.get_device_name(0)
            self.warmup, self.repeats = warmup or 8, repeats or 32
            self.launch_us: float | None = None
            """a node's cost in a replayed CUDA graph when its kernel does nothing (:meth:`launch`)"""
        else:
            self.threads = threads or max(1, os.cpu_count() or 1)
            torch.set_num_threads(self.threads)
            self.device_name = f"cpu-{self.threads}t"
            self.warmup, self.repeats = warmup or 3, repeats or 10
        self.backend = f"torch-{torch.__version__}" + ("-graph" if device == "cuda" else "")
        self.name = f"{device}:{self.device_name}"
        super().__init__(cache, AnalyticCost("a100" if device == "cuda" else "cpu"))
        self.contention = Contention(self.cache, self.device_name, self.backend, self._probe_readers,
                                     TORCH_CONTENDED)

    def measure(self, key: OpKey) -> float:
        """Time one operator now (microseconds), bypassing the cache."""
        return self.timing(key).us

    def timing(self, key: OpKey) -> Timing:
        """Time one operator now, in rounds checked against the analytic estimate (see :func:`robust_time`) and
        guarded by the probes (:class:`Contention`)."""
        estimate = self._fallback.op_cost(key)
        run = self._runner(key)
        if run is None:  # nothing to time: the estimate is the cost, and a deterministic one
            return Timing(estimate, (), estimate, True)
        with self.torch.no_grad():
            for _ in range(self.warmup):
                run()
            return self.contention.guard(lambda: robust_time(lambda n: self._round_us(run, n), estimate, self.repeats))

    def _round_us(self, run: Callable[[], object], n: int) -> float:
        """One round (us a call): on the CPU the median of ``n`` runs; on a GPU the mean over ``n`` calls by CUDA
        events, a call of a captured operator being a replay of ``GRAPH_COPIES`` of it (:func:`graph_replay`)."""
        if self.device != "cuda":
            return median_ms(run, 0, n) * 1e3
        return cuda_event_ms(run, n) * 1e3 / (run.calls if isinstance(run, Replay) else 1)

    def _runner(self, key: OpKey) -> Callable[[], object] | None:
        """A callable that runs the operator once on seeded random operands (on a GPU, a replay of a CUDA graph
        of ``GRAPH_COPIES`` calls, where it can be captured), or None if it cannot be run."""
        if key.op == "opaque":
            return _opaque_runner(key) if self.device == "cpu" else None
        run = self._torch_runner(key)
        if run is None or self.device != "cuda":
            return run
        return graph_replay(self.torch, run, GRAPH_COPIES) or run

    def launch(self) -> float:
        """The launch constant (us): a node's cost in a replayed CUDA graph whose kernel does nothing (a one-value
        add), what every node of a program pays besides its kernel's work. Measured once per cost model."""
        if self.device != "cuda":
            raise ValueError("the launch constant is a GPU's: this cost model times on the CPU")
        if self.launch_us is None:
            x = self.torch.zeros(1, device="cuda")
            run = graph_replay(self.torch, lambda: x.add(1.0), GRAPH_COPIES)
            assert run is not None
            with self.torch.no_grad():
                for _ in range(self.warmup):
                    run()
                self.launch_us = min(self._round_us(run, self.repeats) for _ in range(3))
        return self.launch_us

    def _torch_runner(self, key: OpKey) -> Callable[[], object] | None:
        fn = _torch_fn(self.torch, key)
        if fn is None:
            return None
        torch = self.torch
        gen = torch.Generator().manual_seed(0)
        args = [torch.randn(*s, generator=gen).to(self.device) for s in key.in_shapes]
        return lambda: fn(*args)

    def _probe_readers(self) -> list[tuple[OpKey, Callable[[], float]]]:
        """The :data:`PROBES` as readings (us): :func:`probe_reading` (on a GPU, the median of ``PROBE_CALLS``
        runs by CUDA events), after a warm-up."""
        readers: list[tuple[OpKey, Callable[[], float]]] = []
        for probe in PROBES:
            run = self._torch_runner(probe)
            assert run is not None
            with self.torch.no_grad():
                for _ in range(self.warmup):
                    run()

            def read(run: Callable[[], object] = run) -> float:
                with self.torch.no_grad():
                    if self.device == "cuda":
                        return cuda_event_ms(run, PROBE_CALLS) * 1e3
                    return probe_reading(run)
            readers.append((probe, read))
        return readers


def graph_replay(torch: Any, run: Callable[[], object], copies: int) -> Replay | None:
    """``copies`` calls of ``run`` captured as one CUDA graph (:func:`eqsat.measurement.torch_run.capture`, which keeps
    ``run`` and so its operands alive with the graph); None where the operator cannot be captured (it reads a value
    back to the host, or synchronizes)."""
    try:
        return capture(torch, run, (), copies, warmup=2)
    except Exception:  # not capturable: the caller times it eagerly
        try:
            torch.cuda.synchronize()
        except Exception:  # an error the device keeps: the eager timing that follows reports it
            pass
        return None


def _opaque_runner(key: OpKey) -> Callable[[], object] | None:
    """A one-node onnxruntime session running an opaque operator on seeded float32 inputs, or None when it
    cannot run that way (inputs of other dtypes, operators needing constant inputs)."""
    built = opaque_model(key)
    if built is None:
        return None
    model, feeds = built
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
    except Exception:  # inputs of other dtypes, ops needing constant inputs: estimated instead
        return None
    return lambda: sess.run(None, feeds)


def opaque_model(key: OpKey, copies: int = 1) -> tuple[onnx.ModelProto, dict[str, np.ndarray]] | None:
    """The ONNX model (opset 17) of an opaque operator's key, ``copies`` independent nodes of it on inputs of
    their own, and seeded float32 feeds for it, or None when its attributes do not parse or hold a subgraph (an If's branches read outer-scope values: estimated). Whether onnxruntime
    can run it shows only when a session is built."""
    op_type, domain, attr_bytes, _out_index = key.attrs
    nodes, inputs, outputs = [], [], []
    try:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(key.dtype)) if key.dtype else onnx.TensorProto.FLOAT
        for c in range(copies):
            ins = [f"i{k}" if copies == 1 else f"i{c}_{k}" for k in range(len(key.in_shapes))]
            out = "y" if copies == 1 else f"y{c}"
            node = helper.make_node(op_type, ins, [out], domain=domain or None)
            for b in attr_bytes:
                ap = AttributeProto()
                ap.ParseFromString(b)
                if ap.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):  # its subgraphs read outer-scope values
                    return None
                node.attribute.append(ap)
            nodes.append(node)
            inputs += [(n, tuple(s)) for n, s in zip(ins, key.in_shapes)]
            outputs.append(helper.make_tensor_value_info(out, elem, None))
        graph = helper.make_graph(nodes, "op", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s)
                                                for n, s in inputs], outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    except Exception:  # unparsable attributes or an unknown dtype: estimated instead
        return None
    rng = np.random.default_rng(0)
    return model, {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs}
