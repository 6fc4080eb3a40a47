"""Inputs a program reads at their head only: a tie the original is fed under (``total = past + seq``) though it
also runs with a longer ``total``, reading its mask at the keys' positions only (transformers slices it so).

A program written for the tie (onnxruntime's ``Attention`` over a mask of ``past + seq`` positions) refuses, or
reads differently, a longer mask. Read through a ``Slice`` of each such input to the tie's first positions, it
computes what the original computes wherever the original reads only those (:attr:`eqsat.onnx.axes.tied.Ties.head`,
found by runs; the check at further sizes runs both with the symbol longer). The interface keeps the user's names
and sizes; where the tie holds the Slice copies a mask of a few hundred integers.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..subgraphs import defined_names, rename_outer, subgraphs
from .interface import symbols

MIN_OPSET = 10
"""the first opset whose Slice reads its bounds as inputs"""


def _terms(expression: str) -> tuple[list[str], int] | None:
    """(symbols, constant) of a sum of symbols and integers (``past + seq``, ``past + 1``); None for anything else."""
    names: list[str] = []
    constant = 0

    def walk(node: ast.expr) -> bool:
        nonlocal constant
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return walk(node.left) and walk(node.right)
        if isinstance(node, ast.Name):
            names.append(node.id)
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            constant += node.value
            return True
        return False

    return (names, constant) if walk(ast.parse(expression, mode="eval").body) else None


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def sliced_heads(model: onnx.ModelProto, heads: Mapping[str, str]) -> onnx.ModelProto | None:
    """``model`` with every input that has an axis of a symbol of ``heads`` (symbol -> a sum of other symbols and
    integers) read through a Slice of that axis to the sum's first positions, the sum computed from the sizes of
    inputs that hold its symbols; ``model`` itself where no input has such an axis; None where it cannot be written
    (an opset before Slice's bounds were inputs, a symbol of the sum no input of other axes holds)."""
    places = symbols(model)
    cut = {s: e for s, e in heads.items() if places.get(s)}
    if not cut:
        return model
    if _opset(model) < MIN_OPSET:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    taken = {n for node in g.node for n in [*node.input, *node.output, *defined_names(node)]} \
        | {t.name for t in g.initializer} | {v.name for v in g.input} | {v.name for v in g.output}

    def fresh(base: str) -> str:
        k = 0
        while f"{base}_{k}" in taken:
            k += 1
        taken.add(f"{base}_{k}")
        return f"{base}_{k}"

    def const(values: list[int], base: str) -> str:
        name = fresh(base)
        g.initializer.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    sliced = {name for s in cut for name, _ in places[s]}
    nodes: list[onnx.NodeProto] = []
    ends: dict[str, str] = {}
    for symbol, expression in cut.items():
        terms = _terms(expression)
        if terms is None:
            return None
        parts = []
        for name in terms[0]:
            where = [p for p in places.get(name, []) if p[0] not in sliced] or places.get(name, [])
            if not where:
                return None
            source, axis = where[0]
            shape = fresh(f"{source}_shape")
            parts.append(fresh(f"{name}_size"))
            nodes += [helper.make_node("Shape", [source], [shape], name=shape),
                      helper.make_node("Gather", [shape, const([axis], "head_axis")], [parts[-1]], name=parts[-1],
                                       axis=0)]
        if terms[1] or not parts:
            parts.append(const([terms[1]], "head_constant"))
        total = parts[0]
        for part in parts[1:]:
            added = fresh(f"{symbol}_head")
            nodes.append(helper.make_node("Add", [total, part], [added], name=added))
            total = added
        ends[symbol] = total
    renamed: dict[str, str] = {}
    for vi in g.input:
        axes = [(k, ends[s]) for s, spots in places.items() if s in ends for name, k in spots if name == vi.name]
        if not axes:
            continue
        source = vi.name
        for axis, end in axes:
            head = fresh(f"{vi.name}_head")
            nodes.append(helper.make_node("Slice", [source, const([0], "head_start"), end, const([axis], "head_axis")],
                                          [head], name=head))
            source = head
        renamed[vi.name] = source
    for node in g.node:
        for k, name in enumerate(node.input):
            node.input[k] = renamed.get(name, name)
        for sub in subgraphs(node):
            rename_outer(sub, renamed)
    rest = list(g.node)
    del g.node[:]
    g.node.extend([*nodes, *rest])
    return out


__all__ = ["MIN_OPSET", "sliced_heads"]
