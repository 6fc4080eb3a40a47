#!/usr/bin/env python3
"""What eqsat's import makes of each model, as a digest, and how long it took: each model imported as
``optimize-model`` imports it with default flags (its dynamic dimensions at their representative sizes), the
imported graph exported and hashed (SHA-1 of the serialized program). Run it before and after a change to the
import to show the change keeps every import byte for byte (the eighth pass of issues 40-42: 67 imports), or which
ones it changes, and at what cost in seconds. ``--json`` writes the rows.

    python scripts/import_digest.py M/*/original.onnx --json before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from eqsat.app.config import OptimizeConfig  # noqa: E402
from eqsat.app.pipeline import shaped_import_phase  # noqa: E402
from eqsat.errors import first_line  # noqa: E402
from eqsat.onnx import export_model  # noqa: E402


def digest(path: str, config: OptimizeConfig | None = None) -> dict:
    """The model at ``path`` imported: its digest, seconds and node count; or the first line of why not."""
    start = time.perf_counter()
    try:
        _, graph, _ = shaped_import_phase(path, config or OptimizeConfig())
    except Exception as exc:  # noqa: BLE001 - a model the import refuses is a row too
        return {"model": path, "error": first_line(exc), "seconds": round(time.perf_counter() - start, 2)}
    data = export_model(graph).SerializeToString()
    return {"model": path, "digest": hashlib.sha1(data).hexdigest(), "seconds": round(time.perf_counter() - start, 2),
            "nodes": len(graph.nodes())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="ONNX files")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    missing = [f for f in args.models if not os.path.isfile(f)]
    if missing:
        print(f"import_digest: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = []
    for path in args.models:
        rows.append(digest(path))
        r = rows[-1]
        print(f"{path}  {r.get('digest', 'refused: ' + r.get('error', ''))[:60]}  {r['seconds']:.1f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"script": "import_digest", "argv": sys.argv[1:], "models": rows}, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
