"""The egglog program that declares the tensor language and its analyses.

* ``T``: one datatype of tensor operators (constructor table :data:`CONSTRUCTORS`, derived from the operator
  table :mod:`eqsat.ops`, whose entries also generate the shape rules).
* ``shape``: the shape analysis, a function ``T -> Shape`` filled by the ``analysis`` ruleset for terms
  that rules create (the encoder sets it directly for the initial program). A term without a shape is
  ill-formed: rewrites only *propose* a right-hand side (``Pend lhs rhs``) and the ``commit`` ruleset
  unions it only once its shape exists and equals the left-hand side's, so no ill-shaped term is ever
  part of an e-class reachable from the program.
* ``sym``: the symbolic twin of ``shape`` for a program with symbolic dimensions (:mod:`eqsat.dims`): the same
  rules over each dimension's fingerprint (``Reshape``'s: :mod:`eqsat.egglog.reshape_sym`). In such an e-graph (``symbolic``) ``commit`` also wants the right-hand
  side's ``sym`` equal to the left-hand side's, so a rewrite valid only at the representative sizes never commits.
  A static program declares neither.
* ``AllW``: the all-weights flag (computable from weights alone, so precomputable before inference).
* :data:`MARKS`, facts about a value that the encoder reads off the program (:attr:`eqsat.egglog.codec.Encoding.marks`)
  and rules may require: ``Causal``, the weights that hold a causal mask (an attention masked by one is a causal
  kernel, ``attention_causal``); ``Finite``, the masks finite on every input the model can be fed (an attention
  masked by one may become a runtime kernel, ``attention_kernel``: rules/ours/kernels.py); ``AboveLowest``, the
  NaN-zeroing attention masks whose finite values lie far above float32's lowest on every input
  (``attention_nz_kernel``).
* ``node``: one table of named handles (``"n17"``) for the encoder; no ``let`` globals.

:func:`program` declares every constructor (declarations cost nothing at run time) but none of the
``analysis`` rules: those come per constructor from :func:`analysis_rules`, registered by
:meth:`eqsat.egglog.egraph.EGraph.ensure_analysis` only for the constructors an e-graph can ever hold. egglog clones
every registered rule on each push and scans each on every analysis run, so a model that holds 8 of the 31
constructors would otherwise pay for all of them (about a sixth of a SqueezeNet search's time).

>>> sorted(constructors('(union (node "n4") (Relu (Concat 1 (node "n0") (node "n2"))))'))
['Concat', 'Relu']
>>> [r.split(':name ')[1] for r in analysis_rules(set(), {"Relu"})]
['"shape_Relu")', '"allw_Relu")']
"""

from __future__ import annotations

import re
from collections.abc import Set
from functools import cache

from .. import ops
from ..ops.egglog_text import MAX_RANK, shape_term
from ..ops.egglog_text import rule as _rule
from ..ops.egglog_text import shape_ctor as _shape_ctor
from .reshape_sym import reshape_sym_rules

__all__ = ["CONSTRUCTORS", "MAX_RANK", "analysis_rules", "constructors", "program", "shape_term", "sym_rule"]

CONSTRUCTORS = ops.CONSTRUCTORS
"""constructor -> (IR op, argument kinds), from the operator table: i = i64 literal, s = String, h = Shape
value, t = tensor, l = list of tensors"""
MARKS = ("Causal", "Finite", "AboveLowest")
"""the relations over single e-classes that the encoder sets (:attr:`eqsat.egglog.codec.Encoding.marks`)"""

_SORT = {"i": "i64", "s": "String", "h": "Shape", "t": "T", "l": "TList"}
_TOKEN = re.compile(r"[()\s]+")


def constructors(text: str) -> set[str]:
    """The tensor constructors that egglog text (a query, an action, a command) names."""
    return {t for t in _TOKEN.split(text) if t in CONSTRUCTORS}


def _allw_rules() -> list[str]:
    rules = []
    for ctor, (op, kinds) in CONSTRUCTORS.items():
        if ops.OPS[op].leaf or "l" in kinds:
            continue
        args = [f"a{i}" for i in range(len(kinds))]
        tensors = [a for a, k in zip(args, kinds) if k == "t"]
        rules.append(_rule(f"allw_{ctor}", [f"(= e ({ctor} {' '.join(args)}))", *[f"(AllW {t})" for t in tensors]],
                           ["(AllW e)"]))
    return rules


def sym_rule(shape_rule: str) -> str:
    """The ``sym`` twin of a shape rule: the same rule over the ``sym`` function.

    >>> sym_rule('(rule ((= e (Relu x)) (= s (shape x))) ((set (shape e) s)) :ruleset analysis :name "shape_Relu")')
    '(rule ((= e (Relu x)) (= s (sym x))) ((set (sym e) s)) :ruleset analysis :name "sym_Relu")'
    """
    return shape_rule.replace("(shape ", "(sym ").replace(':name "shape_', ':name "sym_')


@cache
def _analysis(symbolic: bool = False) -> tuple[tuple[frozenset[str], str], ...]:
    """Every ``analysis`` rule with the constructors it names, in one fixed order: the shape rules in table
    order, then the AllW rules, then (``symbolic``) the shape rules' ``sym`` twins. A rule can match only once
    every constructor it names has rows."""
    shape_rules = ops.shape_rules()
    twins = [sym_rule(r) for r in shape_rules if "(Reshape " not in r] + reshape_sym_rules() if symbolic else []
    return tuple((frozenset(constructors(r)), r) for r in shape_rules + _allw_rules() + twins)


def analysis_rules(have: Set[str], want: Set[str], symbolic: bool = False) -> list[str]:
    """The ``analysis`` rules to register when an e-graph whose rules cover the constructors ``have`` is to
    cover ``want`` too: those naming only constructors of ``have | want`` and not only of ``have``, in the
    fixed order of :func:`_analysis` (a rule naming no constructor is part of :func:`program`)."""
    after = set(have) | set(want)
    return [r for names, r in _analysis(symbolic) if names <= after and not names <= have]


def program(symbolic: bool = False) -> list[str]:
    """The schema as a list of top-level egglog forms (parse them one at a time: parsing is quadratic), without
    the ``analysis`` rules that name a constructor (:func:`analysis_rules`); ``symbolic``: with the ``sym``
    analysis and the commit rule that compares it."""
    shape_ctors = " ".join(f"({_shape_ctor(r)}{' i64' * r})" for r in range(MAX_RANK + 1))
    forms = [
        f"(datatype Shape {shape_ctors} (SN String))",
        "(sort TList)",
        "(sort T)",
        "(constructor TNil () TList)",
        "(constructor TCons (T TList) TList)",
    ]
    for ctor, (_op, kinds) in CONSTRUCTORS.items():
        forms.append(f"(constructor {ctor} ({' '.join(_SORT[k] for k in kinds)}) T)")
    forms += [
        "(function shape (T) Shape :merge old)",
        *(["(function sym (T) Shape :merge old)"] if symbolic else []),
        "(function node (String) T :merge old)",
        "(relation AllW (T))",
        *(f"(relation {mark} (T))" for mark in MARKS),
        "(relation Pend (T T))",
        "(ruleset analysis)",
        "(ruleset commit)",
    ]
    forms += [r for names, r in _analysis(symbolic) if not names]
    same = ["(= s (shape a))", "(= s (shape b))"] + (["(= z (sym a))", "(= z (sym b))"] if symbolic else [])
    forms.append(_rule("commit", ["(Pend a b)", *same], ["(union a b)"], "commit"))
    return forms
