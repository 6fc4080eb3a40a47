"""Rules that can ever fire on an e-graph, and an engine that registers only those.

A rule's query needs a row in every tensor constructor it names. Starting from the constructors the e-graph
holds, a rule body whose query names only present constructors may fire, and then its actions may create the
constructors they name (even a proposal that never gets a shape stays in its table); the closure of that is
every constructor the e-graph can ever hold. A body outside it can never match: the analysis and commit
rulesets only compute shapes and union, never create a tensor term. On NASNet-A 75 of the 148 default rules
can fire, on SqueezeNet 45, on BERT 27.

Registering a rule costs on every egglog push and pop (egglog clones each registered rule and its probe twin):
a push-pop pair of SqueezeNet's e-graph took 37 ms with every default rule registered, 10 ms with the 45 that can
fire, 2 ms with none (NASNet-A's: 32, 23 and 6 ms; 2 busy cores). :class:`ReachEngine` registers only the rules
that can fire and answers the others as a run that matched nothing, without calling egglog, so a search over
every rule's name sees the same outcomes at a fraction of the cost. The same closure bounds the ``analysis``
rules: registering the rules that can fire ensures the shape and AllW rules of every constructor they name
(:class:`RuleEngine`), which is the closure, and no other constructor's (egglog pays for those on each push
and analysis run too: SqueezeNet's e-graph can hold 11 of the 31 constructors).

>>> from eqsat import ir
>>> from eqsat.egglog.egraph import EGraph
>>> from eqsat.rules import registry
>>> x = ir.input_("x", (4, 4)); w = ir.weight("w", (4, 4)); v = ir.weight("v", (4, 4))
>>> eg = EGraph.from_graph(ir.Graph((x,), (ir.make("matmul", [ir.make("matmul", [x, w], (0,)), v], (0,)),), ("y",)))
>>> engine = ReachEngine(eg, registry.taso_rules())
>>> engine.idle("taso_s000"), engine.apply("taso_s000").changed
(False, True)
>>> engine.idle("taso_s031"), engine.apply("taso_s031").changed  # a conv rule: this e-graph never holds a conv
(True, False)
"""

from __future__ import annotations

from collections.abc import Iterable

from eqsat.egglog import schema
from eqsat.egglog.egraph import EGraph
from eqsat.egglog.schema import constructors

from .engine import RuleEngine
from .rule import Rule

__all__ = ["ReachEngine", "constructors", "fireable", "present_constructors"]  # constructors: from the schema


def present_constructors(egraph: EGraph) -> set[str]:
    """The tensor constructors with at least one row in ``egraph`` now."""
    out = egraph.run_program("(print-size)")[0]
    return {name for name, n in out.sizes if n > 0 and name in schema.CONSTRUCTORS}


def fireable(rules: Iterable[Rule], present: set[str]) -> set[str]:
    """Names of the rules with a body that can ever match an e-graph holding the constructors ``present``
    (and whatever the fireable bodies' actions create)."""
    waiting = [(r.name, constructors(q), constructors(a)) for r in rules for q, a in r.bodies]
    have, out = set(present), set()
    grown = True
    while grown:
        grown, left = False, []
        for name, needs, makes in waiting:
            if needs <= have:
                out.add(name)
                grown |= not makes <= have
                have |= makes
            else:
                left.append((name, needs, makes))
        waiting = left
    return out


class ReachEngine(RuleEngine):
    """A :class:`RuleEngine` over ``rules`` that registers in egglog only those that can fire on ``egraph``
    (:func:`fireable`, from the constructors it holds now); the others keep their names in :attr:`rules` and are
    idle: applying or probing one reports no match at no cost; the e-graph gets the analysis rules of the
    constructors of that closure only. Programs added to the e-graph later are not seen: build the engine on the
    e-graph that holds the program."""

    def __init__(self, egraph: EGraph, rules: Iterable[Rule]):
        rules = list(rules)
        super().__init__(egraph, rules, registered=fireable(rules, present_constructors(egraph)))
