"""The progress lines a run prints on stderr: one as an ONNX model's import begins (a large model's import runs it at
several sizes for a minute or more; before, the first line came after it), naming its nodes, then the import's."""

from __future__ import annotations

import onnx
from onnx import helper
from onnx_builders import windowed_rows

from eqsat.app.cli import main


def test_the_import_says_it_begins_before_it_ends(tmp_path, capsys):
    model = windowed_rows(2, [helper.make_node("Conv", ["x", "k"], ["w"], kernel_shape=[2], strides=[2])])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--scheduler", "none", "--cost",
                 "analytic", "--no-measure"]) == 0
    lines = capsys.readouterr().err.splitlines()
    begins = next(k for k, line in enumerate(lines) if f"importing {len(model.graph.node)} ONNX nodes" in line)
    ends = next(k for k, line in enumerate(lines) if "imported:" in line)
    assert begins < ends, lines
