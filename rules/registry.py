"""All rules by name: TASO's (single, multi) and ours."""

from __future__ import annotations

from functools import lru_cache

from . import ours, taso
from .rule import Rule


@lru_cache(maxsize=2)
def taso_rules(nasrnn: bool = False) -> tuple[Rule, ...]:
    return tuple(taso.single_rules()) + tuple(taso.multi_rules(nasrnn))


def our_rules() -> tuple[Rule, ...]:
    return tuple(ours.rules)


def all_rules(nasrnn: bool = False, include_ours: bool = True) -> tuple[Rule, ...]:
    return taso_rules(nasrnn) + (our_rules() if include_ours else ())


RULE_SETS: dict[str, bool] = {"default": False, "nasrnn": True}
"""rule-set variants (``--rule-set``) -> whether they use NASRNN's multi-pattern variant"""


def rule_set(name: str) -> tuple[Rule, ...]:
    """Every rule of the variant ``name`` (see :data:`RULE_SETS`)."""
    return all_rules(nasrnn=RULE_SETS[name])


def actions(rules) -> list[Rule]:
    """The rules a scheduler chooses among: duplicates of earlier rules left out."""
    return [r for r in rules if r.duplicate_of is None]


def by_name(nasrnn: bool = False) -> dict[str, Rule]:
    return {r.name: r for r in all_rules(nasrnn)}
