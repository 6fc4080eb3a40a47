"""Loading, checking and saving ONNX models of any size (protobuf caps one message at 2 GiB: larger models keep
their weights in an external data file beside the model), and onnxruntime sessions of them."""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence

import onnx
import onnxruntime as ort
from onnx import TensorProto

from ..errors import ModelRefused
from . import pool, staging
from .external import (
    Weights,
    check_aside,
    data_file,
    data_size,
    goes_out,
    runtime_nodes,
    save_external,
    save_streamed,
    set_weights_aside,
)

LIMIT = 1_800_000_000
"""a model whose weights or serialized size pass this many bytes is written with its weights in external data"""


def is_large(model: onnx.ModelProto, weights: Weights | None = None) -> bool:
    """Whether ``model`` is too big to serialize as one message (protobuf fails past 2 GiB, even to size it): its
    initializers' sizes from their shapes (sizing a message costs as much as writing it; a reference into
    ``weights`` as the bytes it refers to) and its nodes' and functions' serialized sizes (Constant values,
    subgraphs) pass :data:`LIMIT`."""
    try:
        total = sum(data_size(t, weights) for t in model.graph.initializer)
        if total > LIMIT:
            return True
        return total + sum(n.ByteSize() for n in model.graph.node) + \
            sum(f.ByteSize() for f in model.functions) > LIMIT
    except Exception:  # google.protobuf.message.EncodeError: over 2 GiB
        return True


def weight_bytes(model: onnx.ModelProto) -> int:
    """The bytes of ``model``'s initializers, those held as raw bytes or as external data (a reference into the
    run's weight pool, :mod:`eqsat.onnx.pool`, counts as the weights it refers to)."""
    total = 0
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            total += int({e.key: e.value for e in t.external_data}.get("length", 0))
        else:
            total += len(t.raw_data)
    return total


@contextlib.contextmanager
def as_path(model: onnx.ModelProto) -> Iterator[str]:
    """A temporary file holding ``model`` (external data for large models)."""
    with tempfile.TemporaryDirectory(prefix="eqsat-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        save(model, path)
        yield path


def save(model: onnx.ModelProto, path: str, external: bool = False, weights: Weights | None = None) -> None:
    """Write ``model`` to ``path``; its weights (tensors of at least :data:`EXTERNAL_THRESHOLD` bytes) go to
    :func:`data_file` beside it where ``external`` is asked or the model is too large for one message
    (:func:`is_large`). The model is never copied nor serialized whole (:func:`save_streamed` otherwise).
    ``weights``: where its references into the run's weight pool lie; they are written as the data they refer
    to, a tensor at a time (the file :meth:`~eqsat.onnx.pool.WeightPool.restore`'s model would give)."""
    if external or is_large(model, weights):
        save_external(model, path, weights)
    else:
        save_streamed(model, path, weights)


def writes_data_file(model: onnx.ModelProto, external: bool = False, weights: Weights | None = None) -> bool:
    """Whether :func:`save` (``external`` asked or not) writes ``model``'s weights to a data file beside it."""
    return (external or is_large(model, weights)) and any(
        goes_out(t, weights) for t in onnx.external_data_helper._get_initializer_tensors(model))


def external_data_files(path: str) -> list[str]:
    """The external data files the ONNX model at ``path`` keeps its weights in (resolved beside the model), read
    from the model without loading the weights; [] where ``path`` is not a regular file or not readable as ONNX
    (loading reports those)."""
    if not os.path.isfile(path) or not _mentions(path, b"location"):  # no external data (read in a blink)
        return []
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:  # not ONNX: the loader says why
        return []
    base = os.path.dirname(os.path.abspath(path))
    files = []
    for t in onnx.external_data_helper._get_all_tensors(model):
        if onnx.external_data_helper.uses_external_data(t):
            location = {e.key: e.value for e in t.external_data}.get("location", "")
            files.append(os.path.normpath(os.path.join(base, location)))
    return list(dict.fromkeys(files))


def _mentions(path: str, word: bytes) -> bool:
    """Whether the file at ``path`` contains ``word`` (memory-mapped: a model of weights inline is not parsed)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(word) >= 0
    except (OSError, ValueError):  # unreadable, or empty (mmap refuses): the loader says what is wrong
        return True


def not_regular(path: str) -> str | None:
    """What ``path`` is, where it exists and is not a regular file (a device, a FIFO, a socket, a folder),
    following symbolic links; None where it is a regular file or does not exist. Such a target is never renamed
    over: that would replace a device node such as /dev/null with a file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def check(model: onnx.ModelProto, full: bool = True) -> None:
    """onnx.checker, with the full (shape-inference) check unless ``full`` is False: a model that refers to the
    current weight pool is checked where its references resolve; a model too large for one message with its weights
    set aside (:func:`check_aside`)."""
    weights = pool.current()
    if runtime_nodes(model):  # onnxruntime's own operators of the ONNX domain, checked around (for_checker)
        check_aside(set_weights_aside(model)[0], full_check=full)
    elif weights is not None and weights.refers(model):
        with weights.as_path(model) as path:
            onnx.checker.check_model(path, full_check=full)
    elif is_large(model):
        check_aside(set_weights_aside(model)[0], full_check=full)
    else:
        onnx.checker.check_model(model, full_check=full)


def check_bfloat16(model: onnx.ModelProto) -> None:
    """Refuse (exit 2) a bfloat16 model that onnxruntime cannot run or feed on CPU; the others import."""
    g = model.graph
    for kind, values in (("input", g.input), ("output", g.output)):
        for v in values:
            if v.type.tensor_type.elem_type == TensorProto.BFLOAT16:
                raise ModelRefused(f"model {kind} {v.name!r} has dtype bfloat16, which onnxruntime cannot feed or return "
                                 "from Python on CPU, so eqsat cannot verify the optimized model; convert the model's "
                                 f"{kind}s to float32 or float16 (e.g. a Cast at the model's edge)")
    bf16 = TensorProto.BFLOAT16
    uses = any(t.data_type == bf16 for t in g.initializer) or \
        any(v.type.tensor_type.elem_type == bf16 for v in g.value_info) or \
        any(a.name == "to" and a.i == bf16 or a.type == onnx.AttributeProto.TENSOR and a.t.data_type == bf16
            for n in g.node for a in n.attribute)
    if not uses:
        return
    try:
        session(model)
    except Exception as exc:
        raise ModelRefused(f"the model computes in bfloat16, which onnxruntime's CPU provider cannot run here "
                         f"({str(exc).splitlines()[0]}); eqsat verifies every model in onnxruntime: convert the "
                         "model to float32 or float16") from exc


def session(model: onnx.ModelProto | bytes | str, threads: int | None = None,
            prepacking: bool = False, optimized: bool = True) -> ort.InferenceSession:
    """A CPU onnxruntime session of ``model`` (a ModelProto of any size, serialized bytes or a path), with warnings
    silenced, to compute values (timed sessions: :func:`eqsat.measurement.clock.timing_session`); ``threads``: that many
    intra-op threads and one inter-op thread (default: onnxruntime's); ``prepacking``: MatMul weights copied into
    onnxruntime's packed layout, as a timed session does (off by default: a copy of them saved). Its values are
    allocated without onnxruntime's memory arena: each freed as its run is done, where an arena keeps the largest
    run's memory (rounded up to a power of two) for as long as the session lives (a probe at a batch of 5 of a
    mixture-of-experts decoder took 11 GB, kept while the next session's runs took as much again); its nodes run in
    onnxruntime's priority-based order, which runs a Shape as soon as it can (in the default order a probe asking
    the Shapes of eight [256, 3072, 384] values held them all at once: 6.2 GiB, not 1.1). Not
    ``optimized``: the graph run as written (no Shape of a value whose size onnxruntime infers folded to that size:
    the value is computed, and a size it refuses fails)."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.enable_cpu_mem_arena = False
    opts.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    if not prepacking:
        opts.add_session_config_entry("session.disable_prepacking", "1")
    return inference_session(model, opts)


def inference_session(model: onnx.ModelProto | bytes | str, opts: ort.SessionOptions,
                      providers: Sequence[str] = ("CPUExecutionProvider",)) -> ort.InferenceSession:
    """An onnxruntime session of ``model`` with ``opts``: a ModelProto's large initializers read from the current
    weight pool (:mod:`eqsat.onnx.pool`: one copy shared by every session) where one is current; without one, a
    model too large for one message goes through a temporary file with external data."""
    providers = list(providers)
    if isinstance(model, onnx.ModelProto):
        weights = pool.current()
        if weights is not None:
            return weights.session(model, opts, providers)
        if is_large(model):
            with as_path(model) as path:  # onnxruntime reads the external data while the session is built
                return ort.InferenceSession(path, opts, providers=providers)
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return ort.InferenceSession(data, opts, providers=providers)


def write_atomic(model: onnx.ModelProto, path: str, external: bool = False) -> None:
    """Write ``model`` to ``path`` through temporary files and renames: a failure leaves ``path`` as it was."""
    write_together(model, path, {}, external)


def write_together(model: onnx.ModelProto, path: str, others: dict[str, bytes], external: bool = False,
                   weights: Weights | None = None) -> None:
    """Write ``model`` to ``path`` and each ``others`` file (e.g. the JSON report): all are replaced, or none.
    The model's weights go to its external data file, :func:`data_file` (``path`` + ``.data``), where ``external``
    is asked or the model is too large for one message (:func:`save`); that file is staged and renamed with the
    others. ``weights``: where ``model``'s references into the run's weight pool lie (:func:`save`).

    Everything is first staged in ``.eqsat-*`` folders beside the targets, then renamed into place with SIGINT
    and SIGTERM held back; if a rename fails, or an interrupt arrived meanwhile, the files already replaced get
    their old contents back (or are removed if they did not exist) before the error or interrupt goes on. The
    staged folders are removed in every case. Symbolic links are written through (their target is replaced).
    """
    with contextlib.ExitStack() as stack:
        stages: dict[str, str] = {}

        def stage_for(target: str) -> str:
            parent = os.path.dirname(target)
            if parent not in stages:
                staging.remove_stale(parent)  # left by a killed run
                stages[parent] = stack.enter_context(tempfile.TemporaryDirectory(dir=parent, prefix=staging.prefix()))
            return stages[parent]

        target = os.path.realpath(path)
        model_dir = os.path.join(stage_for(target), "model")  # own folder: the name must stay (external data)
        os.mkdir(model_dir)
        staged = os.path.join(model_dir, os.path.basename(target))
        save(model, staged, external, weights)
        pairs = [(staged, target)]
        if os.path.exists(data_file(staged)):
            pairs.insert(0, (data_file(staged), data_file(target)))
        for other, data in others.items():
            real = os.path.realpath(other)
            staged_other = os.path.join(stage_for(real), "other-" + os.path.basename(real))
            with open(staged_other, "wb") as f:
                f.write(data)
            pairs.append((staged_other, real))
        with _signals_held() as interrupted:
            done = _replace_all(pairs, stage_for)
            if interrupted():
                _restore(done)


def _replace_all(pairs: list[tuple[str, str]], stage_for) -> list[tuple[str, str | None]]:
    """Rename each staged file onto its target, keeping a hard link (or copy) of the old one in the stage;
    on any failure restore what was replaced and re-raise. Returns (target, backup or None) per file."""
    done: list[tuple[str, str | None]] = []
    try:
        for staged, target in pairs:
            kind = not_regular(target)
            if kind is not None:  # checked up front too; this guards a target that changed since
                raise IsADirectoryError(f"{target} is {kind}, not a regular file: it is never replaced")
            backup = None
            if os.path.lexists(target):
                backup = os.path.join(stage_for(target), "backup-" + str(len(done)))
                try:
                    os.link(target, backup)
                except OSError:
                    shutil.copy2(target, backup)
            os.replace(staged, target)
            done.append((target, backup))
    except BaseException:
        _restore(done)
        raise
    return done


def _restore(done: list[tuple[str, str | None]]) -> None:
    for target, backup in reversed(done):
        if backup is None:
            os.unlink(target)
        else:
            os.replace(backup, target)


_HELD = threading.Event()


def signals_held() -> bool:
    """Whether the results are being renamed into place with SIGINT and SIGTERM held back (the command line's
    watchdog, :mod:`eqsat.app.watchdog`, waits for the write to finish)."""
    return _HELD.is_set()


@contextlib.contextmanager
def _signals_held() -> Iterator[Callable[[], bool]]:
    """Hold back SIGINT and SIGTERM: they are noted, and passed on to the previous handlers on exit (a Ctrl-C
    then raises KeyboardInterrupt). Yields a function telling whether one arrived meanwhile."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield lambda: False
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    _HELD.set()
    try:
        yield lambda: bool(caught)
    finally:
        _HELD.clear()
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if caught:
            signal.raise_signal(caught[0])
