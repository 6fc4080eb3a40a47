"""What keeps a run's phases from holding the weights twice: a model read from a file checked on its skeleton
(the large weights' sizes checked aside, as onnx.checker does), and a model written a tensor at a time; both against
onnx's own loader and checker as oracles."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.errors import InputError
from eqsat.onnx.external import EXTERNAL_THRESHOLD, save_streamed
from eqsat.onnx.reading import load_model


def _model(big: np.ndarray, doc: str = "") -> onnx.ModelProto:
    n = big.shape[0]
    small = np.arange(n, dtype=np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
                          [numpy_helper.from_array(big, "w"), numpy_helper.from_array(small, "b")])
    g.initializer[0].doc_string = doc
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="test")
    m.metadata_props.add(key="k", value="v")
    return m


BIG = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)


def test_a_streamed_model_is_the_message_byte_for_byte(tmp_path):
    m = _model(BIG, doc="a weight")
    path = str(tmp_path / "m.onnx")
    save_streamed(m, path)
    with open(path, "rb") as f:
        assert f.read() == m.SerializeToString()  # the bytes protobuf writes for the whole message
    back = onnx.load(path)
    assert back == m and back.SerializeToString() == m.SerializeToString()
    onnx.checker.check_model(path)
    np.testing.assert_array_equal(numpy_helper.to_array(back.graph.initializer[0]), BIG)


def test_reading_checks_as_the_checker_does_without_a_second_copy(tmp_path):
    assert BIG.nbytes >= EXTERNAL_THRESHOLD  # set aside from the skeleton: its size is checked here, not by onnx
    good = tmp_path / "good.onnx"
    onnx.save(_model(BIG), good)
    assert load_model(str(good)) == onnx.load(good)
    short = _model(BIG)
    short.graph.initializer[0].raw_data = short.graph.initializer[0].raw_data[:-4]
    bad = tmp_path / "bad.onnx"
    onnx.save(short, bad)
    with pytest.raises(Exception) as oracle:  # onnx.checker on the file refuses it
        onnx.checker.check_model(str(bad))
    with pytest.raises(InputError, match="invalid ONNX model: .*tensor name: w.*too small") as ours:
        load_model(str(bad))
    assert " ".join(str(oracle.value).split()) in str(ours.value)
    wrong = _model(BIG)
    wrong.graph.node[0].op_type = "NoSuchOp"  # the skeleton is still checked: an unknown operator is refused
    path = tmp_path / "wrong.onnx"
    onnx.save(wrong, path)
    with pytest.raises(InputError, match="invalid ONNX model: .*NoSuchOp"):
        load_model(str(path))


def test_the_runtime_auto_resolves_without_importing_torch_where_no_gpu_device_exists():
    import os
    import subprocess
    import sys

    from eqsat.measurement.runtimes import GPU_DEVICES

    code = ("import sys; from eqsat.measurement import runtimes; print(runtimes.resolve('auto'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    import torch  # the oracle: torch's own answer

    assert out[0] == ("torch-cuda" if torch.cuda.is_available() else "ort-cpu")
    if not any(os.path.exists(p) for p in GPU_DEVICES):
        assert out[1] == "False"  # torch (180 MiB resident) was never imported to find no GPU
