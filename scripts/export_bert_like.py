#!/usr/bin/env python3
"""Export a real torch BERT-like encoder (Q/K/V with biases, softmax attention, layer norms, GELU
feed-forward; the module the tests use) to ONNX, to try ``eqsat optimize-model`` on a model that did not
come from our own builders.

    python scripts/export_bert_like.py -o bert_like.onnx [--layers 4] [--d 256] [--seq 64] [--seed 0]
    eqsat optimize-model bert_like.onnx -o bert_like_opt.onnx --report bert_like.json
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import torch_modules as tm  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    model = tm.seeded(tm.BertLike, layers=args.layers, d=args.d, heads=max(1, args.d // 64), ff=4 * args.d, seed=args.seed)
    torch.manual_seed(args.seed)
    torch.onnx.export(model, (torch.randn(1, args.seq, args.d),), args.output, input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    print(f"wrote {args.output}: {args.layers} encoder layers, d={args.d}, MLP {4 * args.d}, sequence {args.seq}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
