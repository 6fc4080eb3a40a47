"""What the tests of the shape-generic writer share: the runs of programs it makes while it writes (each run of a
prefix of a written program, or of values read off runs, recorded by the names it is made for)."""

from __future__ import annotations

import onnx
from ort_check import assert_same_at

from eqsat.app import shaping
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.generic import original as original_facts
from eqsat.generic import probes


def program_runs(monkeypatch, writing: bool = False) -> list[tuple[str, ...]]:
    """The names each run of a program's prefix (or of values read off runs) is made for, recorded as they are
    made; ``writing``: only those made while a candidate is written for the user (not the import's rewrite of the
    original, once per model)."""
    asked: list[tuple[str, ...]] = []
    inside = [not writing]
    real_make_generic = shaping.make_generic

    def make_generic(*args, **kwargs):
        inside.append(True)
        try:
            return real_make_generic(*args, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(shaping, "make_generic", make_generic)
    real_runs_of, real_run_values = original_facts.Original.runs_of, probes.run_values

    def runs_of(self, model, names, keys, shapes):
        def counted():
            if inside[-1]:
                asked.append(tuple(names))
            return model()
        return real_runs_of(self, counted, names, keys, shapes)

    def run_values(model, names, shapes, whole=False):
        if inside[-1]:
            asked.append(tuple(names))
        return real_run_values(model, names, shapes, whole)

    monkeypatch.setattr(original_facts.Original, "runs_of", runs_of)
    monkeypatch.setattr(probes, "run_values", run_values)
    return asked


def written_without_runs(monkeypatch, original: onnx.ModelProto, tuned: tuple[int, ...], at: list[tuple[int, ...]],
                         seed: int, **tolerance: float) -> None:
    """``original`` (one input ``x``, tuned at the shape ``tuned``) optimized shape-generic: the program ships, no
    prefix of it is run while a candidate is written for the user, and it matches the original in onnxruntime at the
    shapes ``at``."""
    asked = program_runs(monkeypatch, writing=True)
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                                  input_shapes={"x": tuned}))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert asked == [], asked
    assert_same_at(original, result.optimized, [{"x": s} for s in at], seed=seed, **tolerance)
