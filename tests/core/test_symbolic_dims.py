"""Symbolic dimensions (eqsat.dims): the Python shape inference at the fingerprints and the e-graph's ``sym``
analysis (its egglog twin) agree on random symbolic shapes of every operator; the monomials read back off the
fingerprints give the shape function's sizes at other values of the symbols."""

from __future__ import annotations

import numpy as np
import pytest
from op_samplers import COMPUTED, SAMPLERS

from eqsat import ops
from eqsat.dims import Dim, Mono, fingerprint, infer, sym_shape, symbol_value
from eqsat.egglog import codec
from eqsat.egglog.egraph import EGraph
from eqsat.errors import ShapeError
from eqsat.generic import import_generic


def _symbolize(rng: np.random.Generator, attrs: tuple, shapes: list[tuple[int, ...]]) -> tuple[list[tuple], dict]:
    """The operands with some of their sizes symbolic: every occurrence of a chosen size becomes the same symbol
    (or twice a symbol, for an even size), so that sizes equal in the draw stay equal for every value (a size
    that is also an attribute, which may be related to it, stays constant). Returns the shapes and each symbolic
    size's monomial. A size ``v`` is the symbol ``sV`` at ``v`` or twice the symbol ``hV`` at ``v / 2``: a few
    symbols for the whole test, each always at the same representative size."""
    forms: dict[int, Mono] = {}
    for v in sorted({int(d) for s in shapes for d in s} - {int(a) for a in attrs if isinstance(a, int)}):
        if rng.random() < 0.5:
            if v % 2 == 0 and rng.random() < 0.3:
                Dim.symbol(f"h{v}", v // 2)
                forms[v] = Mono.const(2) * Mono.symbol(f"h{v}")
            else:
                Dim.symbol(f"s{v}", v)
                forms[v] = Mono.symbol(f"s{v}")
    point = {s: symbol_value(s, int(s[1:]) // (2 if s[0] == "h" else 1)) for m in forms.values() for s, _ in m.powers}
    out = [tuple(Dim(d, int(forms[d].value(point))) if d in forms else d for d in s) for s in shapes]
    return out, forms


def _symbolic_reshape(rng: np.random.Generator, shapes: list[tuple]) -> tuple:
    """A reshape target of a symbolic operand: adjacent axes merged (their product, symbolic where they are),
    or a constant axis split in two."""
    (x,) = shapes
    dims: list[int] = list(x)
    if len(dims) > 1 and rng.random() < 0.6:
        k = int(rng.integers(len(dims) - 1))
        a, b = dims[k], dims[k + 1]
        merged = Dim(int(a) * int(b), fingerprint((a,))[0] * fingerprint((b,))[0])
        dims[k:k + 2] = [merged if merged.fp != int(merged) else int(merged)]
    else:
        k = next((i for i, d in enumerate(dims) if not isinstance(d, Dim) and d % 2 == 0 and len(dims) < 4), None)
        if k is not None:
            dims[k:k + 1] = [2, dims[k] // 2]
    return tuple(dims)


def _at(shapes: list[tuple], forms: dict[int, Mono], values: dict[str, int]) -> list[tuple[int, ...]]:
    out = []
    for s in shapes:
        out.append(tuple(int(forms[int(d)].value(values)) if isinstance(d, Dim) else int(d) for d in s))
    return out


@pytest.mark.parametrize("op", COMPUTED)
def test_python_and_egglog_symbolic_shapes_agree(op):
    """Each draw (a valid concrete one of tests/op_samplers.py, symbolized) is its own term over fresh leaves whose
    ``shape`` and ``sym`` are set; the ``sym`` egglog derives is compared with the Python one (None where the
    operator is not valid for every value of the symbols, such as a reshape to a constant target)."""
    rng = np.random.default_rng(sum(map(ord, op)) + 7)
    draws = []
    for _ in range(24):
        attrs, shapes = SAMPLERS[op](rng)
        shapes, forms = _symbolize(rng, attrs, list(shapes))
        if op == "reshape" and rng.random() < 0.7:
            attrs = _symbolic_reshape(rng, shapes)
        draws.append((attrs, shapes, forms))
    eg = EGraph(symbolic=True)
    for k, (attrs, shapes, _forms) in enumerate(draws):
        leaves = []
        for i, s in enumerate(shapes):
            h = f"l{k}_{i}"
            eg.run_program(f'(set (node "{h}") (Input "i:{h}")) (set (shape (node "{h}")) {ops.shape_term(s)}) '
                           f'(set (sym (node "{h}")) {ops.shape_term(fingerprint(s))})')
            leaves.append(f'(node "{h}")')
        eg.run_program(f'(set (node "o{k}") {codec.term(op, attrs, leaves)})')
    eg.saturate_analysis()
    got = eg.handle_shapes("sym")
    symbolic = valid = 0
    for k, (attrs, shapes, forms) in enumerate(draws):
        expected = sym_shape(op, attrs, shapes)
        assert got.get(f"o{k}") == expected, f"{op}{attrs} on {shapes}: egglog {got.get(f'o{k}')}, python {expected}"
        valid += expected is not None
        out = infer(op, attrs, shapes)
        if expected is not None:
            assert fingerprint(out) == expected
        symbolic += any(isinstance(d, Dim) for d in out)
        # the monomials of the output, at other values of the symbols (multiples of 64, where the quotients a
        # stride makes are exact): the shape function's sizes there
        names = sorted({s for m in forms.values() for s, _ in m.powers})
        other = {s: 64 * int(rng.integers(1, 4)) for s in names}
        monos = [a.mono if isinstance(a, Dim) else None for a in attrs]
        try:
            ops.infer_shape(op, tuple(a.fp if isinstance(a, Dim) else a for a in attrs), [fingerprint(s) for s in shapes])
            concrete = ops.infer_shape(op, tuple(int(m.value(other)) if m is not None else a
                                                 for a, m in zip(attrs, monos)), _at(shapes, forms, other))
        except ShapeError:
            continue  # not valid at the fingerprints (its output is not symbolic), or a bound that holds at the
            # representative sizes only (a slice of a symbolic axis)
        for d, c in zip(out, concrete):
            mono = d.mono if isinstance(d, Dim) else Mono.const(int(d))
            if mono is not None:
                assert mono.value(other) == c, f"{op}{attrs} on {shapes}: {mono.key()} at {other} is not {c}"
    assert valid >= 5
    if op not in ("bn_scale", "bn_shift"):
        assert symbolic >= 1, f"no draw of {op} had a symbolic output"


def test_reshape_targets_of_numbers_read_symbolically_where_they_can_be():
    """A reshape's target of numbers (an e-graph's term holds it so) is symbolic where its leading dimensions are
    kept or flattened and the rest is constant; one that moves a symbolic axis's boundary has no symbolic shape."""
    b = Dim.symbol("b", 2)
    x = (b, 3, 4)
    keys = lambda shape: [d.mono.key() if isinstance(d, Dim) else d for d in shape]  # noqa: E731
    assert keys(infer("reshape", (6, 4), [x])) == ["3*b", 4]  # flattened
    assert keys(infer("reshape", (2, 12), [x])) == ["b", 12]  # kept, the rest merged
    assert keys(infer("reshape", (2, 3, 2, 2), [x])) == ["b", 3, 2, 2]  # kept, the rest split
    heads = (b, 3, 2, 2)
    assert keys(infer("reshape", (6, 4), [heads])) == ["3*b", 4]  # merged, the constant rest reshaped (heads to rows)
    assert sym_shape("reshape", (4, 6), [heads]) is None  # a merge whose boundary moves
    assert sym_shape("reshape", (3, 8), [x]) is None  # the boundary moves: 3 rows of 8 only at b = 2
    assert infer("reshape", (3, 8), [x]) == (3, 8) and not any(isinstance(d, Dim) for d in infer("reshape", (3, 8), [x]))
    merged = Dim(24, b.fp * 12)  # a target the importer wrote symbolically: the IR's own meaning
    assert keys(infer("reshape", (merged,), [x])) == ["12*b"]


def test_a_program_whose_fingerprints_are_too_large_is_searched_at_its_sizes():
    """egglog's shape rules compute in i64: a fingerprint over FP_LIMIT leaves the e-graph static."""
    from eqsat import ir
    from eqsat.dims import FP_LIMIT

    small = ir.input_("x", (Dim.symbol("b", 2), 3))
    huge = ir.input_("x", (Dim(2, FP_LIMIT * 2), 3))
    assert EGraph.from_graph(ir.Graph((small,), (ir.make("relu", [small]),), ("y",))).symbolic
    assert not EGraph.from_graph(ir.Graph((huge,), (ir.make("relu", [huge]),), ("y",))).symbolic


def test_a_sum_or_difference_of_two_symbols_never_reads_as_a_monomial():
    """Symbols at sizes in arithmetic progression (3 + 5 = 2 * 4): no combination a * s + b * t of two of them (a, b
    in +-1, +-2: a concatenation's size, a slice's, a piece used twice) is read as a monomial of a third
    (:attr:`Dim.mono`), whatever the primes the symbols registered earlier in the process took (brute force over
    every pair)."""
    names = [f"ap{v}" for v in range(2, 40)]
    fps = {n: symbol_value(n, int(n[2:])) for n in names}
    for s in names:
        for t in names:
            if s == t:
                continue
            for a in (1, 2, -1, -2):
                for b in (1, 2, -1, -2):
                    size, fp = a * int(s[2:]) + b * int(t[2:]), a * fps[s] + b * fps[t]
                    if size > 0 and fp > 0:
                        assert Dim(size, fp).mono is None, (a, s, b, t)


def _dynamic_model():
    """y = relu(x @ W), x [batch, seq, 8]: two symbols."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def test_a_run_numbers_its_symbols_in_a_table_of_its_own():
    """Symbols registered before (by the process, or an earlier run) change neither an import's fingerprints in a
    fresh table nor the table in use outside a run of ``optimize``, which opens its own."""
    from zoo_cases import ROUND_TRIP

    from eqsat import dims, optimize

    model = _dynamic_model()
    with dims.symbol_table() as outer:  # the process's table, stood in for: other symbols registered first
        for i in range(30):
            symbol_value(f"noise{i}", i + 2)
        noisy = dict(outer.primes)
        seen = []
        for _ in range(2):
            with dims.symbol_table() as table:
                graph = import_generic(model, {"x": (2, 5, 8)})
                dims_seen = [d for n in graph.nodes() for d in n.shape if isinstance(d, Dim)]
                assert {d.mono.key() for d in dims_seen} >= {"batch", "seq"}
                seen.append(([d.fp for d in dims_seen], dict(table.primes)))
        assert seen[0] == seen[1]
        assert min(seen[0][1].values()) == dims.FIRST_PRIME  # numbered from the first prime, not after the noise
        result = optimize(model, ROUND_TRIP)
        assert result.report.to_json()["verified"]
        assert outer.primes == noisy and dims.current() is outer  # the run's symbols were not registered here


def test_a_sum_of_symbols_fingerprints_as_their_sum_and_nothing_else_reads_as_a_constant():
    """SymbolTable.derive: the interface's ``past + 1`` and ``s0 + s1`` are the arithmetic of their symbols'
    fingerprints, so a Concat of a past and one new entry (the IR's own inference) is that symbol, and read back it
    is that symbol. A difference or a quotient keeps a prime of its own: at these sizes ``s1 - s0`` would
    fingerprint as its own size (a constant), and ``s0 // 2`` and ``(s0 + 1) // 2`` as one another."""
    from eqsat.dims import SymbolTable, symbol_table

    values = {"past": 127, "past + 1": 128, "s0": 64, "s1": 832, "s0 + s1": 896, "s1 - s0": 768,
              "s0 // 2": 32, "(s0 + 1) // 2": 32}
    with symbol_table(SymbolTable()) as table:
        table.derive(values)
        past, mask = Dim.symbol("past", 127), Dim.symbol("past + 1", 128)
        joined = infer("concat", (0,), [(past, 4), (1, 4)])[0]
        assert (int(joined), joined.fp) == (128, mask.fp) and mask.mono.key() == "past + 1"
        total = Dim.symbol("s0 + s1", 896)
        assert total.fp == Dim.symbol("s0", 64).fp + Dim.symbol("s1", 832).fp and total.mono.key() == "s0 + s1"
        diff, halves = Dim.symbol("s1 - s0", 768), [Dim.symbol(n, 32) for n in ("s0 // 2", "(s0 + 1) // 2")]
        assert diff.fp != 768 and diff.mono.key() == "s1 - s0"  # a symbol, not the constant 768
        assert halves[0].fp != halves[1].fp and [h.mono.key() for h in halves] == ["s0 // 2", "(s0 + 1) // 2"]
