"""Where a sweep's runs execute: a local process pool or a Ray cluster, behind one interface
(:class:`Dispatcher`: ``run(specs, fn, done)`` calls ``done(spec, fn(spec))`` as each run finishes).

The sweep scripts take ``--jobs N`` (the pool's processes, or a Ray instance started here with N CPUs),
``--heavy-gb G`` (models with more weights than G gigabytes are heavy: one at a time in the pool; on Ray a
heavy run declares the memory it peaks at, so that a node runs as many as fit) and ``--ray auto|ADDRESS``
(``auto``: join the local Ray instance, or start one; ``ADDRESS``: a cluster's, e.g. ``ray://head:10001`` or
``head:6379``). Without ``--ray``, or where ray is not installed with ``auto``, the pool runs them.

On Ray, each run is one task of 1 CPU and its declared memory; the code of this folder's modules travels
with the tasks (pickled by value), eqsat must be installed on every node (the same version).
"""

from __future__ import annotations

import argparse
import functools
import math
import multiprocessing as mp
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Protocol

from experiment import RunSpec

from eqsat.models import build

Fn = Callable[[RunSpec], Any]
Done = Callable[[RunSpec, Any], None]

PEAK_PER_WEIGHT_BYTE = 5.5
"""a run's peak memory over its model's weight bytes (ViT-Huge: 2.5 GB of weights, a run peaks near 13 GB)"""
LIGHT_RUN_BYTES = 2 * 1024**3
"""the memory a run declares on Ray at least (torch, onnxruntime and egglog loaded, a small model's e-graph)"""


@functools.cache
def _weight_bytes(model: str, small: bool) -> int:
    g = build(model, small=small)  # weights are lazy: shapes only
    return sum(4 * math.prod(w.shape) for w in g.nodes() if w.op == "weight")


def weight_bytes(spec: RunSpec) -> int:
    return _weight_bytes(spec.model, spec.small)


def heavy(spec: RunSpec, limit_gb: float = 1.0) -> bool:
    """Models with more weights than ``limit_gb`` (ViT-Large, ViT-Huge) run one at a time in the pool: a run
    holds several copies of them (ViT-Huge peaks near 13 GB)."""
    return weight_bytes(spec) > limit_gb * 1e9


def memory_bytes(spec: RunSpec, limit_gb: float = 1.0) -> int:
    """The memory a run declares on Ray: its estimated peak for a heavy run, else :data:`LIGHT_RUN_BYTES`."""
    if not heavy(spec, limit_gb):
        return LIGHT_RUN_BYTES
    return max(LIGHT_RUN_BYTES, int(PEAK_PER_WEIGHT_BYTE * weight_bytes(spec)))


class Dispatcher(Protocol):
    name: str

    def run(self, specs: Sequence[RunSpec], fn: Fn, done: Done) -> None:
        """Run ``fn`` on every spec, calling ``done(spec, result)`` in this process as each finishes."""


class ProcessPool:
    """``jobs`` spawned worker processes; heavy runs one at a time (see :func:`run_all`)."""

    def __init__(self, jobs: int, heavy_gb: float = 1.0) -> None:
        self.jobs, self.heavy_gb = jobs, heavy_gb
        self.name = f"process pool, {jobs} job(s)"

    def run(self, specs: Sequence[RunSpec], fn: Fn, done: Done) -> None:
        heavy_runs = [s for s in specs if heavy(s, self.heavy_gb)]
        run_all([s for s in specs if s not in heavy_runs], heavy_runs, self.jobs, fn, done)


def run_all(light: list, heavy_runs: list, jobs: int, fn: Fn, done: Done) -> None:
    """Run ``fn`` on every spec in worker processes, calling ``done(spec, result)`` as each finishes.

    Heavy runs go one at a time to their own worker, beside ``jobs - 1`` workers for the others; once
    the heavy runs are over, that worker takes half of the runs still queued. With one job, the heavy
    runs come after the others."""
    ctx = mp.get_context("spawn")  # not fork: a forked child inherits locks held by torch's and egglog's threads
    workers = max(1, jobs - 1) if heavy_runs else jobs
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool, \
            ProcessPoolExecutor(max_workers=1, mp_context=ctx) as heavy_pool:
        if jobs == 1:
            for spec in light:
                done(spec, pool.submit(fn, spec).result())
            light = []
        futures = {pool.submit(fn, s): s for s in light} | {heavy_pool.submit(fn, s): s for s in heavy_runs}
        heavy_busy = jobs > 1 and bool(heavy_runs)
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                done(futures[fut], fut.result())
            if heavy_busy and not any(futures[f] in heavy_runs for f in pending):
                heavy_busy = False
                for i, f in enumerate([f for f in pending if f.cancel()]):
                    moved = (heavy_pool if i % 2 == 0 else pool).submit(fn, futures[f])
                    futures[moved] = futures[f]
                    pending.remove(f)
                    pending.add(moved)


class RayCluster:
    """Each run one Ray task of 1 CPU and :func:`memory_bytes`; connects on construction.

    ``address`` ``auto`` joins the Ray instance running on this machine, or starts one with ``jobs`` CPUs
    (and no dashboard); any other address is passed to ``ray.init`` as it is. Connecting when Ray is
    already initialized in this process (a test's instance) reuses it."""

    def __init__(self, address: str, jobs: int, heavy_gb: float = 1.0) -> None:
        import ray

        self.ray, self.heavy_gb = ray, heavy_gb
        if ray.is_initialized():
            self.name = "Ray (this process's instance)"
        elif address == "auto":
            try:
                ray.init(address="auto")
                self.name = "Ray (joined the local instance)"
            except ConnectionError:
                ray.init(num_cpus=jobs, include_dashboard=False)
                self.name = f"Ray (started here, {jobs} CPU(s))"
        else:
            ray.init(address=address)
            self.name = f"Ray at {address}"

    def largest_node_memory(self) -> float:
        """The most memory any live node offers tasks (bytes; inf when the nodes do not say)."""
        mem = [n["Resources"].get("memory", 0.0) for n in self.ray.nodes() if n.get("Alive")]
        return max(mem, default=math.inf) or math.inf

    def run(self, specs: Sequence[RunSpec], fn: Fn, done: Done) -> None:
        from ray import cloudpickle

        for module in {fn.__module__, RunSpec.__module__} - {"__main__"}:
            # this folder's modules are not installed on the nodes: send their code with the tasks
            cloudpickle.register_pickle_by_value(sys.modules[module])
        task = self.ray.remote(fn)
        cap = self.largest_node_memory()
        refs = {}
        for spec in specs:
            want = memory_bytes(spec, self.heavy_gb)
            if want > cap:  # a task no node can hold would wait forever: declare the largest node's memory
                print(f"{spec.key()}: needs about {want / 1e9:.1f} GB, the largest node offers {cap / 1e9:.1f} GB; "
                      "declaring that", file=sys.stderr)
                want = int(cap)
            refs[task.options(num_cpus=1, memory=want).remote(spec)] = spec
        pending = list(refs)
        while pending:
            finished, pending = self.ray.wait(pending, num_returns=1)
            for ref in finished:
                done(refs[ref], self.ray.get(ref))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--jobs``, ``--heavy-gb`` and ``--ray``."""
    p.add_argument("--jobs", type=int, default=1, help="parallel runs (the pool's processes, a local Ray's CPUs)")
    p.add_argument("--heavy-gb", type=float, default=1.0,
                   help="models with more weights than this run one at a time in the pool and declare their peak "
                        "memory on Ray (default 1.0: ViT-Large and -Huge)")
    p.add_argument("--ray", metavar="auto|ADDRESS",
                   help="run on Ray: auto joins or starts a local instance (the pool where ray is not installed), "
                        "ADDRESS connects to a cluster (ray.init(address=ADDRESS)); default: the process pool")


def from_args(args: argparse.Namespace) -> Dispatcher:
    """The dispatcher ``--ray``/``--jobs`` ask for; says on stderr which one runs."""
    chosen: Dispatcher
    if args.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            if args.ray != "auto":
                raise SystemExit(f"--ray {args.ray}: ray is not installed (pip install 'eqsat[ray]')") from None
            print("ray is not installed (pip install 'eqsat[ray]'): running on the process pool", file=sys.stderr)
        else:
            chosen = RayCluster(args.ray, args.jobs, args.heavy_gb)
            print(f"running on {chosen.name}", file=sys.stderr)
            return chosen
    chosen = ProcessPool(args.jobs, args.heavy_gb)
    print(f"running on the {chosen.name}", file=sys.stderr)
    return chosen
