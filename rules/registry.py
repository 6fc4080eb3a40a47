"""All rules by name: TASO's (single, multi) and ours."""

from __future__ import annotations

from functools import lru_cache

from eqsat.onnx.kernels import runtime_runs_kernels

from . import ours, taso
from .ours import kernels
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


KERNEL_RULES = frozenset(r.name for r in kernels.rules)
"""the rules that write the runtime's kernels of a newer opset (rules/ours/kernels.py)"""


def rule_set(name: str, portable: bool = False) -> tuple[Rule, ...]:
    """Every rule of the variant ``name`` (see :data:`RULE_SETS`); without :data:`KERNEL_RULES` where
    ``portable`` (standard operators of the model's own opset only) or where onnxruntime does not run the kernels."""
    rules = all_rules(nasrnn=RULE_SETS[name])
    if portable or not runtime_runs_kernels():
        return tuple(r for r in rules if r.name not in KERNEL_RULES)
    return rules


def actions(rules) -> list[Rule]:
    """The rules a scheduler chooses among: duplicates of earlier rules left out."""
    return [r for r in rules if r.duplicate_of is None]


def by_name(nasrnn: bool = False) -> dict[str, Rule]:
    return {r.name: r for r in all_rules(nasrnn)}
