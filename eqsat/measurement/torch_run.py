"""Run an IR program with torch: the executor behind the torch runtimes (eqsat.measurement.runtimes).

Weight-only subgraphs are folded with numpy first, exactly as the ONNX export folds them
(:func:`eqsat.onnx.export.fold_weights`); every other operator runs through its :mod:`eqsat.ops` entry's torch
function, except where that function is only good for timing (batch norm times on a made-up variance) or the
entry has none (reshape, dropout). Opaque ONNX operators have no torch form: :class:`TorchProgram` refuses
programs holding them (:class:`UnsupportedProgram`, an InputError naming the operators and the runtimes that
can run them).

torch is optional (the ``torch`` extra: ``pip install 'eqsat[torch]'``): the ONNX path on the CPU never imports it.
Every import of torch in eqsat goes through :func:`require_torch`, which says which extra to install where torch is
missing (:class:`TorchMissing`, exit 2); :func:`torch_gpu` answers "is there a GPU for torch" without importing torch
where it is not installed or no GPU device exists.

>>> import numpy as np
>>> from eqsat import ir
>>> x, w = ir.input_("x", (2, 3)), ir.weight("w", (3, 4))
>>> g = ir.Graph((x,), (ir.make("relu", [ir.make("matmul", [x, w], (0,))]),), ("y",), {"w": np.ones((3, 4), "float32")})
>>> p = TorchProgram(g)
>>> p.forward(*p.tensors({"x": np.ones((2, 3), "float32")}))[0].tolist()
[[3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from eqsat.errors import InputError
from eqsat.ir import Graph, Node
from eqsat.onnx.export import fold_weights
from eqsat.ops import OPS
from eqsat.ops.batchnorm import EPS_UNIT

TORCH_EXTRA = "pip install 'eqsat[torch]'"
"""how to install what the torch runtimes and the torch cost models need"""
GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
"""the device files of a GPU torch could use on Linux (NVIDIA's driver, ROCm's, WSL's): with none of them, no GPU is
there, and torch (about 180 MiB resident once imported) need not be imported to say so"""


class TorchMissing(InputError):
    """torch is needed (a torch runtime, a torch cost model) and not installed: the message names the extra."""


def torch_installed() -> bool:
    """Whether torch can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a finder that refuses it, a half-imported module without a spec
        return False


def _missing(what: str, instead: str) -> TorchMissing:
    return TorchMissing(f"{what} needs torch, which is not installed here: {TORCH_EXTRA}"
                        + (f", or {instead}" if instead else ""))


def check_torch(what: str, instead: str = "") -> None:
    """Raise :class:`TorchMissing` (exit 2) if torch is not installed, without importing it: ``what`` needs torch,
    install the extra, or ``instead`` (e.g. "use --runtime ort-cpu")."""
    if not torch_installed():
        raise _missing(what, instead)


def require_torch(what: str, instead: str = "") -> Any:
    """The ``torch`` module, imported: the one place eqsat imports it. Where torch is not installed, raise
    :class:`TorchMissing` (exit 2), as :func:`check_torch` does.

    >>> require_torch("--runtime torch-cpu").__name__
    'torch'
    """
    try:
        import torch  # here, not at the top: torch takes seconds to import and the ONNX path on the CPU never needs it
    except ImportError as exc:
        raise _missing(what, instead) from exc
    return torch


def torch_gpu() -> bool:
    """Whether torch sees a GPU here; False without importing torch where it is not installed or (on Linux) no GPU
    device file exists."""
    if not torch_installed():
        return False
    if sys.platform.startswith("linux") and not any(os.path.exists(p) for p in GPU_DEVICES):
        return False
    return bool(require_torch("a GPU check").cuda.is_available())


class UnsupportedProgram(InputError):
    """The program holds operators the torch executor cannot run (opaque ONNX operators)."""


def _batchnorm(torch: Any, attrs: tuple, shapes: Sequence[tuple[int, ...]]) -> Callable[..., Any]:
    eps = attrs[0] * EPS_UNIT
    return lambda x, s, b, m, v: torch.nn.functional.batch_norm(x, m, v, s, b, False, 0.0, eps)


def _reshape(torch: Any, attrs: tuple, shapes: Sequence[tuple[int, ...]]) -> Callable[..., Any]:
    return lambda x: x.reshape(attrs)


def _identity(torch: Any, attrs: tuple, shapes: Sequence[tuple[int, ...]]) -> Callable[..., Any]:
    return lambda x: x


OVERRIDES: dict[str, Callable[[Any, tuple, Sequence[tuple[int, ...]]], Callable[..., Any]]] = {
    "batchnorm": _batchnorm, "reshape": _reshape, "dropout": _identity}
"""operators whose torch form here differs from (or is missing in) the operator table's timing function"""


def opaque_operators(graph: Graph) -> list[str]:
    """The ONNX types of the opaque operators in ``graph`` (sorted, distinct): what the torch runtimes cannot run."""
    return sorted({n.attrs[0] for n in graph.nodes() if n.op == "opaque"})


def check_runnable(graph: Graph, runtime: str) -> None:
    """Raise :class:`UnsupportedProgram` if ``graph`` holds operators that torch cannot run."""
    opaque = opaque_operators(graph)
    if opaque:
        shown = ", ".join(opaque[:8]) + (f" and {len(opaque) - 8} more" if len(opaque) > 8 else "")
        raise UnsupportedProgram(f"--runtime {runtime}: the model holds ONNX operators that eqsat carries opaquely "
                                 f"({shown}) and the torch runtimes cannot run them; use --runtime ort-cpu or "
                                 "ort-cuda for this model")


def exact_float32(torch: Any) -> None:
    """float32 as ONNX computes it on a GPU: no TensorFloat-32 in cuDNN's convolutions (on by default in torch)
    nor in matmuls, whose 10-bit mantissas put a SqueezeNet 3e-3 away from onnxruntime's outputs."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


class TorchProgram:
    """An IR program as a callable of torch tensors on ``device``: ``program(feeds) -> list of outputs``.

    Folded weights are held on the device once; calls allocate only the intermediate values, so a call can
    be captured as a CUDA graph or compiled with torch.compile (:meth:`forward` takes the inputs positionally,
    in ``input_names`` order)."""

    def __init__(self, graph: Graph, device: str = "cpu"):
        torch = require_torch("running a program with torch", "use --runtime ort-cpu")
        check_runnable(graph, "torch")
        self.torch = torch
        self.device = device
        if device.startswith("cuda"):
            exact_float32(torch)
        self.graph = graph
        self.input_names = tuple(i.name or "" for i in graph.inputs)
        order, consts = fold_weights(graph)
        slots: dict[int, int] = {}
        self.constants: list[Any] = []
        self.steps: list[tuple[Callable[..., Any], tuple[int, ...]]] = []
        n_inputs = len(graph.inputs)
        for k, node in enumerate(graph.inputs):
            slots[id(node)] = k
        needed = _needed(graph, consts)
        for node in order:
            if id(node) not in needed or id(node) in slots:
                continue
            if id(node) in consts:
                slots[id(node)] = -1 - len(self.constants)
                self.constants.append(_tensor(torch, consts[id(node)], device))
                continue
            slots[id(node)] = n_inputs + len(self.steps)
            self.steps.append((_function(torch, node), tuple(slots[id(i)] for i in node.inputs)))
        self.output_slots = tuple(slots[id(o)] for o in graph.outputs)

    def replica(self) -> TorchProgram:
        """The same program with its own copy of the folded weights (another instance to time, like a session)."""
        other = copy.copy(self)
        other.constants = [c.clone() for c in self.constants]
        return other

    def forward(self, *inputs: Any) -> list[Any]:
        """The outputs for ``inputs`` (torch tensors on the device, in ``input_names`` order)."""
        values: list[Any] = list(inputs)
        consts = self.constants

        def get(slot: int) -> Any:
            return consts[-1 - slot] if slot < 0 else values[slot]

        for fn, args in self.steps:
            values.append(fn(*(get(a) for a in args)))
        return [get(s) for s in self.output_slots]

    def tensors(self, feeds: Mapping[str, np.ndarray]) -> list[Any]:
        """The inputs as tensors on the device, in ``input_names`` order (an input left out of ``feeds`` takes
        its default value, for inputs that are also initializers)."""
        out = []
        for name in self.input_names:
            value = feeds[name] if name in feeds else self.graph.input_defaults.get(name)
            if value is None:
                raise InputError(f"no value for input {name!r}; give one in the feeds")
            out.append(_tensor(self.torch, value, self.device))
        return out


class Replay:
    """``calls`` calls of ``fn(*args)`` captured as one CUDA graph (:func:`capture`); a call replays it and returns
    the outputs, which live in the graph's memory pool and each replay rewrites. It holds ``fn`` and ``args``: the
    graph reads the program's weights and the inputs at the addresses they had when it was captured, so they must
    live as long as it (freed, the replay reads memory the allocator gave to others, or gave back: an illegal
    address)."""

    def __init__(self, graph: Any, outputs: Any, fn: Callable[..., Any], args: Sequence[Any], calls: int):
        self.graph, self.outputs, self.calls = graph, outputs, calls
        self._held = (fn, tuple(args))

    def __call__(self) -> Any:
        self.graph.replay()
        return self.outputs


def capture(torch: Any, fn: Callable[..., Any], args: Sequence[Any], calls: int = 1, warmup: int = 3) -> Replay:
    """``fn(*args)`` (no gradients) called ``calls`` times back to back, captured as one CUDA graph after ``warmup``
    calls on a side stream (which the capture needs: cuDNN and cuBLAS pick their algorithms and workspaces there).
    Raises what torch raises where ``fn`` cannot be captured (it reads a value back to the host, or synchronizes)."""
    before = torch.cuda.current_stream()
    try:
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(before)
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    fn(*args)
            before.wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = fn(*args) if calls == 1 else [fn(*args) for _ in range(calls)]
    except Exception:
        torch.cuda.set_stream(before)  # a failed capture's end can leave the capture stream current
        raise
    return Replay(graph, outputs, fn, args, calls)


def _tensor(torch: Any, value: np.ndarray, device: str) -> Any:
    """``value`` as a tensor on ``device`` (copied where numpy's array is read-only or not contiguous)."""
    array = np.asarray(value)
    if not (array.flags.writeable and array.flags.c_contiguous):
        array = np.array(array, order="C", copy=True)
    return torch.from_numpy(array).to(device)


def _needed(graph: Graph, consts: dict[int, np.ndarray]) -> set[int]:
    """Nodes reachable from the outputs without entering folded constants."""
    needed: set[int] = set()
    stack: list[Node] = list(graph.outputs)
    while stack:
        n = stack.pop()
        if id(n) not in needed:
            needed.add(id(n))
            if id(n) not in consts:
                stack.extend(n.inputs)
    return needed


def _function(torch: Any, node: Node) -> Callable[..., Any]:
    shapes = [i.shape for i in node.inputs]
    make = OVERRIDES.get(node.op) or (OPS[node.op].torch if node.op in OPS else None)
    fn = make(torch, node.attrs, shapes) if make is not None else None
    if fn is None:
        raise UnsupportedProgram(f"{node!r}: operator {node.op!r} has no torch form here (its operands are not "
                                 "all weights, so it cannot be folded); use --runtime ort-cpu")
    return fn


__all__ = ["GPU_DEVICES", "OVERRIDES", "TORCH_EXTRA", "Replay", "TorchMissing", "TorchProgram", "UnsupportedProgram", "capture",
           "check_runnable", "check_torch", "opaque_operators", "require_torch", "torch_gpu", "torch_installed"]
