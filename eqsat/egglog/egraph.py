"""The egglog runtime wrapper: one e-graph holding a program, the commands run on it, push/pop, its size,
and freezing it into a :class:`~eqsat.snapshot.Snapshot`. Writing a program as commands and reading the
tables back is :mod:`eqsat.egglog.codec`'s job; rebuilding a chosen program from a snapshot :mod:`eqsat.decode`'s.

Every call into egglog goes through :func:`egglog_guard`: an error egglog reports, or a Rust panic (a
``pyo3_runtime.PanicException``, which is a BaseException), becomes an :class:`~eqsat.errors.EgglogError`
saying what was being done; KeyboardInterrupt and SystemExit pass through unchanged.

The ``analysis`` rules (shapes, AllW) of a constructor are registered only once the e-graph can hold it
(:meth:`EGraph.ensure_analysis`; egglog pays for every registered rule on each push and analysis run): program
text run through :meth:`EGraph.run_program`, which includes every rule a
:class:`~eqsat.rules.engine.RuleEngine` registers and every program :meth:`EGraph.add_program` encodes, first
ensures the constructors it names. A rewrite's right-hand side therefore always gets its shape rules, so no
rewrite can fail to commit for want of one; commands parsed with :meth:`EGraph.parse` and run with
:meth:`EGraph.run_commands` are not scanned (the hot path runs only rulesets registered that way).

>>> from eqsat import ir
>>> x = ir.input_("x", (2, 3)); g = ir.Graph((x,), (ir.make("relu", [x]),), ("y",))
>>> eg = EGraph.from_graph(g)
>>> eg.size().enodes
2
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import egglog.bindings as eb

from ..dims import fingerprint_fits, is_symbolic
from ..errors import EgglogError, EGraphError, EqsatError
from ..ir import Graph, Node, topo_order
from ..ops.attention import causal_masks
from ..ops.bounds import above_lowest_masks
from ..ops.bounds import finite_masks as proven_finite
from ..snapshot import Snapshot
from . import codec, schema
from .codec import Encoding

__all__ = ["EGraph", "Size", "egglog_guard", "has_symbols"]


def has_symbols(outputs: Sequence[Node]) -> bool:
    """Whether the program rooted at ``outputs`` is encoded symbolically: it has a symbolic dimension (its inputs'
    are enough: every other one is computed from them) and every fingerprint is small enough for the shape rules'
    i64 arithmetic (:data:`eqsat.dims.FP_LIMIT`; else it is searched at its representative sizes alone)."""
    nodes = topo_order(outputs)
    return any(is_symbolic(n.shape) for n in nodes if n.op == "input") and all(
        fingerprint_fits(n.shape) for n in nodes)


def _is_egglog_failure(exc: BaseException) -> bool:
    """An error egglog raised (an Exception) or a Rust panic; not KeyboardInterrupt, SystemExit or GeneratorExit."""
    kind = type(exc)
    return isinstance(exc, Exception) or (kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime")


@contextmanager
def egglog_guard(doing: str | Callable[[], str]) -> Iterator[None]:
    """The one guard around calls into egglog: a failure inside becomes an :class:`EgglogError` whose message
    says what was being done (``doing``, or a callable giving it, called only on failure). An
    :class:`EqsatError` raised inside, KeyboardInterrupt and SystemExit propagate unchanged."""
    try:
        yield
    except EqsatError:
        raise
    except BaseException as exc:  # noqa: BLE001 - Rust panics are BaseException; the rest is re-raised below
        if not _is_egglog_failure(exc):
            raise
        what = doing() if callable(doing) else doing
        detail = str(exc).strip().splitlines()
        raise EgglogError(f"egglog failed while {what}: {type(exc).__name__}: "
                          f"{' '.join(detail)[:500] or '(no message)'}") from exc


def _excerpt(text: str) -> str:
    return repr(text[:200] + ("..." if len(text) > 200 else ""))


@dataclass(frozen=True)
class Size:
    enodes: int
    """Rows of tensor constructors (every e-node, including proposals that never got a shape)."""


class EGraph:
    """An egglog e-graph holding one program and the rules registered on it."""

    def __init__(self, symbolic: bool = False, marks: Mapping[str, frozenset[int]] | None = None) -> None:
        """``symbolic``: the programs it holds have symbolic dimensions (:mod:`eqsat.dims`): the ``sym`` analysis
        is kept beside ``shape`` and a rewrite commits only where both agree. ``marks``: per relation of
        :data:`eqsat.egglog.schema.MARKS`, the ids of the IR nodes it holds for (set when they are encoded)."""
        with egglog_guard("creating an e-graph"):
            self._eg = eb.EGraph()
            self._push = [eb.Push(1)]
        self.symbolic = symbolic
        for form in schema.program(symbolic):
            self.run_commands(self.parse(form))
        self._analysed: set[str] = set()
        self.encoding = Encoding(symbolic=symbolic, marks=dict(marks or {}))
        self.output_handles: list[str] = []
        self.depth = 0
        self._ctor_names = set(schema.CONSTRUCTORS)
        self._analysis = self.parse("(run-schedule (saturate (run analysis)))")
        self._commit = self.parse("(run-schedule (saturate (run commit)))")
        self._size_cmd = self.parse("(print-size)")
        self._pop = self.parse("(pop)")
        self._size: Size | None = None
        """the size since the last command run (a search asks for it after every step, most of which run nothing)"""

    @classmethod
    def from_graph(cls, graph: Graph, finite_masks: bool = False,
                   known: Mapping[str, tuple[float, float]] | None = None) -> EGraph:
        """A fresh e-graph holding ``graph``'s program (encoded by :mod:`eqsat.egglog.codec`), symbolic where the
        program has a symbolic dimension; its attention masks that are causal marked ``Causal``, those finite on
        every input marked ``Finite``, a NaN-zeroing attention's whose finite values lie far above float32's lowest
        ``AboveLowest`` (``finite_masks``: the caller vouches that every mask is finite,
        ``--assume-finite-masks``; ``known``: the intervals of inputs that stand for values computed elsewhere,
        :func:`eqsat.ops.bounds.value_range`)."""
        nodes = graph.nodes()
        eg = cls(symbolic=has_symbols(graph.outputs),
                 marks={"Causal": causal_masks(nodes, graph.weights),
                        "Finite": proven_finite(nodes, graph.weights, vouched=finite_masks, known=known),
                        "AboveLowest": above_lowest_masks(nodes, graph.weights, known=known)})
        eg.add_program(graph.outputs)
        return eg

    def add_program(self, outputs: Sequence[Node]) -> list[str]:
        """Encode the program rooted at ``outputs``; returns the handle of each output."""
        commands, outs = self.encoding.program(outputs)
        self.ensure_analysis(set().union(*map(schema.constructors, commands)))
        for command in commands:
            self.run_program(command)
        self.output_handles.extend(outs)
        self.saturate_analysis()
        return outs

    # -- running: every call into egglog below goes through egglog_guard ----------------------------
    def parse(self, text: str) -> list:
        """Parse egglog program text into commands (to run later with :meth:`run_commands`)."""
        with egglog_guard(lambda: f"parsing {_excerpt(text)}"):
            return self._eg.parse_program(text)

    def run_commands(self, commands: list) -> list:
        """Run parsed commands; returns egglog's outputs."""
        self._size = None
        with egglog_guard(lambda: f"running {_excerpt(' '.join(str(c) for c in commands))}"):
            return self._eg.run_program(*commands)

    def run_program(self, text: str) -> list:
        """Parse and run egglog program text, first ensuring the analysis rules of the constructors it names."""
        self.ensure_analysis(schema.constructors(text))
        return self.run_commands(self.parse(text))

    @property
    def analysed(self) -> frozenset[str]:
        """The constructors whose ``analysis`` rules are registered."""
        return frozenset(self._analysed)

    def ensure_analysis(self, ctors: Iterable[str]) -> None:
        """Register the ``analysis`` rules of the constructors ``ctors`` that have none yet, in the schema's
        fixed order (:func:`eqsat.egglog.schema.analysis_rules`). Only outside a push: a pop would drop them,
        and the e-graph would go on believing it had them."""
        missing = set(ctors) - self._analysed
        if not missing:
            return
        unknown = missing - set(schema.CONSTRUCTORS)
        if unknown:
            raise EGraphError(f"no such tensor constructor: {', '.join(sorted(unknown))}")
        if self.depth:
            raise EGraphError(f"the analysis rules of {', '.join(sorted(missing))} must be registered outside any "
                              "push (a pop would drop them): add the program or rules that use them first")
        for form in schema.analysis_rules(self._analysed, missing, self.symbolic):
            self.run_commands(self.parse(form))
        self._analysed |= missing

    def saturate_analysis(self) -> None:
        self.run_commands(self._analysis)

    def commit(self) -> bool:
        """Union every pending right-hand side that got a valid shape; True if an e-class changed."""
        self.saturate_analysis()
        out = self.run_commands(self._commit)
        return bool(out and out[0].report.updated)

    def push(self) -> None:
        self.run_commands(self._push)
        self.depth += 1

    def pop(self) -> None:
        if self.depth == 0:
            raise EGraphError("pop without a matching push")
        self.run_commands(self._pop)
        self.depth -= 1

    def size(self) -> Size:
        if self._size is None:
            out = self.run_commands(self._size_cmd)[0]
            self._size = Size(sum(n for name, n in out.sizes if name in self._ctor_names))
        return self._size

    def handle_shapes(self, function: str = "shape") -> dict[str, tuple[int, ...]]:
        """Each named handle's shape in the analysis ``function`` (``sym``: the fingerprints of a symbolic one)."""
        with egglog_guard(f"reading the {function} analysis"):
            return codec.handle_shapes(self._eg, function)

    # -- export ------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Freeze the e-graph into integer-indexed classes and nodes (tensor sort only)."""
        with egglog_guard("freezing the e-graph into a snapshot"):
            return codec.decode(self._eg, self.encoding, self.output_handles)
