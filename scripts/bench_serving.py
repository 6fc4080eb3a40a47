#!/usr/bin/env python3
"""Serving forms timed as a server runs them (issue 42): decoding with a key/value cache, and (``--padded-batch``)
an encoder's padded batch. A decode step's programs (the original,
eqsat's and the peers', as ``scripts/bench_peers.py --optimize-only`` stores them in a workdir) each run a
generation of ``--tokens`` tokens, one step a token, the present outputs of each step fed back as the next step's
past, the attention mask one longer each step; the generation is timed whole, interleaved with the others and with
an unchanged copy of the original (the A/A control), by ``peers_timing.time_all``'s protocol (rounds sized until the
widest 95% interval is ``--resolution`` wide, within ``--time-budget`` seconds a model). The figure is the per-token
speedup, original / program, with its interval.

Before it is timed, each program's generation is checked against the original's on the same tokens and the same
initial cache (every output of every step: present outputs carry an error forward, so a program that drifts fails);
one that does not match is reported and not timed.

A decode step is a model whose inputs are token ids [batch, 1], an attention mask [batch, past + 1] and the cache
([batch, heads, past, head_dim] each), and whose first output is the hidden state and the rest the present cache in
the past's order (the zoo's ``SERVING`` models: ``tests/zoo``).

    python scripts/bench_peers.py --optimize-only --workdir runs/serve --models llama_decode_w384 \\
        --exporters dynamo   # or --onnx decode.onnx
    python scripts/bench_serving.py --workdir runs/serve --tokens 32 --json results/serving.json

With ``--padded-batch B`` the workdir's encoders (token ids and an attention mask, dynamic batch and sequence:
``bench_peers.py --dynamic``) run one padded batch of ``B`` rows of ``--seq`` tokens, the first row full and the others
of seeded random lengths padded on the right; each program's outputs on it (padded positions included) are checked
against the original's, and the batch is timed the same way. The figure is the throughput's speedup.

    python scripts/bench_peers.py --optimize-only --workdir runs/padded --models bert_w384 --dynamic \
        --eqsat-input-shape input_ids=8,128 --eqsat-input-shape attention_mask=8,128
    python scripts/bench_serving.py --workdir runs/padded --padded-batch 8 --json results/padded.json
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "scripts")):
    if path not in sys.path:
        sys.path.insert(0, path)

import peers_workdir as wd  # noqa: E402
from peers_timing import CONTROL, Budget, time_all  # noqa: E402

from eqsat.measurement import timing  # noqa: E402
from eqsat.onnx import session  # noqa: E402


@dataclass(frozen=True)
class DecodeStep:
    """How a decode step's inputs and outputs are fed back: the ids, the mask, the cache inputs in order and the
    positions of the present outputs that feed them."""

    ids: str
    mask: str
    cache: tuple[str, ...]
    present: tuple[int, ...]
    cache_shape: tuple[int, ...]
    """one cache input's shape at the past length asked for (batch 1)"""
    axis: int
    """the cache's past axis"""
    vocab: int


def decode_step(model: onnx.ModelProto, past: int) -> DecodeStep:
    """The model's decode-step interface (see the module's docstring); ValueError naming what is missing."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    ints = [vi for vi in inputs if vi.type.tensor_type.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)]
    floats = [vi for vi in inputs if vi not in ints]
    if len(ints) != 2 or not floats or len(model.graph.output) != len(floats) + 1:
        raise ValueError("not a decode step: ids and a mask, a cache in, the hidden state and the cache out")
    ids, mask = ints
    dims = [d for d in floats[0].type.tensor_type.shape.dim]
    axis = next((k for k, d in enumerate(dims) if d.dim_param and not d.dim_param.startswith("batch")), None)
    if axis is None:
        raise ValueError(f"the cache input {floats[0].name!r} has no dynamic past axis")
    shape = tuple(1 if k == 0 else past if k == axis else int(d.dim_value) for k, d in enumerate(dims))
    vocab = next((int(t.dims[0]) for t in model.graph.initializer if len(t.dims) == 2 and
                  any(n.op_type == "Gather" and n.input[0] == t.name and n.input[1] == ids.name
                      for n in model.graph.node)), 100)
    return DecodeStep(ids.name, mask.name, tuple(f.name for f in floats), tuple(range(1, len(floats) + 1)),
                      shape, axis, vocab)


def generation(sess: ort.InferenceSession, step: DecodeStep, tokens: np.ndarray,
               cache: list[np.ndarray]) -> Callable[[], list[np.ndarray]]:
    """One call: a generation of ``tokens`` from the initial ``cache``, each step's present fed back; returns the
    last step's outputs."""
    def run() -> list[np.ndarray]:
        past = cache
        out: list[np.ndarray] = []
        for token in tokens:
            length = past[0].shape[step.axis] + 1
            feeds = {step.ids: token.reshape(1, 1), step.mask: np.ones((1, length), np.int64),
                     **dict(zip(step.cache, past))}
            out = sess.run(None, feeds)
            past = [out[k] for k in step.present]
        return out

    return run


def _agree(out_a: list[np.ndarray], out_b: list[np.ndarray]) -> tuple[bool, float]:
    """Whether two runs' outputs agree (shapes, where each is finite, rtol 1e-3, atol 1e-4, NaN equal), and the
    largest absolute difference."""
    worst, ok = 0.0, True
    for x, y in zip(out_a, out_b):
        if x.shape != y.shape or not np.all(np.isfinite(x) == np.isfinite(y)):
            return False, float("inf")
        finite = np.isfinite(x)
        worst = max(worst, float(np.max(np.abs(x[finite] - y[finite]), initial=0.0)))
        ok = ok and bool(np.allclose(x, y, rtol=1e-3, atol=1e-4, equal_nan=True))
    return ok, worst


def check(original: onnx.ModelProto, program: onnx.ModelProto, step: DecodeStep, tokens: np.ndarray,
          cache: list[np.ndarray]) -> tuple[bool, float]:
    """Whether the program's generation matches the original's (every output of every step: :func:`_agree`), and
    the largest absolute difference."""
    a, b = session(original), session(program)
    worst, ok = 0.0, True
    past_a, past_b = cache, cache
    for token in tokens:
        length = past_a[0].shape[step.axis] + 1
        common = {step.ids: token.reshape(1, 1), step.mask: np.ones((1, length), np.int64)}
        out_a = a.run(None, {**common, **dict(zip(step.cache, past_a))})
        out_b = b.run(None, {**common, **dict(zip(step.cache, past_b))})
        agree, diff = _agree(out_a, out_b)
        ok, worst = ok and agree, max(worst, diff)
        if diff == float("inf"):
            return False, diff
        past_a, past_b = [out_a[k] for k in step.present], [out_b[k] for k in step.present]
    return ok, worst


def padded_batch(model: onnx.ModelProto, batch: int, seq: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """An encoder's feeds for a padded batch as an embedding server sends it: ``batch`` rows of ``seq`` tokens, the
    first row full, the others of random lengths (at least a quarter of ``seq``), padded on the right (id 0, mask
    0); any other integer input (token types) zeros. ValueError where the model takes no ids and mask."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    ints = [vi for vi in inputs if vi.type.tensor_type.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)]
    masks = [vi for vi in ints if "mask" in vi.name]
    rows = {n.input[1]: int(t.dims[0]) for n in model.graph.node if n.op_type == "Gather"
            for t in model.graph.initializer if t.name == n.input[0] and t.dims}
    ids = sorted((vi for vi in ints if vi not in masks and vi.name in rows), key=lambda vi: -rows[vi.name])[:1]
    dynamic = all(d.dim_param or not d.dim_value for vi in ints for d in vi.type.tensor_type.shape.dim[:2])
    if len(masks) != 1 or not ids or len(ints) != len(inputs) or not dynamic:
        raise ValueError("not an encoder of token ids and an attention mask with dynamic batch and sequence "
                         "(bench_peers.py --dynamic exports it so)")
    vocab = rows[ids[0].name]  # the largest table a token input indexes: the embedding (token types index another)
    lengths = [seq, *rng.integers(max(seq // 4, 1), seq + 1, batch - 1)]
    mask = (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    kind = {vi.name: np.int32 if vi.type.tensor_type.elem_type == onnx.TensorProto.INT32 else np.int64 for vi in ints}
    out = {vi.name: np.zeros((batch, seq), kind[vi.name]) for vi in ints}
    out[ids[0].name] = (rng.integers(1, vocab, (batch, seq)) * mask).astype(kind[ids[0].name])
    out[masks[0].name] = mask.astype(kind[masks[0].name])
    return out


def _verified(entry: dict[str, Any], args: argparse.Namespace, check_one: Callable[[onnx.ModelProto],
              tuple[bool, float]], what: str, wrong: str) -> tuple[dict[str, dict[str, Any]], dict[str, onnx.ModelProto]]:
    """Per tool of the workdir's entry its status and the serving check's verdict (``check_one``: ``{what}_matches``,
    ``{what}_max_abs_error``; status ``wrong`` where it fails), and the programs that passed."""
    tools: dict[str, dict[str, Any]] = {}
    programs: dict[str, onnx.ModelProto] = {}
    for name, t in entry["tools"].items():
        if args.tools and name not in args.tools:
            continue
        tools[name] = {"status": t["status"]}
        if t["status"] != "verified":
            continue
        program = wd.load_model(args.workdir, t["program"])
        try:
            ok, worst = check_one(program)
        except Exception as exc:  # noqa: BLE001 - onnxruntime refuses the program on these inputs: no match
            print(f"   {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
            ok, worst = False, float("inf")
        tools[name].update({f"{what}_matches": ok, f"{what}_max_abs_error": worst})
        if ok:
            programs[name] = program
        else:
            tools[name]["status"] = wrong
    tools[CONTROL] = {"status": "control"}
    return tools, programs


def _timed(original: onnx.ModelProto, programs: dict[str, onnx.ModelProto], tools: dict[str, dict[str, Any]],
           args: argparse.Namespace, call: Callable[[ort.InferenceSession], Callable[[], Any]], per: int,
           unit: str) -> None:
    """Every program timed beside the control at each thread count (``call``: one timed call), into ``tools``;
    ``per``: the tokens (or rows) a call serves, for the per-``unit`` figures."""
    budget = Budget(resolution=args.resolution, budget_s=args.time_budget, seed=args.seed)
    for threads in args.threads:
        for name, r in time_all(original, programs, threads, budget, call=call).items():
            r = {**r, f"original_ms_per_{unit}": r["original_ms"] / per, f"program_ms_per_{unit}": r["program_ms"] / per}
            print(f"   {threads}t {name:17} {r['speedup']:.3f}x [{r['ci_low']:.3f}, {r['ci_high']:.3f}]  "
                  f"{r[f'program_ms_per_{unit}']:.3f} ms/{unit} (original {r[f'original_ms_per_{unit}']:.3f})  "
                  f"{r['rounds']} rounds", flush=True)
            tools[name].setdefault("timed", {})[str(threads)] = r


def time_model(label: str, entry: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """A decode step's generation, or with ``--padded-batch`` an encoder's padded batch, timed: its row."""
    if args.padded_batch:
        return time_padded(label, entry, args)
    original = wd.load_model(args.workdir, entry["original"])
    step = decode_step(original, args.past)
    rng = np.random.default_rng(args.seed)
    tokens = rng.integers(0, step.vocab, args.tokens).astype(np.int64)
    cache = [rng.standard_normal(step.cache_shape).astype(np.float32) for _ in step.cache]
    tools, programs = _verified(entry, args, lambda program: check(original, program, step,
                                                                   tokens[:args.check_tokens], cache),
                                "generation", "wrong over a generation")
    print(f"== {label}: a generation of {args.tokens} tokens from a past of {args.past}, timing "
          f"{', '.join(programs) or 'no program'}", flush=True)
    _timed(original, programs, tools, args, lambda sess: generation(sess, step, tokens, cache), args.tokens, "token")
    return {"model": label, "past": args.past, "tokens": args.tokens, "tools": tools}


def time_padded(label: str, entry: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """An encoder's padded batch (:func:`padded_batch`) checked against the original and timed: its row."""
    original = wd.load_model(args.workdir, entry["original"])
    feeds = padded_batch(original, args.padded_batch, args.seq, np.random.default_rng(args.seed))
    reference = session(original).run(None, feeds)
    tools, programs = _verified(entry, args, lambda program: _agree(reference, session(program).run(None, feeds)),
                                "batch", "wrong on a padded batch")
    lengths = feeds[next(n for n in feeds if "mask" in n)].sum(axis=1).tolist()
    print(f"== {label}: a padded batch of {args.padded_batch} x {args.seq} (lengths {lengths}), timing "
          f"{', '.join(programs) or 'no program'}", flush=True)
    _timed(original, programs, tools, args, lambda sess: functools.partial(sess.run, None, feeds),
           args.padded_batch, "row")
    return {"model": label, "batch": args.padded_batch, "seq": args.seq, "lengths": lengths, "tools": tools}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True, help="a workdir of scripts/bench_peers.py --optimize-only")
    p.add_argument("--models", default=None, help="comma-separated labels of the workdir (default: every decode "
                                                   "step in it; with --padded-batch every encoder)")
    p.add_argument("--tools", default=None, help="comma-separated tools to time (default: all in the workdir)")
    p.add_argument("--tokens", type=int, default=32, help="tokens a timed generation decodes")
    p.add_argument("--check-tokens", type=int, default=8, help="tokens of the generation each program is checked on")
    p.add_argument("--past", type=int, default=127, help="the cache's length before the first token")
    p.add_argument("--padded-batch", type=int, default=0, metavar="B",
                   help="time encoders (token ids and an attention mask) on a padded batch of B rows instead of "
                        "decode steps: the throughput an embedding server sees")
    p.add_argument("--seq", type=int, default=128, help="--padded-batch: the batch's padded length")
    p.add_argument("--threads", default="1", help="comma-separated onnxruntime intra-op thread counts")
    p.add_argument("--resolution", type=float, default=0.01, help="the widest 95%% interval wanted")
    p.add_argument("--time-budget", type=float, default=60.0, help="seconds of timed rounds per model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if args.tokens < 1 or args.past < 0 or args.check_tokens < 1 or args.padded_batch < 0 or args.seq < 1:
        p.error("--tokens, --check-tokens and --seq must be at least 1, --past and --padded-batch at least 0")
    args.threads = [int(t) for t in args.threads.split(",")]
    args.tools = args.tools.split(",") if args.tools else None
    if not os.path.exists(os.path.join(args.workdir, "manifest.json")):
        p.error(f"{args.workdir} holds no manifest.json: run scripts/bench_peers.py --optimize-only there first")
    manifest = wd.load_manifest(args.workdir)
    labels = args.models.split(",") if args.models else list(manifest["models"])
    rows = []
    start = time.perf_counter()
    for label in labels:
        entry = manifest["models"].get(label)
        if entry is None or "error" in entry:
            rows.append({"model": label, "error": "not in the workdir" if entry is None else entry["error"]})
            continue
        try:
            rows.append(time_model(label, entry, args))
        except ValueError as exc:  # not a decode step (not an encoder)
            print(f"== {label}: left out ({exc})", flush=True)
            rows.append({"model": label, "error": str(exc)})
    doc = {"script": "bench_serving", "argv": sys.argv[1:] if argv is None else argv, "seed": args.seed,
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "load_average": os.getloadavg()},
           "runtime": timing.runtime_info(args.threads[0]), "seconds": time.perf_counter() - start, "rows": rows}
    if args.json:
        wd.write_json(args.json, doc)
    return 0 if rows and all("tools" in r for r in rows if r.get("error") is None) else 1


if __name__ == "__main__":
    sys.exit(main())
