"""The shape computations of a dynamic-axes model that must stay in the program rather than be folded.

The importer folds ``Shape`` (and what is computed from it) into constants at the shapes it imports at. Where
the result only sizes a Reshape or bounds a Slice, the folded constant is rewritten shape-generic on export
(:mod:`eqsat.generic`). Where it meets the data (position ids from ``Range(seq)``, a mask's indices, an
``Expand`` or ``ConstantOfShape`` to the input's size), a folded constant would specialize the program to one
size: :func:`live_shapes` names those ``Shape`` nodes, which the importer keeps as they are (opaque, written back
verbatim), so that everything computed from them is computed at run time.
"""

from __future__ import annotations

import onnx

from ..external import infer_shapes_aside
from ..io import is_large
from ..subgraphs import implicit_inputs

SHAPE_SLOTS = {("Reshape", 1), ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4)}
"""(operator, input index) where a shape computation is rewritten shape-generic on export, when the value reshaped
or sliced is the data (a constant sliced by the sequence length is computed from the shape: its values are too)"""


def _symbolic_dims(model: onnx.ModelProto) -> dict[str, list[bool]]:
    """value -> for each axis, whether its size is dynamic (a dim_param or unknown), by onnx's shape inference."""
    try:
        inferred = infer_shapes_aside(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - no inference: nothing known
        return {}
    out: dict[str, list[bool]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            out[vi.name] = [not d.HasField("dim_value") for d in tt.shape.dim]
    return out


def live_shapes(model: onnx.ModelProto) -> set[str]:
    """The outputs of the main graph's ``Shape`` nodes that read a dynamic dimension and whose values reach the
    data (a node that also reads a value computed from the inputs, on a slot other than :data:`SHAPE_SLOTS`) or an
    output of the graph (ViTMAE's mask of the patches kept, computed from the shapes alone); a value a node's
    subgraph reads reaches that node's outputs (DINOv3's rotary table over the patch grid, passed through an ``If``
    on its size that TorchScript writes: folded, the table was the tuned image's at every size)."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    inputs = {vi.name for vi in g.input if vi.name not in inits}
    if not inputs or is_large(model):
        return set()
    data = set(inputs)
    for node in g.node:  # in order: what the inputs' values flow into (Shape reads no values)
        if node.op_type not in ("Shape", "Size") and any(i in data for i in [*node.input, *implicit_inputs(node)]):
            data.update(o for o in node.output if o)
    shapes = [n for n in g.node if n.op_type == "Shape" and n.domain in ("", "ai.onnx")]
    if not shapes:
        return set()
    dims = _symbolic_dims(model)
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in g.node:
        for k, i in enumerate(node.input):
            consumers.setdefault(i, []).append((node, k))
        for i in implicit_inputs(node):  # read inside a branch (an If on a size whose branches read the table)
            consumers.setdefault(i, []).append((node, -1))

    outputs = {o.name for o in g.output}

    def meets_data(start: str) -> bool:
        """Whether a value computed from ``start`` (up to the shape slots) reaches the data (a node that also reads
        a value computed from the inputs, on a slot other than a shape slot) or an output of the graph; the walk
        stops at the first that does (each Shape's walk went on through the rest of the model: quadratic in a
        36,772-node unrolled RWKV)."""
        if start in outputs:
            return True
        seen, frontier = {start}, [start]
        while frontier:
            for user, k in consumers.get(frontier.pop(), []):
                if (user.op_type, k) in SHAPE_SLOTS and user.input[0] in data:
                    continue  # sizes a Reshape or bounds a Slice of the data: rewritten generic on export
                if any(i in data for j, i in enumerate(user.input) if j != k) \
                        or any(i in data for i in implicit_inputs(user)):
                    return True
                for o in user.output:
                    if o in outputs:
                        return True
                    if o and o not in seen:
                        seen.add(o)
                        frontier.append(o)
        return False

    live: set[str] = set()
    for node in shapes:
        dynamic = dims.get(node.input[0])
        if dynamic is None:
            continue
        start = next((a.i for a in node.attribute if a.name == "start"), 0)
        end = next((a.i for a in node.attribute if a.name == "end"), len(dynamic))
        if any(dynamic[start:end] if end else dynamic[start:]) and meets_data(node.output[0]):
            live.add(node.output[0])
    return live


__all__ = ["SHAPE_SLOTS", "live_shapes"]
