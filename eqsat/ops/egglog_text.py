"""egglog text the operator entries share: shape values, rule forms, terms."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MAX_RANK = 4
"""shapes up to this rank are ``S0`` .. ``S4`` values (egglog shape rules cover them); higher ranks ``SN``"""


def shape_ctor(rank: int) -> str:
    return f"S{rank}"


def shape_term(dims: Iterable[int]) -> str:
    """egglog term of a shape value."""
    dims = list(dims)
    if len(dims) <= MAX_RANK:
        return f"({shape_ctor(len(dims))}{''.join(' ' + str(int(d)) for d in dims)})"
    return f'(SN "{"_".join(str(int(d)) for d in dims)}")'


def dim_vars(prefix: str, rank: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(rank)]


def shape_of(vs: Sequence[str]) -> str:
    """A shape pattern or expression from per-dimension egglog expressions."""
    return f"({shape_ctor(len(vs))} {' '.join(vs)})" if vs else "(S0)"


def fold(op: str, terms: Sequence[str]) -> str:
    """egglog arithmetic ``op`` over ``terms``, left to right: ``fold("*", ["a", "b", "c"])`` is
    ``(* (* a b) c)``."""
    out = terms[0]
    for t in terms[1:]:
        out = f"({op} {out} {t})"
    return out


def rule(name: str, query: list[str], actions: list[str], ruleset: str = "analysis") -> str:
    return f"(rule ({' '.join(query)}) ({' '.join(actions)}) :ruleset {ruleset} :name \"{name}\")"


def attr_text(a: object) -> str:
    """An i64 attribute: an int, or (in rule patterns) an egglog variable or expression."""
    return a if isinstance(a, str) else str(int(a))  # type: ignore[call-overload]
