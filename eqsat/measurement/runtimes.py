"""Runtimes: where a program is measured end to end (``--runtime``), each behind one interface.

A :class:`Runtime` turns programs (:class:`Program`: the ONNX model and, for the torch runtimes, its IR graph)
into callables and names the clock that times them; :func:`compare_programs` times the original against
every candidate with the protocol of :mod:`eqsat.measurement.timing` (interleaved seeded rounds, bootstrap interval).

* ``ort-cpu``: onnxruntime's CPU provider, the sessions :func:`eqsat.measurement.clock.session_options` describes; wall clock.
* ``ort-cuda``: onnxruntime's CUDA provider (the ``gpu`` extra, onnxruntime-gpu) with I/O binding: the inputs
  are copied to the GPU once and the outputs stay there (:class:`BoundRun`), so a call times the model, not
  host-device copies; each run ends synchronized; wall clock.
* ``torch-cuda``: the IR program run by :class:`eqsat.measurement.torch_run.TorchProgram` on the GPU, captured once and
  replayed as a CUDA graph (static shapes: no Python launch overhead); CUDA events. The eager (uncaptured)
  latency of each program is reported beside it.
* ``torch-compile``: the same program through ``torch.compile`` (mode ``reduce-overhead`` on a GPU; on the
  CPU mode ``default``, since reduce-overhead's CUDA graphs need a GPU), original and candidates compiled alike.
* ``torch-cpu``: the IR program in eager torch on the CPU (no compiler, no graph capture); wall clock.

The torch runtimes need the ``torch`` extra (``pip install 'eqsat[torch]'``; without it, asking for one is exit 2
saying so); the onnxruntime ones never import torch. ``auto`` is torch-cuda where torch is installed and sees a GPU,
else ort-cpu.

>>> RUNTIMES[:4]
('ort-cpu', 'torch-cuda', 'torch-compile', 'ort-cuda')
>>> make("ort-cpu").info()["name"]
'ort-cpu'
"""

from __future__ import annotations

import functools
import gc
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from eqsat import memory
from eqsat.errors import InputError
from eqsat.ir import Graph
from eqsat.onnx import pool
from eqsat.onnx.io import session

from .clock import cuda_event_ms, runtime_info, wall_block_ms
from .grouping import plan, session_bytes
from .timing import EPOCHS, Comparison, Protocol, check_same_inputs, compare_many, timing_feeds, timing_sessions
from .torch_run import GPU_DEVICES, TorchProgram, capture, check_runnable, check_torch, require_torch, torch_gpu

RUNTIMES = ("ort-cpu", "torch-cuda", "torch-compile", "ort-cuda", "torch-cpu")
"""``--runtime`` values besides ``auto``"""
TORCH_RUNTIMES = frozenset({"torch-cuda", "torch-compile", "torch-cpu"})
RENEW_SECONDS = 10.0
"""the most seconds renewing programs of few sessions may spend in builds (at most EPOCHS - 1 renewals; or the run's
budget, if more); models slower to build (a 1B-parameter one) keep their sessions, and the rounds are the gate's
units"""
EAGER_REPEATS = 20
TORCH_INSTANCES = 3
"""instances per program in the eager and CUDA-graph modes, each with its own weights (as sessions are for onnxruntime)"""


def runtime_names() -> list[str]:
    """Every accepted ``--runtime`` value."""
    return ["auto", *RUNTIMES]


@dataclass(frozen=True)
class Program:
    """One program to measure: its ONNX model and its IR graph (needed by the torch runtimes)."""

    model: onnx.ModelProto
    graph: Graph | None = None


def resolve(name: str) -> str:
    """The runtime a ``--runtime`` value names (``auto``: torch-cuda where torch sees a GPU, else ort-cpu)."""
    if name == "auto":
        return "torch-cuda" if torch_gpu() else "ort-cpu"
    return name


def check_available(name: str) -> None:
    """Raise :class:`InputError` (exit 2) if runtime ``name`` cannot run here, saying what to install or use."""
    name = resolve(name)
    if name not in RUNTIMES:
        raise InputError(f"--runtime {name!r}: choose one of {', '.join(runtime_names())}")
    if name in TORCH_RUNTIMES:
        check_torch(f"--runtime {name}", "use --runtime ort-cpu")
    if name == "torch-cuda" and not torch_gpu():
        raise InputError("--runtime torch-cuda: torch sees no GPU (torch.cuda.is_available() is False); run on a "
                         "machine with an NVIDIA GPU and a CUDA build of torch, or use --runtime ort-cpu "
                         "(or torch-compile, which runs on the CPU)")
    if name == "ort-cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise InputError("--runtime ort-cuda: onnxruntime has no CUDAExecutionProvider here; install "
                         "onnxruntime-gpu (pip install 'eqsat[gpu]', in place of onnxruntime) on a machine with a "
                         "GPU, or use --runtime ort-cpu")


class Runtime:
    """Where programs are measured. Subclasses give :meth:`instances` (callables per program) and :meth:`info`."""

    name = "runtime"

    def info(self) -> dict[str, Any]:
        """What the timings were taken on (the report's ``measured.runtime``): name, device, versions, settings."""
        raise NotImplementedError

    def instances(self, programs: Sequence[Program], feeds: Mapping[str, np.ndarray],
                  protocol: Protocol) -> list[list[Callable[[], Any]]]:
        """Interchangeable callables per program, each running it once on ``feeds``."""
        raise NotImplementedError

    def clock(self, call: Callable[[], Any], repeats: int) -> float:
        """Milliseconds per call over a block of ``repeats`` calls (an :data:`eqsat.measurement.timing.BlockClock`)."""
        return wall_block_ms(call, repeats)

    def beside(self, programs: Sequence[Program], feeds: Mapping[str, np.ndarray]) -> dict[str, list[float]]:
        """Timings reported beside the comparison (torch-cuda: the eager latency, ms, of each program)."""
        return {}

    def run(self, program: Program, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs of ``program`` on ``feeds`` as this runtime computes them (one call of its callable)."""
        call = self.instances([program], feeds, Protocol(sessions=1))[0][0]
        return [o.detach().cpu().numpy() if hasattr(o, "detach") else o.numpy() if isinstance(o, ort.OrtValue)
                else np.asarray(o) for o in call()]


class OrtRuntime(Runtime):
    """onnxruntime with one execution provider (``ort-cpu``, ``ort-cuda``)."""

    def __init__(self, name: str = "ort-cpu", threads: int = 1, bind_device: str | None = None):
        """``bind_device``: run with I/O binding on that device (``cuda`` for ort-cuda, the default there;
        ``cpu`` exercises the same path on the CPU); None: plain ``InferenceSession.run`` on host arrays."""
        self.name = name
        self.threads = threads
        self.providers = ("CUDAExecutionProvider", "CPUExecutionProvider") if name == "ort-cuda" \
            else ("CPUExecutionProvider",)
        self.bind_device = bind_device or ("cuda" if name == "ort-cuda" else None)

    def info(self) -> dict[str, Any]:
        return {**runtime_info(self.threads), "name": self.name, "providers": list(self.providers), "clock": "wall",
                "device": "cuda" if self.name == "ort-cuda" else f"cpu ({platform.machine()})",
                "io_binding": self.bind_device}

    def instances(self, programs: Sequence[Program], feeds: Mapping[str, np.ndarray],
                  protocol: Protocol) -> list[list[Callable[[], Any]]]:
        sessions = timing_sessions([p.model for p in programs], replace(protocol, threads=self.threads),
                                   self.providers, {k: np.shape(v) for k, v in feeds.items()})
        self.sessions_per_program = len(sessions[-1])
        if self.bind_device is not None:
            return [[BoundRun(s, feeds, self.bind_device) for s in side] for side in sessions]
        return [[functools.partial(s.run, None, dict(feeds)) for s in side] for side in sessions]


class BoundRun:
    """One session run with I/O binding: ``feeds`` copied to ``device`` once, outputs left on it. A call runs
    the session and returns the outputs as OrtValues (``.numpy()`` copies one to the host)."""

    def __init__(self, session: ort.InferenceSession, feeds: Mapping[str, np.ndarray], device: str):
        self.session = session
        self.binding = session.io_binding()
        self.inputs = {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v), device, 0) for k, v in feeds.items()}
        for name, value in self.inputs.items():  # kept referenced: the binding does not own them
            self.binding.bind_ortvalue_input(name, value)
        for out in session.get_outputs():
            self.binding.bind_output(out.name, device)

    def __call__(self) -> list[Any]:
        self.session.run_with_iobinding(self.binding)
        return self.binding.get_outputs()


class TorchRuntime(Runtime):
    """The IR program run with torch (:class:`eqsat.measurement.torch_run.TorchProgram`): ``mode`` eager, cuda-graph or compile."""

    def __init__(self, name: str, device: str, mode: str, threads: int = 1, compile_mode: str | None = None):
        self.torch = require_torch(f"--runtime {name}", "use --runtime ort-cpu")
        self.name, self.device, self.mode, self.threads = name, device, mode, threads
        self.compile_mode = compile_mode or ("reduce-overhead" if device == "cuda" else "default")

    def clock(self, call: Callable[[], Any], repeats: int) -> float:
        """CUDA events on a GPU (launches overlap the work, as deployed), the wall clock on the CPU."""
        return cuda_event_ms(call, repeats) if self.device == "cuda" else wall_block_ms(call, repeats)

    def info(self) -> dict[str, Any]:
        torch = self.torch
        out: dict[str, Any] = {"name": self.name, "torch": torch.__version__, "mode": self.mode,
                               "clock": "cuda events" if self.device == "cuda" else "wall"}
        if self.device == "cuda":
            out.update(device=torch.cuda.get_device_name(0), cuda=torch.version.cuda)
        else:
            out.update(device=f"cpu ({platform.machine()})", threads=self.threads)
        if self.mode == "compile":
            out["compile_mode"] = self.compile_mode
        return out

    def _programs(self, programs: Sequence[Program]) -> list[Any]:
        built = []
        for p in programs:
            if p.graph is None:
                raise ValueError(f"--runtime {self.name} runs IR programs: give each Program its graph")
            check_runnable(p.graph, self.name)
            built.append(TorchProgram(p.graph, self.device))
        return built

    def instances(self, programs: Sequence[Program], feeds: Mapping[str, np.ndarray],
                  protocol: Protocol) -> list[list[Callable[[], Any]]]:
        torch = self.torch
        if self.device == "cpu":
            torch.set_num_threads(self.threads)
        out = []
        for prog in self._programs(programs):
            xs = prog.tensors(feeds)
            if self.mode == "compile":  # one instance: compiling takes seconds to minutes
                call = _no_grad(torch, torch.compile(prog.forward, mode=self.compile_mode, dynamic=False), xs)
                call()  # compiles now, outside the timed warm-up
                out.append([call])
                continue
            copies = [prog, *(prog.replica() for _ in range(min(protocol.sessions, TORCH_INSTANCES) - 1))]
            if self.mode == "cuda-graph":  # each replay holds its copy's weights and the inputs it reads
                out.append([capture(torch, p.forward, xs) for p in copies])
            else:
                out.append([_no_grad(torch, p.forward, xs) for p in copies])
        return out

    def beside(self, programs: Sequence[Program], feeds: Mapping[str, np.ndarray]) -> dict[str, list[float]]:
        if self.mode != "cuda-graph":
            return {}
        calls = [_no_grad(self.torch, p.forward, p.tensors(feeds)) for p in self._programs(programs)]
        for call in calls:
            call()
        return {"eager_ms": [cuda_event_ms(call, EAGER_REPEATS) for call in calls]}


def _no_grad(torch: Any, fn: Callable[..., Any], xs: list[Any]) -> Callable[[], Any]:
    def call() -> Any:
        with torch.no_grad():
            return fn(*xs)
    return call


def make(name: str, threads: int = 1) -> Runtime:
    """The runtime a ``--runtime`` value names (checked: :func:`check_available`)."""
    name = resolve(name)
    check_available(name)
    if name in ("ort-cpu", "ort-cuda"):
        return OrtRuntime(name, threads)
    if name == "torch-cuda":
        return TorchRuntime(name, "cuda", "cuda-graph", threads)
    if name == "torch-compile":
        return TorchRuntime(name, "cuda" if torch_gpu() else "cpu", "compile", threads)
    return TorchRuntime(name, "cpu", "eager", threads)


@dataclass
class Measured:
    """The comparisons of the original against each candidate (in order), the runtime's side timings, and the
    groups the candidates were timed in (:mod:`eqsat.measurement.grouping`: candidate indices, 0-based; one group unless the
    memory budget split the measurement)."""

    comparisons: list[Comparison]
    beside: dict[str, list[float]]
    groups: list[list[int]] = field(default_factory=list)
    feeds: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """the inputs timed on"""
    screened: list[int] = field(default_factory=list)
    """candidates (0-based) timed only in a screening run (:func:`eqsat.measurement.decision.measure`): their
    comparisons are the screening's, never a gate's"""

    def group_of(self) -> list[int]:
        """Each candidate's group (candidates of one group were timed in the same rounds)."""
        label = [0] * len(self.comparisons)
        for g, members in enumerate(self.groups):
            for k in members:
                label[k] = g
        return label


def compare_programs(original: Program, candidates: Sequence[Program], runtime: Runtime,
                     protocol: Protocol | None = None, input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                     feeds: dict[str, np.ndarray] | None = None,
                     say: Callable[[str], None] | None = None) -> Measured:
    """Time ``original`` against every candidate in ``runtime`` (eqsat.measurement.timing's protocol) on the same inputs:
    ``feeds``, or seeded random ones (:func:`eqsat.measurement.timing.timing_feeds`). In one interleaved run, or, where
    ``protocol.memory_bytes`` cannot hold one session of each program (:func:`eqsat.measurement.grouping.plan`), in groups
    timed one after another: the original and the candidates that fit, each group's share of the budget in
    proportion to its programs (so each candidate gets the rounds one run would give it), the gate's correction
    over all the candidates, and each group's sessions freed before the next group's are built. ``say``: told
    as each run starts (progress)."""
    protocol = protocol or Protocol()
    programs = [original, *candidates]
    if feeds is None:
        feeds = feeds_for(original, candidates[-1], protocol.seed, input_shapes)
    groups = [list(range(1, len(programs)))] if protocol.memory_bytes is None \
        else plan([session_bytes(p.model) for p in programs], protocol.memory_bytes).groups
    comparisons: list[Comparison] = []
    info = runtime.info()
    for g, members in enumerate(groups):
        group = [original, *(programs[k] for k in members)]
        if say is not None:
            within = f"group {g + 1}/{len(groups)} (what the memory budget holds): " if len(groups) > 1 else ""
            say(f"timing end to end in {runtime.name}: {within}the original against {len(members)} "
                f"candidate{'s' if len(members) > 1 else ''}")
        share = len(group) / len(programs)  # of the budget, and of the gate's extended budget
        p = protocol if len(groups) == 1 else replace(
            protocol, family=len(candidates), budget_s=protocol.budget_s * share,
            max_budget_s=protocol.extended_budget_s * share,
            floor_max_s=None if protocol.floor_max_s is None else protocol.floor_max_s * share)
        comparisons.extend(_timed_run(runtime, group, feeds, p, info))
        gc.collect()  # this group's sessions are gone before the next group's are built
        memory.release()
    if len(groups) > 1:
        info["groups"] = [[k - 1 for k in members] for members in groups]  # every comparison's runtime is info
    return Measured(comparisons, runtime.beside(programs, feeds), [[k - 1 for k in members] for members in groups],
                    feeds)


def feeds_for(original: Program, candidate: Program, seed: int,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """The seeded random inputs ``original`` and ``candidate`` are timed on (:func:`eqsat.measurement.timing.timing_feeds`);
    raises ValueError if the two take different inputs."""
    probe = [session(original.model), session(candidate.model)]  # read, not timed: nothing prepacked
    check_same_inputs(probe)
    return timing_feeds(original.model, probe, seed, input_shapes)


def call_ms(program: Program, runtime: Runtime, feeds: Mapping[str, np.ndarray], protocol: Protocol,
            calls: int = 3) -> float:
    """The milliseconds of one call of ``program`` in ``runtime`` (one instance, its first call untimed; the
    fastest of ``calls`` after it): what a round of the timing will cost, known before it is planned."""
    try:
        call = runtime.instances([program], feeds, replace(protocol, sessions=1, gate=None))[0][0]
        runtime.clock(call, 1)
        return min(runtime.clock(call, 1) for _ in range(max(calls, 1)))
    finally:
        gc.collect()
        memory.release()


def duel(first: Program, second: Program, runtime: Runtime, protocol: Protocol,
         feeds: dict[str, np.ndarray]) -> Comparison:
    """``first`` timed against ``second`` in a paired, interleaved run of their own (``first`` in the original's
    place: a speedup above 1 means ``second`` is faster): two candidates measured in different groups compared."""
    try:
        return _timed_run(runtime, [first, second], feeds, protocol, runtime.info())[0]
    finally:
        gc.collect()
        memory.release()


def _timed_run(runtime: Runtime, programs: Sequence[Program], feeds: Mapping[str, np.ndarray], protocol: Protocol,
               info: dict[str, Any]) -> list[Comparison]:
    """One interleaved run of ``programs`` (:func:`eqsat.measurement.timing.compare_many`); onnxruntime programs of fewer
    sessions each than the gate's units need (``Gate.min_clusters``: large models, or many candidates in the memory
    budget) renewed every few rounds, so that the gate's units are session pairs, never the rounds."""

    def build(sessions: int | None = None) -> list[list[Callable[[], Any]]]:
        p = protocol if sessions is None else replace(protocol, sessions=max(1, min(sessions, protocol.sessions)))
        weights = pool.current()
        if weights is None:
            return runtime.instances(programs, feeds, p)
        with weights.dropping():  # the sessions read (and prepack) what they keep: the mapped pages may go
            return runtime.instances(programs, feeds, p)

    start = time.perf_counter()
    first = [build()]
    build_s = time.perf_counter() - start
    renew = None
    if isinstance(runtime, OrtRuntime):
        info["sessions_per_program"] = runtime.sessions_per_program
        affordable = build_s * (EPOCHS - 1) <= max(RENEW_SECONDS, protocol.budget_s)
        few = protocol.gate is not None and runtime.sessions_per_program < protocol.gate.min_clusters
        if few and affordable:  # too few session pairs to be the gate's units: new ones every epoch
            renew = build
        info["sessions_renewed"] = renew is not None
    return compare_many(first.pop(), protocol, info, runtime.clock, renew)  # compare_many holds the only reference


__all__ = ["GPU_DEVICES", "RUNTIMES", "TORCH_RUNTIMES", "BoundRun", "Measured", "OrtRuntime", "Program", "Runtime",
           "TorchRuntime", "call_ms", "check_available", "compare_programs", "duel", "feeds_for", "make", "resolve", "runtime_names"]
