"""Root statistics of a search tree after planning a real decision, and their merge across root-parallel trees
(what a tree reports to ``parallel.Forest``, which both the trees and the forest speak)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ChildStats:
    """A root child's statistics, as trees report them for the merge."""

    visits: int
    value: float
    reward: float
    enodes: int
    saturated: bool
    refused: bool


@dataclass
class RootStats:
    """One tree's (or the merged trees') root after planning a real decision."""

    planned: int
    """simulations run"""
    gained: bool
    """some simulation found a cost decrease"""
    open_actions: bool
    """planning was cut short with root actions untried"""
    children: dict[str, ChildStats]

    @staticmethod
    def merge(parts: list[RootStats]) -> RootStats:
        """Visits and values summed per action; an action saturated (or refused) in one tree is so in all (the
        e-graph is the same in every tree); rewards and sizes are the same function of the state everywhere."""
        children: dict[str, ChildStats] = {}
        for part in parts:
            for action, c in part.children.items():
                m = children.get(action)
                if m is None:
                    children[action] = ChildStats(c.visits, c.value, c.reward, c.enodes, c.saturated, c.refused)
                    continue
                m.visits += c.visits
                m.value += c.value
                m.saturated |= c.saturated
                m.refused |= c.refused
                if not m.enodes:
                    m.reward, m.enodes = c.reward, c.enodes
        return RootStats(sum(p.planned for p in parts), any(p.gained for p in parts),
                         any(p.open_actions for p in parts), children)
