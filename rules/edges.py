"""The rule verifier's edge draws: the inputs users feed that are not ordinary numbers, against the equivalence
contract (docs/robustness.md). Each rule's instances are evaluated as written (the reference: their IR terms, with
numpy in float64) and every e-node the rule adds is compared with the reference of its e-class:

* ``rows of -inf``: the leaves that are an attention's additive mask (an ``attention``'s or ``sdpa``'s fourth
  operand, or an operand of an addition a softmax reads) hold rows of -inf throughout (a padded query, fully
  masked) and -inf strewn; every other leaf is normal. Where the reference gives NaN or an infinity, each e-node
  gives the same; elsewhere it agrees within rounding.
* ``a NaN``: one NaN in about half the leaves. Where the reference gives NaN or an infinity each e-node gives the
  same (a NaN is never made a number); elsewhere it agrees, or gives NaN (a NaN may reach more places, as when a
  kernel enlarged with zeros multiplies it: 0 x NaN is NaN).
* ``near the range``: each leaf scaled by 2^k (k = :data:`NEAR` for half of them, else drawn in [0, NEAR]), every
  value rounded to float32 as it is computed (past its range: an infinity, as float32 arithmetic gives). Where every
  value an instance's reference computes is within the contract's magnitude (:data:`eqsat.verification.feeds.RANGE_HEADROOM`
  of float32's largest), each e-node gives a number wherever it does: no overflow that reaches a value (one that a
  ReLU clips, say, does not). Values are not compared there: a softmax of scores near 2^116, whose float32 ulp is
  2^93, is as ill-conditioned in the original as in any rewrite of it; the ordinary draws compare values.

Infinities elsewhere than in masks are outside the contract: reassociating a product over infinities turns
``inf - inf`` up in other places (NaN where the original is infinite), as any compiler's reassociation does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from eqsat import ir, ops
from eqsat.ops import NotEvaluable
from eqsat.snapshot import Snapshot
from eqsat.verification.feeds import RANGE_HEADROOM

EDGES = ("rows of -inf", "a NaN", "near the range")
FLOAT32_MAX = float(np.finfo(np.float32).max)
_RTOL = 1e-9
NEAR = 58
"""the largest power of two a leaf is scaled by in ``near the range``: a product of two such leaves reaches the
contract's magnitude (2^116, :data:`eqsat.verification.feeds.RANGE_HEADROOM` of float32's largest)"""


def mask_leaves(roots: Sequence[ir.Node]) -> set[int]:
    """ids of the leaves of ``roots`` that are an additive attention mask: an ``attention``'s or ``sdpa``'s
    fourth operand (and their NaN-zeroing forms'), or an operand of an ``ewadd`` that a ``softmax`` reads."""
    order = ir.topo_order(roots)
    softmaxed = {id(n.inputs[0]) for n in order if n.op == "softmax"}
    out: set[int] = set()
    for n in order:
        operands = n.inputs[3:4] if n.op in ("attention", "sdpa", "attention_nz", "sdpa_nz") else n.inputs if n.op == "ewadd" \
            and id(n) in softmaxed else ()
        out |= {id(m) for m in operands if m.op in ("input", "weight")}
    return out


def _leaf_value(rng: np.random.Generator, leaf: ir.Node, edge: str, masks: set[int]) -> np.ndarray:
    x = rng.standard_normal(leaf.shape)
    if not x.size:
        return x
    if edge == "rows of -inf" and id(leaf) in masks:
        rows = x.reshape(-1, leaf.shape[-1]) if leaf.shape else x.reshape(1, 1)
        rows[::3] = -np.inf
        x[rng.random(x.shape) < 0.1] = -np.inf
    elif edge == "a NaN" and rng.random() < 0.5:
        x.reshape(-1)[int(rng.integers(x.size))] = np.nan
    elif edge == "near the range":  # half the leaves at the top: a product of two reaches the contract's bound
        x *= 2.0 ** (NEAR if rng.random() < 0.5 else int(rng.integers(0, NEAR + 1)))
    return x


def _as_float32(value: np.ndarray) -> np.ndarray:
    """``value`` rounded to float32 (past its range: an infinity), held in float64."""
    return np.asarray(value, dtype=np.float64).astype(np.float32).astype(np.float64)


def _evaluate(op: str, attrs: tuple, args: list[np.ndarray], edge: str) -> np.ndarray | None:
    try:
        value = ops.evaluate(op, attrs, args, None)
    except NotEvaluable:
        return None
    return _as_float32(value) if edge == "near the range" else value


def _disagrees(ref: np.ndarray, got: np.ndarray, nan_spreads: bool, rtol: float | None = _RTOL) -> str | None:
    """Why ``got`` breaks the contract against the reference ``ref`` (None where it keeps it); ``rtol`` None:
    where both are finite, any values (only NaN and the infinities are compared)."""
    if ref.shape != got.shape:
        return f"shape {got.shape} where the original's is {ref.shape}"
    ref_nan, got_nan = np.isnan(ref), np.isnan(got)
    if np.any(ref_nan & ~got_nan):
        return f"a number where the original gives NaN ({int((ref_nan & ~got_nan).sum())} places)"
    ref_inf = np.isinf(ref)
    if np.any(ref_inf) and not np.array_equal(ref[ref_inf], got[ref_inf]):
        return "another value where the original gives an infinity"
    finite = np.isfinite(ref)
    if nan_spreads:
        finite &= ~got_nan
    if np.any(~np.isfinite(got[finite])):
        return "NaN or an infinity where the original gives a number"
    scale = float(np.max(np.abs(ref[finite]), initial=0.0))
    if rtol is not None and not np.allclose(ref[finite], got[finite], rtol=rtol, atol=rtol * max(1.0, scale)):
        return "other values where the original gives numbers"
    return None


def edge_check(snap: Snapshot, groups: Sequence[Sequence[ir.Node]], owner: Mapping[int, int],
               fixed: Mapping[str, np.ndarray], seed: int) -> str | None:
    """The first breach of the contract on the edge draws (what and where), or None. ``groups``: each instance's
    roots as encoded; ``owner``: e-class -> the instance that reaches it; ``fixed``: the weights whose values the
    rule reads, held in every draw."""
    rng = np.random.default_rng(seed)
    masks = set().union(*(mask_leaves(g) for g in groups))
    nodes = [n for g in groups for n in ir.topo_order(g)]
    for edge in EDGES:
        values: dict[int, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for n in nodes:
                if n.op in ("input", "weight"):
                    values[id(n)] = np.asarray(fixed[n.name], dtype=np.float64) if n.name is not None \
                        and n.name in fixed else _leaf_value(rng, n, edge, masks)
                elif id(n) not in values and all(id(i) in values for i in n.inputs):
                    value = _evaluate(n.op, n.attrs, [values[id(i)] for i in n.inputs], edge)
                    if value is not None:
                        values[id(n)] = value
            found = _check_classes(snap, groups, nodes, values, owner, edge)
        if found:
            return f"on {edge}: {found}"
    return None


def _check_classes(snap: Snapshot, groups: Sequence[Sequence[ir.Node]], nodes: Sequence[ir.Node],
                   values: Mapping[int, np.ndarray], owner: Mapping[int, int], edge: str) -> str | None:
    ref: dict[int, np.ndarray] = {}
    for n in nodes:
        c = snap.class_of(n)
        if c is not None and id(n) in values:
            ref.setdefault(c, values[id(n)])
    within: set[int] | None = None
    if edge == "near the range":  # the instances whose reference stays within the contract's magnitude
        big = {k for k, g in enumerate(groups) for n in ir.topo_order(g) if id(n) in values
               and np.asarray(values[id(n)]).size
               and not float(np.max(np.abs(values[id(n)]))) <= RANGE_HEADROOM * FLOAT32_MAX}
        within = set(range(len(groups))) - big
    class_values = dict(ref)
    done: set[int] = set()
    progress = True
    while progress:
        progress = False
        for i, e in enumerate(snap.nodes):
            if i in done or snap.shapes[e.eclass] is None or e.op in ("input", "weight") \
                    or any(ch not in class_values for ch in e.children):
                continue
            done.add(i)
            progress = True
            got = _evaluate(e.op, e.attrs, [class_values[ch] for ch in e.children], edge)
            if got is None:
                continue
            c = e.eclass
            if c not in class_values:
                class_values[c] = got
            if within is not None and owner.get(c) not in within:
                continue
            if c in ref:
                why = _disagrees(np.asarray(ref[c]), np.asarray(got), nan_spreads=edge == "a NaN",
                                 rtol=_RTOL if within is None else None)
                if why:
                    return f"{e.op}{e.attrs} gives {why}" + (" (within the contract's magnitude)" if within else "")
    return None
