"""eqsat's torch executor (:class:`eqsat.measurement.torch_run.TorchProgram`) run on numpy inputs, for the tests
that compare what it computes with onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from eqsat.measurement.torch_run import TorchProgram


def torch_outputs(program: TorchProgram, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``program``'s outputs for numpy ``feeds`` (by input name), as numpy arrays."""
    with program.torch.no_grad():
        outs = program.forward(*program.tensors(feeds))
    return [o.detach().cpu().numpy() for o in outs]
