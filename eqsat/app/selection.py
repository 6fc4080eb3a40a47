"""The candidate programs of a run (``--candidates K``): which extractions are made, and which programs are distinct
(:func:`same_program`: two that run the same kernels on the same data are timed once).

The final stage extracts up to K distinct programs (:func:`candidates_phase`, :func:`with_imported`: the final
extractor's optimum of the grown e-graph, the input as eqsat writes it where that differs from the input,
greedy-dag's, greedy-dag's avoiding the runtime's attention kernel (its masked scores floored later: :data:`SOFTMAX`),
greedy-dag's favouring the runtime's kernels (:mod:`eqsat.cost.favoured`), the ILP's under another cost model, the
main extractor's programs of the cheapest states the search stood in before its last one, greedy-tree's), put in the
order the measurement owns (:data:`eqsat.measurement.decision.ORDER`); each is verified and timed end to end against
the original in one interleaved run (:func:`eqsat.measurement.runtimes.compare_programs`).
:func:`eqsat.measurement.decision.choose` ships a candidate faster than the original with confidence under the
sequential gate (:mod:`eqsat.measurement.gate`: Bonferroni over the candidates and the looks), else the original: the
first such in that order, unless a later one is faster than it with confidence.

>>> other_cost_name("analytic"), other_cost_name("analytic-a100"), other_cost_name("cpu")
('analytic-a100', 'analytic', 'analytic')
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import onnx

from eqsat import extract as extractors
from eqsat.cost import CostModel, make, node_costs
from eqsat.cost.favoured import ATTENTION_KERNELS, AVOIDED, KERNEL_OPS, KernelsFavoured
from eqsat.cost.measure import timing_until
from eqsat.extract import Extraction, ExtractionError, ExtractOptions
from eqsat.ir import Graph, Node
from eqsat.mcts import PathState
from eqsat.measurement import floor_probe, runtimes
from eqsat.measurement.decision import in_order
from eqsat.onnx import fusions
from eqsat.onnx.subgraphs import subgraphs
from eqsat.snapshot import Snapshot
from eqsat.verification import ShapesCheck

from .config import OptimizeConfig, ilp_seconds
from .report import Candidate, VerificationReport

UNFUSED = fusions.UNFUSED
"""element-wise operators that compute each element from the operands' elements at its place and that onnxruntime
fuses with no neighbour (:data:`eqsat.onnx.fusions.UNFUSED`: ``ewsum`` is ONNX Sum, written so that it is not fused):
on operands of its own shape, one is the same kernel on the same data whether its operands were reshaped first or its
result after. (Add, Mul, Gelu are not: whether a Reshape stands between one and its producer or consumer decides
onnxruntime's fusions.)"""
ROWWISE = frozenset({"layernorm", "rmsnorm"})
"""operators that compute each row (the last axis) from the operand's row at its place and parameters along the
last axis: the same kernel whether the rows are gathered in [1, 128, 768] or in [128, 768], where their operand is
an :data:`UNFUSED` one's result (a norm after an Add is fused with it, a reshape between them prevents that)"""


def same_program(a: Graph, b: Graph) -> bool:
    """Whether ``b`` computes with exactly the operators of ``a``: the same DAG up to node identity
    (compared by structure, bottom-up), with as many operators and the same outputs, reshapes aside: a value is
    data in a shape, a reshape gives its input's data another shape (a chain of them is one reshape, one back to
    the data's own shape none), an :data:`UNFUSED` element-wise operator on operands of one shape computes the
    same data whatever shape they were reshaped to first (their data compared as vectors), and so does a
    :data:`ROWWISE` one on its operand's rows. So two programs that differ only there run the same kernels on the
    same data in onnxruntime (measuring both would time one program twice); where a reshape's place can decide a
    fusion (an Add after a MatMul, a norm after an Add), the programs stay distinct."""
    if a.output_names != b.output_names:
        return False
    ids: dict[tuple, int] = {}
    data: dict[int, tuple[int, tuple]] = {}  # node -> (id of its data in the data's own shape, that shape)
    memo: dict[int, int] = {}  # node -> id of its value (its data in its shape)
    producer: dict[int, Node] = {}  # node -> the node that computed its data (through reshapes)

    def intern(key: tuple) -> int:
        return ids.setdefault(key, len(ids))

    def in_shape(node: Node, data_id: int, own: tuple) -> int:
        shape = tuple(node.shape)
        return data_id if shape == own else intern(("reshape", shape, node.dtype, data_id))

    def flat_id(node: Node, flat: tuple) -> int:
        data_id, own = data[id(node)]
        return data_id if own == flat else intern(("reshape", flat, node.dtype, data_id))

    def canon(g: Graph) -> tuple[tuple[int, ...], int]:
        computed = 0
        for n in g.nodes():  # topological: children first
            shape = tuple(n.shape)
            producer[id(n)] = producer[id(n.inputs[0])] if n.op == "reshape" else n
            if n.op == "reshape":
                data[id(n)] = data[id(n.inputs[0])]
            elif n.op in UNFUSED and n.inputs and all(tuple(i.shape) == shape for i in n.inputs) \
                    and all(isinstance(d, int) for d in shape):
                computed += 1  # on its operands' data as vectors: wherever their reshapes stood
                flat = (math.prod(shape),)
                operands = tuple(flat_id(i, flat) for i in n.inputs)
                data[id(n)] = (intern((n.op, n.attrs, flat, n.dtype, operands)), flat)
            elif n.op in ROWWISE and len(shape) > 1 and all(isinstance(d, int) for d in shape) \
                    and tuple(n.inputs[0].shape) == shape and producer[id(n.inputs[0])].op in UNFUSED \
                    and all(tuple(i.shape) == shape[-1:] for i in n.inputs[1:]):
                computed += 1  # on its operands' data as rows: wherever their reshapes stood
                rows = (math.prod(shape) // max(shape[-1], 1), shape[-1])
                operands = (flat_id(n.inputs[0], rows), *(memo[id(i)] for i in n.inputs[1:]))
                data[id(n)] = (intern((n.op, n.attrs, rows, n.dtype, operands)), rows)
            else:
                if n.op not in ("input", "weight"):
                    computed += 1
                base = (n.op, n.attrs, shape, n.dtype)
                key = (*base, n.name) if n.op in ("input", "weight") else (*base, tuple(memo[id(c)] for c in n.inputs))
                data[id(n)] = (intern(key), shape)
            memo[id(n)] = in_shape(n, *data[id(n)])
        return tuple(memo[id(o)] for o in g.outputs), computed

    return canon(a) == canon(b)


def same_operators(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    """Whether ONNX models ``a`` and ``b`` run the same operators, as many of each (Constant and Identity
    nodes aside: the runtime drops them). A program equal to the imported graph is no other program, but its
    model can still differ from the original where the import simplified it (constants folded, ``x + 0``
    dropped): then it is measured like any candidate."""
    def counts(g: onnx.GraphProto) -> Counter[tuple[str, str]]:
        found = Counter((n.domain, n.op_type) for n in g.node if n.op_type not in ("Constant", "Identity"))
        for sub in (s for n in g.node for s in subgraphs(n)):  # an If's branches: optimized on their own
            found += counts(sub)
        return found
    return counts(a.graph) == counts(b.graph)


OTHER_ILP_SECONDS = 10.0
"""at most this many seconds for the ILP under the other cost model (a cheap extra candidate, not the optimum)"""


def other_cost_name(cost_name: str) -> str:
    """The cost model the extra ILP candidate is extracted under: the other analytic roofline for an analytic
    model (both deterministic and cheap), else the analytic one (a measured model's counterpart)."""
    if cost_name == "analytic" or cost_name == "analytic-cpu":
        return "analytic-a100"
    return "analytic"


class Written(NamedTuple):
    """A program as written for the user (:func:`eqsat.app.candidates.written_input`): its IR, its ONNX model, and
    what its shape-generic write could not make generic (:meth:`eqsat.app.shaping.Shaping.write`)."""

    program: Graph
    model: onnx.ModelProto
    notes: list[str]


@dataclass
class Extracted:
    """One candidate: its name, how it was produced, its extraction and the cost model that extraction's DAG cost
    is under (the final cost model, or the other one), and the e-graph it was extracted from when that is not the
    grown one (a state along the search path). ``written``: a program already written (:data:`IMPORTED`), which has
    no extraction."""

    name: str
    source: str
    extraction: Extraction | None
    cost_model: CostModel
    snapshot: Snapshot | None = None
    written: Written | None = None


@dataclass
class Built:
    """A candidate exported and checked: its program, ONNX model, report entry and whether it may be measured."""

    program: Graph
    model: onnx.ModelProto
    entry: Candidate
    same_as_original: bool
    shapes: ShapesCheck | None = None
    """the check at the further shapes of a shape-generic run"""
    notes: list[str] = field(default_factory=list)
    """what its shape-generic write could not make generic (:meth:`Shaping.write`)"""
    check: VerificationReport | None = None
    """its check against the original (a further candidate's; the first's is :attr:`Checked.verification`)"""


IMPORTED = "imported"
"""the candidate that is the input as eqsat writes it, no rule applied (:func:`with_imported`): the exporter's own
simplifications (shape computations folded into its shape-generic forms, constants and identities dropped, the
composites the import recognized written in the forms onnxruntime fuses), which the peers' simplifiers also make"""


def with_imported(extracted: list[Extracted], written: Written, original: onnx.ModelProto,
                  config: OptimizeConfig, cost_model: CostModel) -> list[Extracted]:
    """The candidates with the :data:`IMPORTED` one in its place of the order (second: after the final extractor's, so
    that it is among the first ``--candidates`` and in the measurement's first group), where more than one candidate
    is measured and the written input differs from the original in its operators (else it is the original)."""
    if config.candidates < 2 or not config.measure or same_operators(original, written[1]):
        return extracted
    source = "the input as eqsat writes it, no rule applied"
    return in_order([*extracted, Extracted(IMPORTED, source, None, cost_model, written=written)], _name)


def _name(e: Extracted) -> str:
    return e.name


SOFTMAX = "softmax"
"""the candidate that computes its attention as a Softmax where the runtime's attention kernel was chosen
(:data:`eqsat.cost.favoured.AVOIDED`; onnxruntime's CPU only): its masked scores can be floored
(:func:`eqsat.app.floored.floored_phase`), which the kernel's cannot"""


def candidates_phase(snap: Snapshot, first: Extraction, config: OptimizeConfig, cost_model: CostModel,
                     elapsed: float, path: Sequence[PathState] = ()) -> list[Extracted]:
    """The candidate extractions, in :data:`~eqsat.measurement.decision.ORDER`: of the grown e-graph the final
    extractor's (``first``, named ``extracted``), greedy-dag's, greedy-dag's avoiding the runtime's attention kernel
    where the e-graph holds one and the floor pays on onnxruntime's CPU (named :data:`SOFTMAX`), greedy-dag's
    favouring the runtime's kernels where the e-graph holds one (:class:`~eqsat.cost.favoured.KernelsFavoured`, named
    ``kernels``), the ILP's under the other cost model (cheap: at most OTHER_ILP_SECONDS, half the first's time and
    what ``--time-limit`` left); the programs of the states along the search path (``path``:
    ``SearchReport.states``, cheapest first, named ``step-N`` or ``iteration-N``); greedy-tree's of the grown
    e-graph. Only the first without measurement or with ``--candidates 1``; duplicates are removed later, by program
    (:func:`build_candidates`)."""
    out = [Extracted("extracted", f"{first.extractor} under {cost_model.name}", first, cost_model)]
    if config.candidates < 2 or not config.measure:
        return out
    with timing_until(cost_model, time.perf_counter() + max(0.0, config.search.time_limit - elapsed)):
        return in_order(out + _more_candidates(snap, first, config, cost_model, elapsed, path), _name)


def _more_candidates(snap: Snapshot, first: Extraction, config: OptimizeConfig, cost_model: CostModel,
                     elapsed: float, path: Sequence[PathState]) -> list[Extracted]:
    """The candidates after the first (:func:`candidates_phase`)."""
    out: list[Extracted] = []
    costs = node_costs(snap, cost_model)
    if first.extractor != "greedy-dag":
        out.append(Extracted("greedy-dag", f"greedy-dag under {cost_model.name}",
                             extractors.extract("greedy-dag", snap, costs), cost_model))
    if runtimes.resolve(config.runtime) == "ort-cpu" and any(e.op in ATTENTION_KERNELS for e in snap.nodes) \
            and floor_probe.floor_pays()[0]:  # where no floor is made, the kernel's decomposition is no candidate
        avoided = KernelsFavoured(cost_model, AVOIDED, ATTENTION_KERNELS)  # the program a floor can speed up
        out.append(Extracted(SOFTMAX, f"greedy-dag under {avoided.name}",
                             extractors.extract("greedy-dag", snap, node_costs(snap, avoided)), avoided))
    if any(e.op in KERNEL_OPS for e in snap.nodes):  # the program taking the runtime's kernels, measured too
        favoured = KernelsFavoured(cost_model)
        out.append(Extracted("kernels", f"greedy-dag under {favoured.name}",
                             extractors.extract("greedy-dag", snap, node_costs(snap, favoured)), favoured))
    other = make(other_cost_name(cost_model.name))
    other_costs = node_costs(snap, other)
    # what --time-limit left after the search and the first extraction (``elapsed`` is the search's time: the
    # extract phase is still running); a first ILP that used it all leaves this one SCIP's floor (its warm start)
    seconds = min(OTHER_ILP_SECONDS, ilp_seconds(config, elapsed + first.seconds), max(1.0, first.seconds / 2))
    warm = extractors.extract("greedy-dag", snap, other_costs)
    options = ExtractOptions(time_limit=seconds, warm_start=warm)
    out.append(Extracted(f"ilp-{other.name}", f"ilp under {other.name}",
                         extractors.extract("ilp", snap, other_costs, options), other))
    out += [Extracted(state.label.replace(" ", "-"), f"{state.extraction.extractor} at search {state.label} under "
                                                      f"{cost_model.name}", state.extraction, cost_model, state.snapshot)
            for state in path]
    try:  # (the paper's extractor, one more candidate: a run never stops on it)
        out.append(Extracted("greedy-tree", f"greedy-tree under {cost_model.name}",
                             extractors.extract("greedy-tree", snap, costs), cost_model))
    except ExtractionError:
        pass
    return out


__all__ = ["IMPORTED", "OTHER_ILP_SECONDS", "ROWWISE", "SOFTMAX", "UNFUSED", "Extracted", "candidates_phase", "other_cost_name",
           "same_operators", "same_program", "with_imported"]
