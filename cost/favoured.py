"""A cost model that favours the runtime's fused kernels: the cost model of one extra candidate.

A kernel (opset 23's ``Attention`` and ``RotaryEmbedding``: the IR's ``sdpa``, ``sdpa_nz``, ``sdpa_causal`` and ``rope``) is
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
"""the IR's operators written as a runtime kernel of a newer opset (``OpDef.kernel``: ``sdpa``, ``sdpa_nz``, ``sdpa_causal``,
``rope``)"""

FACTOR = 0.5
"""a kernel's estimate is multiplied by this"""

ATTENTION_KERNELS = frozenset(op for op, d in OPS.items() if d.kernel and d.kernel.startswith("Attention"))
"""the IR's operators written as the runtime's attention kernel (``sdpa``, ``sdpa_nz``, ``sdpa_causal``)"""

AVOIDED = 1000.0
"""an avoided kernel's estimate is multiplied by this: the program computes that attention as its decomposition
(a Softmax) wherever the e-graph holds one (the candidate whose masked scores :mod:`eqsat.onnx.softmax_floor` floors;
onnxruntime's kernel computes the masked scores inside, where no floor reaches them)"""


@dataclass
class KernelsFavoured:
    """``base`` with the estimate of each of ``ops`` (by default every :data:`KERNEL_OPS` operator) times
    ``factor``: below 1 the kernels favoured, above 1 avoided."""

    base: CostModel
    factor: float = FACTOR
    ops: frozenset[str] = KERNEL_OPS
    name: str = field(init=False)

    def __post_init__(self) -> None:
        what = "kernels" if self.ops == KERNEL_OPS else "+".join(sorted(self.ops))
        self.name = f"{self.base.name}, {what} x{self.factor:g}"

    @property
    def free_ops(self) -> frozenset[str] | set[str]:
        return getattr(self.base, "free_ops", FREE_OPS)

    def op_cost(self, key: OpKey) -> float:
        cost = self.base.op_cost(key)
        return cost * self.factor if key.op in self.ops else cost


__all__ = ["ATTENTION_KERNELS", "AVOIDED", "FACTOR", "KERNEL_OPS", "KernelsFavoured"]
