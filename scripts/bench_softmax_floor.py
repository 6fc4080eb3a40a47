"""A Softmax in onnxruntime, as written and floored (eqsat.onnx.softmax_floor), on scores unmasked and masked.

onnxruntime's CPU Softmax makes subnormal floats of scores far below their row's maximum (a mask's fill), which the
processor computes slowly; the floored form never makes one. Times both models in one process, interleaved, one
thread, on the same seeded scores: unmasked, a causal mask of the lowest float (transformers' decoders), of -inf,
of -10000 (BERT's padding), and a padded batch (the last 40% of keys masked). Prints microseconds a call (the
median of ``--rounds`` rounds of ``--calls`` calls each) and the ratio with a 95% bootstrap interval; ``--json``
writes the same.

    python scripts/bench_softmax_floor.py [--shape 1,6,128,128] [--rounds 30] [--calls 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from eqsat.onnx.softmax_floor import floored


def softmax_model(shape: list[int]):
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "softmax",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def scores(shape: list[int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(shape).astype(np.float32)
    q, k = shape[-2], shape[-1]
    causal = np.tril(np.ones((q, k), bool))
    padded = np.arange(k) < int(0.6 * k)
    return {"unmasked": base,
            "causal, lowest float": np.where(causal, base, np.finfo(np.float32).min).astype(np.float32),
            "causal, -inf": np.where(causal, base, -np.inf).astype(np.float32),
            "causal, -10000": np.where(causal, base, -1e4).astype(np.float32),
            "padded 40%, -10000": np.where(padded, base, -1e4).astype(np.float32)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1,6,128,128")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    shape = [int(d) for d in args.shape.split(",")]
    plain = softmax_model(shape)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sessions = {name: ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
                for name, m in (("written", plain), ("floored", floored(plain, ["y"])))}
    rng = np.random.default_rng(args.seed)
    rows = []
    print(f"Softmax {shape}, 1 thread, {args.rounds} rounds of {args.calls} calls, interleaved")
    print(f"{'scores':<22} {'written us':>11} {'floored us':>11} {'speedup [95% CI]':>24}")
    for label, x in scores(shape, args.seed).items():
        per: dict[str, list[float]] = {n: [] for n in sessions}
        for s in sessions.values():
            s.run(None, {"x": x})
        for r in range(args.rounds):
            order = list(sessions.items()) if r % 2 == 0 else list(sessions.items())[::-1]
            for name, s in order:
                start = time.perf_counter()
                for _ in range(args.calls):
                    s.run(None, {"x": x})
                per[name].append((time.perf_counter() - start) / args.calls * 1e6)
        a, b = np.array(per["written"]), np.array(per["floored"])
        ratios = np.log(a / b)
        boots = [np.median(rng.choice(ratios, ratios.size)) for _ in range(2000)]
        lo, hi = np.exp(np.percentile(boots, [2.5, 97.5]))
        row = {"scores": label, "written_us": float(np.median(a)), "floored_us": float(np.median(b)),
               "speedup": float(np.exp(np.median(ratios))), "ci_low": float(lo), "ci_high": float(hi)}
        rows.append(row)
        print(f"{label:<22} {row['written_us']:>11.1f} {row['floored_us']:>11.1f} "
              f"{row['speedup']:>8.3f} [{lo:.3f}, {hi:.3f}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape, "rounds": args.rounds, "calls": args.calls, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
