"""The ``sym`` analysis of ``Reshape`` (:mod:`eqsat.dims`): which symbols a reshape's target dimensions are.

The e-graph's terms hold a reshape's target as numbers (the representative sizes), so the shape rule's ``sym``
twin (the product of the target equal to the operand's) would hold only for an operand of constant sizes. These
rules, in its place, read the target's symbols off the operand's, for the reshapes programs and rewrites make:

* ``keep``: the leading dimensions kept (the target's first ``L`` sizes are the operand's), the rest constant on
  both sides (splitting or merging the heads of ``[batch, seq, 768]``, reshaping a weight);
* ``flatten``: the leading dimensions merged into one, the others kept and constant (``[batch, seq, 768]`` to
  ``[batch*seq, 768]``);
* ``merge``: the leading dimensions merged into one, the constant rest reshaped (``[batch, seq, 12, 64]`` to
  ``[batch*seq, 768]``: a reshape back to rows and the flattening after it, cancelled);
* ``unflatten``: a product of such a flattened operand with a weight (a ``Matmul``, or a ``Linear`` with its bias),
  reshaped back to the operand's leading dimensions, its last one kept or split into constant ones (``x W`` on
  ``[batch*seq, 768]`` back to ``[batch, seq, N]``, or to ``[batch, seq, heads, N / heads]``: a query projection
  flattened into one GEMM): the leading dimensions are the flattened operand's.

* ``same``: a reshape to the target of another reshape whose operand has the same shape and symbols takes its
  symbols (``reshape_sink`` writes the reshape back to ``[batch, seq, N]`` below an element-wise operator, a
  bias or a norm of the flattened operand: the symbols are those of the reshape it moved).

:func:`eqsat.dims.reshape_sym` is the Python twin of ``keep``, ``flatten`` and ``merge`` (the last two read terms,
not only shapes).
"""

from __future__ import annotations

from ..ops.egglog_text import MAX_RANK, fold, rule, shape_of

__all__ = ["reshape_sym_rules"]


def _keep(r: int, q: int, lead: int) -> str:
    t = [f"t{i}" for i in range(q)]
    a = t[:lead] + [f"a{i}" for i in range(lead, r)]
    sym = [f"s{i}" for i in range(lead)] + a[lead:]
    return rule(f"sym_Reshape{r}_{q}_keep{lead}",
                [f"(= e (Reshape {shape_of(t)} x))", "(= h (shape e))", f"(= {shape_of(a)} (shape x))",
                 f"(= {shape_of(sym)} (sym x))"],
                [f"(set (sym e) {shape_of(sym[:lead] + t[lead:])})"])


def _flatten(r: int, q: int) -> str:
    kept = [f"c{i}" for i in range(1, q)]
    lead = r - q + 1
    a, s = [f"a{i}" for i in range(lead)], [f"s{i}" for i in range(lead)]
    return rule(f"sym_Reshape{r}_{q}_flatten",
                [f"(= e (Reshape {shape_of(['t0'] + kept)} x))", "(= h (shape e))",
                 f"(= {shape_of(a + kept)} (shape x))", f"(= {shape_of(s + kept)} (sym x))"],
                [f"(set (sym e) {shape_of([fold('*', s)] + kept)})"])


_PRODUCTS = {"matmul": "(Matmul 0 (Reshape (S2 m k) x) w)", "linear": "(Linear (Reshape (S2 m k) x) w b)"}
"""the products of a flattened operand ``x`` with a weight ``w`` [k, n] that ``unflatten`` reads"""


def _unflatten(r: int, q: int, product: str) -> str:
    """``x`` of rank ``r`` flattened to ``[m, k]``, times ``w``, reshaped to ``x``'s ``r - 1`` leading sizes and
    ``q - r + 1`` constant ones whose product is ``n``."""
    t = [f"t{i}" for i in range(r - 1)]
    s = [f"s{i}" for i in range(r - 1)]
    c = [f"c{i}" for i in range(r - 1, q)] if q > r else ["n"]
    split = [f"(= n {fold('*', c)})"] if q > r else []
    suffix = "" if (q, product) == (r, "matmul") else f"_{q}_{product}"
    return rule(f"sym_Reshape{r}_unflatten{suffix}",
                [f"(= e (Reshape {shape_of(t + c)} {_PRODUCTS[product]}))", "(= h (shape e))",
                 f"(= {shape_of(t + ['k'])} (shape x))", f"(= {shape_of(s + ['k'])} (sym x))",
                 "(= (S2 k n) (shape w))", "(= (S2 k n) (sym w))", *split],
                [f"(set (sym e) {shape_of(s + c)})"])


def _merge(r: int, q: int, lead: int) -> str:
    a, s = [f"a{i}" for i in range(lead)], [f"s{i}" for i in range(lead)]
    b, c = [f"b{i}" for i in range(lead, r)], [f"c{i}" for i in range(1, q)]
    return rule(f"sym_Reshape{r}_{q}_merge{lead}",
                [f"(= e (Reshape {shape_of(['t0'] + c)} x))", "(= h (shape e))",
                 f"(= {shape_of(a + b)} (shape x))", f"(= {shape_of(s + b)} (sym x))",
                 f"(= t0 {fold('*', a)})", f"(= {fold('*', b)} {fold('*', c)})"],
                [f"(set (sym e) {shape_of([fold('*', s)] + c)})"])


def _same() -> str:
    return rule("sym_Reshape_same",
                ["(= e (Reshape s y))", "(= f (Reshape s x))", "(= h (sym f))", "(= z (sym x))", "(= z (sym y))",
                 "(= a (shape x))", "(= a (shape y))"],
                ["(set (sym e) h)"])


def reshape_sym_rules() -> list[str]:
    """The ``sym`` rules of ``Reshape`` beside its shape rule's twin, in one fixed order."""
    out = []
    for r in range(1, MAX_RANK + 1):
        for q in range(1, MAX_RANK + 1):
            out += [_keep(r, q, lead) for lead in range(min(r, q) + 1)]
            if r > q:
                out.append(_flatten(r, q))
            if q >= 2:
                out += [_merge(r, q, lead) for lead in range(2, r)]
    out += [_unflatten(r, q, p) for r in range(3, MAX_RANK + 1) for q in range(r, MAX_RANK + 1) for p in _PRODUCTS]
    out.append(_same())
    return out
