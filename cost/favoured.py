"""A cost model that favours the runtime's fused kernels: the cost model of one extra candidate.

A kernel (opset 23's ``Attention`` and ``RotaryEmbedding``: the IR's ``sdpa``, ``sdpa_causal`` and ``rope``) is
timed alone, like every operator, and its decomposition's operators alone too; end to end the two can compare
otherwise (the runtime fuses parts of the decomposition, the kernel saves the values in between). Where the
estimate keeps the decomposition by a small margin (a kernel estimated under twice its decomposition's cost), the
program that takes those kernels is one more candidate, extracted under :class:`KernelsFavoured`, and the end-to-end measurement decides (found on a
LLaMA 256 wide whose static program kept the decomposed attention: the kernel measured about 2% faster).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eqsat.ops import FREE_OPS, OPS

from .base import CostModel, OpKey

KERNEL_OPS = frozenset(op for op, d in OPS.items() if d.kernel)
"""the IR's operators written as a runtime kernel of a newer opset (``OpDef.kernel``: ``sdpa``, ``sdpa_causal``,
``rope``)"""

FACTOR = 0.5
"""a kernel's estimate is multiplied by this"""


@dataclass
class KernelsFavoured:
    """``base`` with each :data:`KERNEL_OPS` operator's estimate times ``factor``."""

    base: CostModel
    factor: float = FACTOR
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"{self.base.name}, kernels x{self.factor:g}"

    @property
    def free_ops(self) -> frozenset[str] | set[str]:
        return getattr(self.base, "free_ops", FREE_OPS)

    def op_cost(self, key: OpKey) -> float:
        cost = self.base.op_cost(key)
        return cost * self.factor if key.op in KERNEL_OPS else cost


__all__ = ["FACTOR", "KERNEL_OPS", "KernelsFavoured"]
