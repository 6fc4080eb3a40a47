"""Narrow exception types. Every message says what went wrong and what to do about it."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message cut to its first line (its type's name where it has none): for a message of ours
    that quotes another tool's error (onnxruntime's and ONNX's run to many lines)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


class EqsatError(Exception):
    """Base class of every error eqsat raises on purpose."""

    exit_code = 1


class InputError(EqsatError):
    """Bad user input: a missing, corrupt or unsupported model, a bad flag value."""

    exit_code = 2


class ModelRefused(InputError):
    """A model refused whatever sizes its dynamic dimensions are given (onnxruntime cannot load it, it draws random
    numbers, ...): the message suggests no ``--input-shape``."""


class DynamicShapeError(InputError):
    """A model input has a symbolic or unknown dimension."""


class ShapeError(EqsatError):
    """An operator was given operands whose shapes it does not accept."""


class VerificationError(EqsatError):
    """The optimized model does not compute the same outputs as the original."""

    exit_code = 3


class EGraphError(EqsatError):
    """The e-graph is used wrongly or behaved unexpectedly (a pop without a push, a non-deterministic run)."""


class EgglogError(EGraphError):
    """A call into egglog failed: egglog reported an error or panicked (a Rust panic, a BaseException, is
    turned into this by :func:`eqsat.egglog.egraph.egglog_guard`). The message says what was being done."""
