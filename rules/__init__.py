"""Rewrite rules: TASO's rule set (as data, compiled to egglog), our own rules, the rule engine that
applies one named rule at a time, and the verifier."""

from __future__ import annotations

from .engine import RuleEngine, StepReport
from .registry import KERNEL_RULES, RULE_SETS, actions, all_rules, by_name, our_rules, rule_set, taso_rules
from .rule import Rule

__all__ = ["KERNEL_RULES", "RULE_SETS", "Rule", "RuleEngine", "StepReport", "actions", "all_rules", "by_name", "our_rules", "rule_set",
           "taso_rules"]
