"""The rule type and the compiler from TENSAT's rule syntax to egglog.

A rule's egglog form never unions directly: its action proposes ``(Pend lhs rhs)`` and the e-graph's
``commit`` ruleset unions the pair only once the right-hand side has a shape equal to the left-hand
side's (SPEC section 2, CheckApply: conv channel divisibility, matmul rank/batch/inner dimensions,
broadcastability, concat ranks and non-axis dimensions, enlarge kernel sizes are all shape rules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from functools import cached_property

from eqsat import ops
from eqsat.egglog import codec

from . import sexpr
from .sexpr import Pattern


@dataclass(frozen=True)
class Rule:
    """One named rewrite: an MCTS action, a line in reports, its own egglog ruleset."""

    name: str
    kind: str
    """single | multi"""
    source: str
    """taso | ours"""
    statement: str
    """one line: ``A(B(x)) -> C(x)``"""
    bodies: tuple[tuple[str, str], ...]
    """(query, actions) of each egglog rule in this rule's ruleset"""
    _: KW_ONLY  # the rest by name (growth, once the sixth argument, is derived: an old call fails loudly)
    lhs: tuple[Pattern, ...] = ()
    """source patterns in TENSAT syntax (TASO rules), used by the verifier to build instances"""
    example: Callable | None = field(default=None, compare=False)
    """ours: fn(rng) -> the roots of one random instance, on which the rule may fire (the verifier draws many)"""
    fixed: Callable | None = field(default=None, compare=False)
    """ours: fn(weight leaf of an instance) -> its value, or None for a random one: the weights whose value the
    rule reads (a causal mask) hold it in every evaluation, and the e-graph sees them as a model's weights"""
    duplicate_of: str | None = None

    @cached_property
    def growth(self) -> int:
        """Most e-nodes one match can add (the node-limit guard multiplies it by the match count): the distinct
        tensor terms of the largest body's actions (:func:`eqsat.egglog.codec.tensor_terms`)."""
        return max((len(codec.tensor_terms(actions)) for _query, actions in self.bodies), default=0)

    def egglog_forms(self) -> list[str]:
        forms = []
        for i, (query, actions) in enumerate(self.bodies):
            forms.append(f'(rule ({query}) ({actions}) :ruleset {self.name} :name "{self.name}#{i}")')
        return forms

    def probe_forms(self, ruleset: str | None = None) -> list[str]:
        """The match-counting twins: the bodies' queries with no action, named ``probe_<rule>#<i>``, in
        ``ruleset`` (default ``probe_<rule>``)."""
        return [f'(rule ({query}) () :ruleset {ruleset or "probe_" + self.name} :name "probe_{self.name}#{i}")'
                for i, (query, _a) in enumerate(self.bodies)]


def _var(v: str) -> str:
    return "v" + v.split("_")[-1] if v.startswith("?input_") else "v" + v.lstrip("?")


class _Compiler:
    """Turns TENSAT patterns into egglog terms, collecting extra query conditions."""

    def __init__(self) -> None:
        self.ranks: set[int] = set()

    def term(self, p: Pattern, splits: dict | None = None) -> str:
        if sexpr.is_var(p):
            return _var(p)  # type: ignore[arg-type]
        if not isinstance(p, tuple):
            return str(p)
        op, args = p[0], p[1:]
        t = lambda x: self.term(x, splits)  # noqa: E731
        if op in ("split_0", "split_1"):
            inner = args[0]
            assert isinstance(inner, tuple) and inner[0] == "split", p
            axis, x = inner[1], inner[2]
            lo, hi = splits[op]  # type: ignore[index]
            return codec.term("slice", (axis, lo, hi), [t(x)])
        attrs, operands, rank = _taso_form(op, args)
        if rank is not None:
            self.ranks.add(rank)
        return codec.term(op, attrs, [t(x) for x in operands])


def _taso_form(op: str, args: tuple) -> tuple[tuple, tuple, int | None]:
    """(attrs, operand patterns, concat rank) of a TENSAT pattern node, from the operator table."""
    entry = ops.OPS.get(op)
    if entry is None or entry.taso is None:
        raise ValueError(f"operator {op!r} not supported in TASO rules")
    return entry.taso(args)


def _shape_atoms(var: str, rank: int, prefix: str) -> str:
    dims = " ".join(f"{prefix}{i}" for i in range(rank))
    return f"(= (S{rank} {dims}) (shape {var}))"


def _sym_dims(p: Pattern, rank: int) -> list[str]:
    """egglog expressions for the dimensions of a pattern term, from its variables' bound dimensions
    ``vN_d0..`` (each operator's ``sym_shape`` in :mod:`eqsat.ops`)."""
    if sexpr.is_var(p):
        return [f"{_var(p)}_d{k}" for k in range(rank)]  # type: ignore[arg-type]
    assert isinstance(p, tuple)  # a pattern is a variable or an operator term
    op, args = p[0], p[1:]
    if op in ("split_0", "split_1"):
        raise ValueError("split terms have no symbolic shape")
    attrs, operands, _rank = _taso_form(op, args)
    sym = ops.OPS[op].sym_shape
    if sym is None:
        raise ValueError(f"no symbolic shape rule for {op!r}")
    return sym(attrs, [_sym_dims(x, rank) for x in operands])


def _walk(p: Pattern):
    if isinstance(p, tuple):
        yield p
        for x in p[1:]:
            yield from _walk(x)


def _conditions(sources: tuple[Pattern, ...], targets: tuple[Pattern, ...], comp: _Compiler) -> list[str]:
    """Conditions that make TASO's identities sound in the IR's semantics:

    * element-wise ops never broadcast (TASO's identities are over equal shapes: with broadcasting,
      conv(x, w1) + conv(x, w2) -> conv(x, w1 + w2) is wrong for a 3x3 and a 1x1 kernel);
    * a source conv is ungrouped when the rule concatenates (concatenating a grouped conv's weights or
      inputs changes which channels a group sees), and a target conv over channel-concatenated inputs
      and output-concatenated weights (a conv with two groups) has equal halves.
    """
    every = sources + targets
    ops = set().union(*(sexpr.ops(p) for p in every))
    variables = sexpr.variables(("all", *sources))
    rank = 4 if "conv2d" in ops else 2 if "matmul" in ops else max(comp.ranks) if comp.ranks else None
    out: list[str] = []
    if rank is None:
        if ops & {"ewadd", "ewmul"}:
            out += [f"(= (shape {_var(variables[0])}) (shape {_var(v)}))" for v in variables[1:]]
        return out
    if not (ops & {"ewadd", "ewmul", "concat"}):
        return out
    out += [_shape_atoms(_var(v), rank, f"{_var(v)}_d") for v in variables]
    for p in every:
        for t in _walk(p):
            if t[0] in ("ewadd", "ewmul"):
                for x, y in zip(_sym_dims(t[1], rank), _sym_dims(t[2], rank)):
                    out.append(f"(= {x} {y})")
    if "concat" in ops and "conv2d" in ops:
        for p in sources:
            for t in _walk(p):
                if t[0] == "conv2d":
                    out.append(f"(= {_sym_dims(t[5], rank)[1]} {_sym_dims(t[6], rank)[1]})")
        for p in targets:
            for t in _walk(p):
                if t[0] != "conv2d":
                    continue
                x, w = t[5], t[6]
                if isinstance(x, tuple) and x[0] == "concat" and x[1] == 1 and isinstance(w, tuple) \
                        and w[0] == "concat" and w[1] == 0:
                    out.append(f"(= {_sym_dims(x[3], rank)[1]} {_sym_dims(x[4], rank)[1]})")
                    out.append(f"(= {_sym_dims(w[3], rank)[0]} {_sym_dims(w[4], rank)[0]})")
                else:
                    out.append(f"(= {_sym_dims(x, rank)[1]} {_sym_dims(w, rank)[1]})")
    return list(dict.fromkeys(out))


def compile_single(name: str, lhs: Pattern, rhs: Pattern, duplicate_of: str | None = None) -> Rule:
    comp = _Compiler()
    lhs_t, rhs_t = comp.term(lhs), comp.term(rhs)
    query = [f"(= root {lhs_t})", "(= root_shape (shape root))"]
    query += _conditions((lhs,), (rhs,), comp)
    return Rule(name, "single", "taso", f"{sexpr.show(lhs)} -> {sexpr.show(rhs)}",
                ((" ".join(query), f"(Pend root {rhs_t})"),), lhs=(lhs,), duplicate_of=duplicate_of)


def _concat_rank(p: Pattern) -> int | None:
    if isinstance(p, tuple):
        if p[0] == "concat":
            return int(p[2])
        for x in p[1:]:
            r = _concat_rank(x)
            if r:
                return r
    return None


def is_symmetric(src1: Pattern, src2: Pattern) -> bool:
    """Swapping the two sources (with a variable renaming) gives the same pair of patterns."""
    mapping: dict[str, str] = {}

    def pair(a: Pattern, b: Pattern) -> bool:
        if sexpr.is_var(a) and sexpr.is_var(b):
            for x, y in ((a, b), (b, a)):
                if mapping.setdefault(x, y) != y:  # type: ignore[arg-type]
                    return False
            return True
        if isinstance(a, tuple) and isinstance(b, tuple):
            return len(a) == len(b) and a[0] == b[0] and all(pair(x, y) for x, y in zip(a[1:], b[1:]))
        return a == b

    return pair(src1, src2) and sexpr.rename(src2, mapping) == src1


def compile_multi(name: str, src1: Pattern, dst1: Pattern, src2: Pattern, dst2: Pattern) -> Rule:
    """A two-source rule. Sources that share no variable (TASO's rules 1 and 2) are compiled as two
    independent bodies: a joint query would enumerate the cross product of unrelated matches."""
    statement = f"{sexpr.show(src1)}, {sexpr.show(src2)} -> {sexpr.show(dst1)}, {sexpr.show(dst2)}"
    if (not set(sexpr.variables(src1)) & set(sexpr.variables(src2))
            and _split_axis(dst1) is None and _split_axis(dst2) is None):
        bodies = []
        for src, dst in ((src1, dst1), (src2, dst2)):
            single = compile_single(name, src, dst)
            bodies.append(single.bodies[0])
        return Rule(name, "multi", "taso", statement, tuple(bodies), lhs=(src1, src2))
    comp = _Compiler()
    s1, s2 = comp.term(src1), comp.term(src2)
    rank = _concat_rank(dst1) or _concat_rank(dst2)
    query = [f"(= r1 {s1})", f"(= r2 {s2})", "(!= r1 r2)"]
    if rank:
        query += [_shape_atoms("r1", rank, "a"), _shape_atoms("r2", rank, "b")]
    else:
        query += ["(= r1_shape (shape r1))", "(= r2_shape (shape r2))"]
    if is_symmetric(src1, src2):
        query.append("(= r1 (ordering-max r1 r2))")

    def split_bounds(dst: Pattern) -> dict:
        axis = _split_axis(dst)
        if axis is None:
            return {}
        return {"split_0": ("0", f"a{axis}"), "split_1": (f"a{axis}", f"(+ a{axis} b{axis})")}

    d1 = comp.term(dst1, split_bounds(dst1))
    d2 = comp.term(dst2, split_bounds(dst2))
    query += _conditions((src1, src2), (_unsplit(dst1), _unsplit(dst2)), comp)
    return Rule(name, "multi", "taso", statement, ((" ".join(query), f"(Pend r1 {d1}) (Pend r2 {d2})"),),
                lhs=(src1, src2))


def _unsplit(p: Pattern) -> Pattern:
    """The term under split_k(split(axis, term)), for conditions on it."""
    if isinstance(p, tuple) and p[0] in ("split_0", "split_1"):
        return p[1][2]
    return p


def _split_axis(p: Pattern) -> int | None:
    if isinstance(p, tuple):
        if p[0] == "split":
            return int(p[1])
        for x in p[1:]:
            a = _split_axis(x)
            if a is not None:
                return a
    return None
