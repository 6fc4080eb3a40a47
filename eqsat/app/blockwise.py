"""What a run with repeated blocks (:mod:`eqsat.blocks`) decides beside the phases: the share of the time the
operators outside the blocks get, and what the report says of the blocks and how they were treated."""

from __future__ import annotations

from eqsat.blocks import DEFAULT_MIN_COPIES, DEFAULT_MIN_COVER, Blocks

from .config import OptimizeConfig

REST_SHARE_RANGE = (0.1, 0.5)
"""the least and the most of ``--time-limit`` the operators outside the blocks get (:func:`rest_share`)"""
MIN_TIME_SHARE = 0.25
"""the least share of ``--time-limit`` a run with repeated blocks keeps (:func:`blocks_seconds`)"""


def blocks_seconds(blocks: Blocks, time_limit: float) -> float:
    """The seconds of search plus extraction of a run with repeated blocks: ``time_limit`` (meant for the whole
    model) in proportion to the nodes searched (one copy and the rest) among the model's, at least
    MIN_TIME_SHARE of it: twelve layers searched once take about the time of one layer and the rest."""
    searched = len(blocks.representative.nodes()) + len(blocks.rest.program.nodes())
    return time_limit * min(1.0, max(MIN_TIME_SHARE, searched / len(blocks.graph.nodes())))


def rest_share(blocks: Blocks) -> float:
    """The share of ``--time-limit`` the operators outside the blocks get (:func:`rest_phase`): their part of
    the nodes searched (theirs and one copy's), at least REST_SHARE_RANGE[0] and at most REST_SHARE_RANGE[1]."""
    outside, copy = len(blocks.rest.program.nodes()), len(blocks.representative.nodes())
    low, high = REST_SHARE_RANGE
    return min(high, max(low, outside / (outside + copy)))


def blocks_entry(config: OptimizeConfig, blocks: Blocks | None,
                  rest: dict[str, object] | None) -> dict[str, object] | None:
    """The report's ``blocks``: which repeated blocks were found and how they were treated (None with
    ``--no-blocks``)."""
    if not config.blocks:
        return None
    if blocks is None:
        return {"found": None, "treatment": f"no block with weights of its own repeated {DEFAULT_MIN_COPIES} or "
                                            f"more times over {DEFAULT_MIN_COVER:.0%} of the model: the whole "
                                            f"model was searched"}
    outside = (f"the {blocks.rest.operators} operators outside the blocks searched and extracted as a program of "
               f"their own (the copies' outputs as inputs)" if rest is not None else "nothing outside the blocks")
    return {"found": blocks.describe(), "rest": rest,
            "treatment": f"the first of {blocks.copies} copies searched and extracted alone (its cut and external "
                         f"inputs as inputs, its weights as leaves); each candidate program replayed on every "
                         f"copy with the copy's own weights and the whole program verified; {outside}; search and "
                         f"extraction within {config.search.time_limit:.1f} s (--time-limit less the import, in "
                         f"proportion to the nodes searched); no rewrite crosses a block's boundary (--no-blocks: the whole-model "
                         f"search)"}


__all__ = ["MIN_TIME_SHARE", "REST_SHARE_RANGE", "blocks_entry", "blocks_seconds", "rest_share"]
