"""Each candidate exported, written and checked: the extracted program decoded and written as every candidate is
(:func:`export_phase`, :func:`written_input`: exported, shape-generic where the run is, referring to the run's
weight pool), verified against the original (:func:`verify_phase`, :func:`verifier_of`: :mod:`eqsat.verification`),
at the further shapes of a shape-generic run (:func:`shapes_phase`), and the distinct ones kept up to
``--candidates`` (:func:`build_candidates`). The pipeline (:mod:`.pipeline`) runs these between the extraction and
the measurement."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import onnx

from eqsat import memory
from eqsat.blocks import Blocks
from eqsat.cost import CostModel, costs_by_op, graph_cost
from eqsat.decode import build_program
from eqsat.errors import VerificationError, first_line
from eqsat.extract import Extraction
from eqsat.ir import Graph
from eqsat.onnx import export_model, pool
from eqsat.onnx import io as onnx_io
from eqsat.onnx.rounding import rounding
from eqsat.snapshot import Snapshot
from eqsat.verification import ShapesCheck, Verifier
from eqsat.verification.feeds import EDGES, NONFINITE_EDGES

from .config import OptimizeConfig
from .report import Candidate, VerificationReport
from .selection import IMPORTED, Built, Extracted, Written, same_operators, same_program
from .shaping import Shaping


def export_phase(snap: Snapshot, ext: Extraction, graph: Graph, cost_model: CostModel,
                 shaping: Shaping | None = None, blocks: Blocks | None = None,
                 rest: Graph | None = None) -> Written:
    """The extracted program as IR and as a checked ONNX model (written shape-generic with the original's
    interface where ``shaping`` says so, with what that write could not make generic). Its recomputed cost must
    equal the extractor's DAG cost (one costing, two paths: a disagreement is a bug). Where a weight pool is current, the model refers to its weights
    (:meth:`eqsat.onnx.pool.WeightPool.slim`). With ``blocks`` (``graph`` is then their representative), the program
    is replayed on every copy (:meth:`Blocks.replay`) first, with ``rest`` (:func:`rest_phase`) outside them."""
    program = build_program(snap, ext.choice, graph)
    recomputed = graph_cost(program, cost_model)
    assert math.isclose(recomputed, ext.dag_cost, rel_tol=1e-9, abs_tol=1e-9), \
        f"the decoded program costs {recomputed!r}, the extractor said {ext.dag_cost!r}"
    if blocks is not None:
        program = blocks.replay(program, rest)
    return written_input(program, shaping)


def written_input(graph: Graph, shaping: Shaping | None = None) -> Written:
    """``graph`` written as every candidate is: exported, shape-generic where ``shaping`` says so (with what could
    not be made generic), referring to the current weight pool's weights (no copy kept per candidate), checked.
    Given the imported program, no rule applied, this is the :data:`~eqsat.app.selection.IMPORTED` candidate;
    :func:`export_phase` writes each extracted program through it."""
    model = export_model(graph)
    notes: list[str] = []
    if shaping is not None:
        model, notes = shaping.write(model)
    if (weights := pool.current()) is not None:
        model = weights.slim(model)
    onnx_io.check(model)
    return Written(graph, model, notes)


def verify_phase(original: onnx.ModelProto, optimized: onnx.ModelProto, config: OptimizeConfig,
                 verifier: Verifier | None = None) -> tuple[VerificationReport, str]:
    """Check ``optimized`` against ``original`` on seeded random inputs and the edge draws: the report, and why it
    was left out ("" where it passed). A mismatch on the random draws of a model that computes in float32 raises
    VerificationError (a rule is unsound: a bug); one on an edge draw only (a rule that holds on numbers turns a NaN
    of the original into a number), or in a model that rounds through a quantizer or a narrow float
    (:func:`eqsat.onnx.rounding.rounding`: a legitimate reorder moves a value across a rounding step), leaves this
    candidate out, like any other. ``verifier``: the run's (:class:`~eqsat.verification.Verifier` of ``original``: its
    outputs computed once)."""
    verifier = verifier or verifier_of(original, config)
    check = verifier.check(optimized)
    if not check.passed and not check.edge:
        coarse = rounding(original)
        if not coarse:
            raise VerificationError(f"the optimized model does not match the original: {check.detail}; "
                                    "nothing was written")
        return VerificationReport.of(check, config.seed), (f"{check.detail} (the model rounds through {coarse}, "
                                                           "where a reordered sum can cross a rounding step)")
    return VerificationReport.of(check, config.seed), check.detail


def verifier_of(original: onnx.ModelProto, config: OptimizeConfig) -> Verifier:
    """The verification of candidates against ``original`` at the run's seed, draws and input shapes, and its edge
    draws (no -inf or NaN ones under ``--assume-finite-masks``: the user vouched that no input makes a mask so)."""
    edges = [e for e in EDGES if not (config.assume_finite_masks and e in NONFINITE_EDGES)]
    return Verifier(original, seed=config.seed, draws=config.verify_draws, input_shapes=config.input_shapes,
                    edges=edges)


def build_candidates(snap: Snapshot, extracted: Sequence[Extracted], graph: Graph, original: onnx.ModelProto,
                     config: OptimizeConfig, cost_model: CostModel,
                     first: Written | None = None,
                     shaping: Shaping | None = None, blocks: Blocks | None = None,
                     rest: Graph | None = None, verifier: Verifier | None = None,
                     say: Callable[[str], None] = lambda _msg: None) -> list[Built]:
    """Export and verify the extracted candidates, keeping the first and then each program not seen before
    (:func:`same_program`), up to ``--candidates``. ``first``: the first candidate already exported and verified
    (:func:`export_phase`, :func:`verify_phase`); another that fails verification is kept in the report,
    unmeasured, with the failure. With a shape-generic ``shaping``, each candidate is also checked at the
    further shapes (:func:`shapes_phase`): one that fails there is not measured either. With ``blocks``, the
    candidates are programs of their representative, replayed on every copy (with ``rest`` outside them).
    ``verifier``: the run's (:func:`verify_phase`). A further candidate whose export fails (a bug: the first's
    does not) is left out with a line to ``say``, so that one program's writer cannot stop the run."""
    template = blocks.representative if blocks is not None else graph
    verifier = verifier or verifier_of(original, config)
    built: list[Built] = []
    for k, c in enumerate(extracted):
        if len(built) >= config.candidates:
            break
        if k == 0 and first is not None:
            program, model, notes = first
        elif c.written is not None:
            program, model, notes = c.written
        else:
            try:
                assert c.extraction is not None
                program, model, notes = export_phase(c.snapshot or snap, c.extraction, template, c.cost_model,
                                                     shaping, blocks, rest)
            except Exception as e:  # noqa: BLE001 - a further candidate only: the run goes on without it
                if k == 0 or isinstance(e, MemoryError):
                    raise
                say(f"candidate {c.name} left out: its export failed ({type(e).__name__}: {first_line(e, 200)}); "
                    "this is a bug, please report it")
                continue
        if built and ((same_program(graph, program) and c.name != IMPORTED)
                      or any(same_program(b.program, program) for b in built)):
            continue
        entry = Candidate(c.name, graph_cost(program, cost_model), dict(program.op_counts()), c.source,
                          costs=costs_by_op(program, cost_model))
        if built or first is None:
            check = verifier.check(model)
            entry.verified, entry.max_abs_error = check.passed, check.max_abs_error
            entry.note = "" if check.passed else f"not measured: {check.detail}"
            if (weights := pool.current()) is not None:  # the pages its check read: the next reads its own
                weights.drop_pages()
            memory.release()  # its export's and session's transients: not kept while the next is exported
        b = Built(program, model, entry, same_program(graph, program) and same_operators(original, model),
                  notes=list(notes),
                  check=VerificationReport.of(check, config.seed) if built or first is None else None)
        if shaping is not None and (entry.verified or (k == 0 and first is not None)):
            shapes_phase(b, shaping, config)
        built.append(b)
        if k > 0 or first is None:  # (a large model's candidates take minutes to write and check: one line each)
            say(f"candidate {c.name} written and checked: "
                + ("verified" if b.entry.verified else b.entry.note.removeprefix("not measured: ")[:160]))
    return built


def shapes_phase(b: Built, shaping: Shaping, config: OptimizeConfig) -> ShapesCheck:
    """Check a candidate at the further shapes of a shape-generic run (the interface at each); one that fails is
    marked unverified, with the failure (it is not written)."""
    check = shaping.check(b.model, config.seed)
    b.shapes = check
    if not check.passed:
        b.entry.verified = False
        b.entry.note = f"not measured: not shape-generic: {check.detail}"
    return check


__all__ = ["build_candidates", "export_phase", "shapes_phase", "verifier_of", "verify_phase", "written_input"]
