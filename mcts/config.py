"""The search's configuration: :class:`SearchConfig`, its node-limit defaults, and the ``option()`` field
machinery its fields (and ``eqsat.app.config``'s) are declared with."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

DEFAULT_NODE_LIMIT = 2000
"""the least e-node limit a search gets by default"""
NODE_LIMIT_FACTOR = 4
"""by default a search may grow the e-graph to this many times its initial e-nodes"""
MAIN_EXTRACTOR_SECONDS = 10.0
"""the time limit of each pricing by a main extractor that takes one (``--main-extractor ilp``): a search prices
hundreds of states, so one may not take the final extraction's ``--ilp-time-limit``; past it SCIP returns its best
program so far, never dearer than its greedy-dag warm start"""
WORKERS_CAP = 64
"""the most ``--workers`` accepted (more is exit 2): each worker is a process of its own"""
WORKER_MB = 130
"""about what one root-parallel worker process holds (its interpreter, egglog and the e-graph replica of a small
model): ``eqsat.app.config.bounded_workers`` runs no more workers than half the available memory holds"""


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``os.sched_getaffinity``: a container's or
    ``taskset``'s share) where the platform has one, else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _workers_cap() -> str:
    cores = usable_cores()
    return (f"each worker is a process of its own holding about {WORKER_MB} MB; a run takes at most the usable "
            f"cores, {cores} here: --workers {cores} uses them all")


def option(default: Any, doc: str, flag: str | None = None, *, least: int | None = None, most: int | None = None,
           most_hint: Callable[[], str] | None = None, seconds: bool = False, share: bool = False,
           choices: str | None = None) -> Any:
    """A config field with its documentation and the checks the CLI and the API apply to it (see
    ``eqsat.app.config``): ``flag`` names it on the command line (None: API only), ``least`` is an
    integer's minimum, ``most`` its maximum (``most_hint``: what the refusal adds), ``seconds`` asks for a
    finite number > 0, ``share`` for a number in (0, 1], ``choices`` names the registry of its values."""
    return field(default=default, metadata={"doc": doc, "flag": flag, "least": least, "most": most,
                                            "most_hint": most_hint, "seconds": seconds, "share": share,
                                            "choices": choices})


@dataclass
class SearchConfig:
    """Options of the schedulers (defaults are the paper's, SPEC section 6)."""

    budget: int = option(128, "MCTS simulations per real decision", "--budget", least=1)
    depth: int = option(10, "MCTS random rollout steps after expansion (the paper's max_sim_step; rollouts take "
                            "depth + 1 steps)", "--depth", least=0)
    node_limit: int | None = option(None, f"e-node limit of the search; None: max({DEFAULT_NODE_LIMIT}, "
                                          f"{NODE_LIMIT_FACTOR} x the initial e-graph's e-nodes)", "--node-limit",
                                    least=1)
    seed: int = option(0, "seed of every random choice (search, verification inputs, timing order)", "--seed",
                       least=0)
    time_limit: float = option(45.0, "seconds of import, search and extraction (the import counts up to half of it; "
                                     "the search leaves a fifth, at most "
                                     "--ilp-time-limit, to the final ILP); the default keeps a run of a zoo model, "
                                     "measurement included, within a minute on 2 cores",
                               "--time-limit", seconds=True)
    main_extractor: str = option("greedy-dag", "extractor that prices the states of the search", "--main-extractor",
                                 choices="extractors")
    k_multi: int = option(1, "TENSAT: iterations in which multi-pattern rules run (a built-in model's default "
                             "comes from eqsat.models.MODELS)", "--k-multi", least=0)
    rule_set: str = option("default", "rule-set variant (nasrnn: NASRNN's multi-pattern rules; a built-in "
                                      "model's default comes from eqsat.models.MODELS)", "--rule-set",
                           choices="rule_sets")
    portable: bool = option(False, "keep to the standard operators of the model's own opset: no rule that writes a "
                                   "runtime kernel of a newer opset (opset 23's Attention and RotaryEmbedding; "
                                   "eqsat.rules.KERNEL_RULES)",
                            "--portable")
    gamma: float = option(0.99, "MCTS discount of rewards per step")
    exploration: float = option(2.0, "UCB1 constant c in Q/n + c sqrt(2 ln N / n)")
    stop_probability: float = option(0.5, "the 50% rule: below the root, expand an untried action only with this "
                                          "probability")
    prior_explore: float = option(1.0, "MCTS rollouts draw a step uniformly from every rule with this probability, "
                                       "else from the rules seen to match or change the e-graph in this search")
    no_gain_steps: int = option(8, "MCTS stops (stop reason no_gain) when no simulation found a cost decrease in "
                                   "this many consecutive real decisions that spent their budget; 0: never",
                                "--no-gain-steps", least=0)
    no_gain_short: int = option(4, "MCTS also stops (no_gain) when no simulation found a cost decrease in this many "
                                   "consecutive real decisions that their share of the time cut short (a model whose "
                                   "simulations take seconds: in 41 runs of 26 models at width 384, no decision after "
                                   "the third of the tree search found a gain, and a Swin spent 20 s on seven that "
                                   "found none); 0: never", least=0)
    workers: int = option(1, "MCTS root-parallel trees (this process and N - 1 worker processes of about "
                             f"{WORKER_MB} MB each), merged before every real decision; at most {WORKERS_CAP} (more "
                             "is refused); an optimize run takes at most the usable cores and what half the "
                             "available memory holds (more runs that many, with a warning); the workers start "
                             "within --time-limit (a tree not ready when a decision is taken is left out of it)",
                          "--workers", least=1, most=WORKERS_CAP, most_hint=_workers_cap)
    plan_share: float = option(0.25, "MCTS plans a real decision with at most its budget of simulations and at most "
                                     "this share of the tree search's time left, so that a short time limit still "
                                     "takes several decisions (planning that has found no step yet goes on to the "
                                     "search's own deadline)", share=True)
    max_iterations: int = option(200, "at most this many real steps (TENSAT: iterations)", least=1)
    reuse_subtree: bool = option(False, "MCTS keeps the chosen child's subtree for the next decision")
    prelude: bool = option(True, "MCTS starts by saturating our rules (eqsat.rules.ours: canonicalizing, fusing, the "
                                 "known-good merges, the runtime's spellings), deterministic and cheap, first and "
                                 "within the whole --time-limit if it needs it, so that a short time limit already "
                                 "returns their program; the tree search then adds what only search finds in the "
                                 "time left", "--no-prelude")
    finish: bool = option(True, "MCTS ends with TENSAT's iterations of the single-pattern rules (no multi-pattern "
                                "rule) until they saturate, in what is left of --time-limit (at least a tenth)",
                          "--no-finish")

    def resolved(self, initial_enodes: int) -> SearchConfig:
        """This config with its node limit fixed: the one given, else max(2000, 4 x ``initial_enodes``)."""
        if self.node_limit is not None:
            return self
        return replace(self, node_limit=max(DEFAULT_NODE_LIMIT, NODE_LIMIT_FACTOR * initial_enodes))

    @property
    def limit(self) -> int:
        """The node limit of a resolved config (see :meth:`resolved`)."""
        if self.node_limit is None:
            raise ValueError("the node limit is not resolved yet; call SearchConfig.resolved(initial_enodes)")
        return self.node_limit
