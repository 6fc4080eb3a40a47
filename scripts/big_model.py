#!/usr/bin/env python3
"""A model over 2 GiB through ``eqsat optimize-model`` (issue 27 point 5): builds ``x -> MatMul W1 -> Transpose ->
Transpose -> Relu -> MatMul W2 -> y`` (the search removes the two Transposes) whose weights (two N x N float32 matrices) are written straight into an external data file
(never held whole in memory), runs the command line on it in a child process, and prints the child's wall time
and peak resident memory, the written layout (the model, its data file beside it) and the largest difference
between onnxruntime's outputs of the written model and of the original.

    flock /tmp/eqsat-big.lock python scripts/big_model.py --gib 2.2 --dir /tmp/big   # a few minutes, ~10 GiB

Extra arguments after ``--`` go to ``eqsat optimize-model`` (default: ``--cost analytic --no-measure
--time-limit 10``: the search, unmeasured).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

CHUNK_ROWS = 1024


def write_weight(f, name: str, n: int, seed: int) -> TensorProto:
    """An N x N float32 weight appended to the open data file ``f`` in row chunks; its external TensorProto."""
    offset = f.tell()
    rng = np.random.default_rng(seed)
    for start in range(0, n, CHUNK_ROWS):
        rows = min(CHUNK_ROWS, n - start)
        f.write((rng.standard_normal((rows, n), dtype=np.float32) / math.sqrt(n)).tobytes())
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[n, n])
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "big.onnx.data"), ("offset", str(offset)), ("length", str(n * n * 4))):
        t.external_data.add(key=key, value=value)
    return t


def build(folder: str, gib: float) -> str:
    """``folder/big.onnx`` and ``folder/big.onnx.data``, two matrices of ``gib`` GiB together; the model's path."""
    n = int(math.sqrt(gib * 2**30 / 8))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "big.onnx.data"), "wb") as f:
        weights = [write_weight(f, f"w{i}", n, i) for i in (1, 2)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Transpose", ["h"], ["t"], perm=[1, 0]),
             helper.make_node("Transpose", ["t"], ["tt"], perm=[1, 0]), helper.make_node("Relu", ["tt"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], weights)
    path = os.path.join(folder, "big.onnx")
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def largest_difference(original: str, written: str) -> float:
    """max |y_written - y_original| on one seeded input, each model run by onnxruntime from its path."""
    import onnxruntime as ort

    outputs = []
    for path in (original, written):
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        shape = [d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape]
        x = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
        outputs.append(sess.run(None, {sess.get_inputs()[0].name: x})[0])
        del sess
    return float(np.max(np.abs(outputs[0] - outputs[1])))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=2.2, help="the weights' total size in GiB (default 2.2)")
    p.add_argument("--dir", default="/tmp/eqsat-big", help="where the model and the output are written")
    p.add_argument("rest", nargs="*", help="arguments for eqsat optimize-model (after --)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    model = build(args.dir, args.gib)
    built = time.perf_counter() - t0
    out, report = os.path.join(args.dir, "out.onnx"), os.path.join(args.dir, "out.json")
    flags = args.rest or ["--cost", "analytic", "--no-measure", "--time-limit", "10"]
    t0 = time.perf_counter()
    rc = subprocess.call([sys.executable, "-m", "eqsat", "optimize-model", model, "-o", out, "--report", report,
                          "-q", *flags])
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB -> GiB
    record = {"gib": args.gib, "data_bytes": os.path.getsize(model + ".data"), "build_s": round(built, 1),
              "exit": rc, "wall_s": round(wall, 1), "peak_rss_gib": round(peak, 2)}
    if rc == 0:
        record["written"] = sorted(f for f in os.listdir(args.dir) if f.startswith("out."))
        record["out_data_bytes"] = os.path.getsize(out + ".data") if os.path.exists(out + ".data") else None
        with open(report) as f:
            written = json.load(f)
        record |= {k: written.get(k) for k in ("returned", "operators", "external_data", "times", "memory_mb")}
        record["max_abs_difference"] = largest_difference(model, out)
    print(json.dumps(record, indent=2))
    return rc


if __name__ == "__main__":
    sys.exit(main())
