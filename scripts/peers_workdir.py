"""The workdir of scripts/bench_peers.py: what the optimize phase writes and the timing phase reads.

    DIR/manifest.json                  what was optimized: per model its original, per tool its entry
    DIR/MODEL/EXPORTER/original.onnx   the model as exported (every tool started from it)
    DIR/MODEL/EXPORTER/TOOL.onnx       each tool's program (wrong and invalid ones too, for a look; never timed)
    DIR/MODEL/EXPORTER/eqsat.report.json   eqsat's whole report

A model's directory is its label (``bert/dynamo``; an ``--onnx`` file's name without ``.onnx``). A tool's entry:
its status (verified, wrong, invalid, failed, unavailable) and reason, the wall seconds it took, the verification's
worst errors, the ONNX operators it added and removed, the program's file (relative to DIR), the tool's version;
eqsat's also its own measured ratio, decision, kernels and operator changes, and its report's file. The manifest is
rewritten (atomically) after every tool, so that an interrupted run keeps what it finished; a later optimize run
into the same DIR starts from the stored originals and replaces only the entries of the tools it runs.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from typing import Any

import onnx

MANIFEST = "manifest.json"
VERSION = 1


def model_dir(workdir: str, label: str) -> str:
    """The directory of the model called ``label`` (its path parts kept, other characters made safe)."""
    parts = [re.sub(r"[^A-Za-z0-9_.-]", "_", p) for p in label.split("/") if p not in ("", ".", "..")]
    return os.path.join(workdir, *parts)


def source_commit(root: str) -> str | None:
    """The git commit the scripts run from (``+dirty`` when the tree has changes), None outside git."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def load_manifest(workdir: str) -> dict[str, Any]:
    """The workdir's manifest (a new, empty one where there is none)."""
    path = os.path.join(workdir, MANIFEST)
    if not os.path.exists(path):
        return {"script": "bench_peers", "version": VERSION, "models": {}}
    with open(path) as f:
        manifest: dict[str, Any] = json.load(f)
    if manifest.get("version") != VERSION:
        raise ValueError(f"{path}: manifest version {manifest.get('version')}, this script writes {VERSION}")
    return manifest


def save_manifest(workdir: str, manifest: dict[str, Any]) -> None:
    """Write the manifest atomically (a reader never sees half of it)."""
    manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_json(os.path.join(workdir, MANIFEST), manifest)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float written as its name (``"inf"``, ``"nan"``: a program whose output has
    another shape verifies with an infinite error), so that the JSON stays strict.

    >>> finite({"e": [float("inf"), 1.5], "n": None})
    {'e': ['inf', 1.5], 'n': None}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_json(path: str, doc: dict[str, Any]) -> None:
    """Strict JSON (no NaN or Infinity: :func:`finite`), written atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(finite(doc), f, indent=2, allow_nan=False, default=str)
    os.replace(tmp, path)


def store_model(workdir: str, relative: str, model: onnx.ModelProto) -> str:
    """Save ``model`` under ``workdir`` at ``relative`` (atomically); returns ``relative``."""
    path = os.path.join(workdir, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    onnx.save(model, tmp)
    os.replace(tmp, path)
    return relative


def load_model(workdir: str, relative: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(workdir, relative))
