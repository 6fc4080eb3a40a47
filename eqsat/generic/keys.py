"""Content keys of the values a program computes: a digest of the computation that makes each one (its operator,
its attributes and the keys of its inputs, down to the program's inputs by name and its constants by content), the
same in two programs exactly where they compute the value alike, whatever the names in them.

The runs at further sizes that fit the sizes a program computes (:mod:`.probes`) are kept under these keys in the
:class:`.original.Original` of the run (:meth:`.original.Original.runs_of`), so that a candidate's rewrite reads
what the rewrite of an earlier candidate of the same model already ran: the candidates of one run share most of
their prefixes (a patch embedding and its interpolated positions, an audio front-end), and before, each ran them
again at every size. A node with a subgraph (``If``, ``Loop``, ``Scan``: its body reads outer values by name) and
whatever reads it get no key, and are run as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import onnx

Key = bytes


class Keys:
    """The content keys of one program's values (:func:`of_nodes`), and the digests of the constants read so far
    (each constant hashed once; a constant is held here, so its ``id`` names it while the digest is kept: one per
    rewrite, whose program holds the constants anyway)."""

    def __init__(self) -> None:
        self._tensors: dict[int, tuple[onnx.TensorProto, Key]] = {}

    def tensor(self, t: onnx.TensorProto) -> Key:
        """A constant's key: its element type, shape and data (a reference to external data: where it lies)."""
        held = self._tensors.get(id(t))
        if held is not None and held[0] is t:
            return held[1]
        h = hashlib.blake2b(digest_size=20)
        h.update(b"tensor:%d:%s" % (t.data_type, ",".join(map(str, t.dims)).encode()))
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for e in t.external_data:
                h.update(b"%s=%s;" % (e.key.encode(), e.value.encode()))
        elif t.HasField("raw_data"):
            h.update(t.raw_data)
        else:
            data = onnx.TensorProto()
            data.CopyFrom(t)
            data.ClearField("name")
            data.ClearField("doc_string")
            h.update(data.SerializeToString(deterministic=True))
        key = h.digest()
        self._tensors[id(t)] = (t, key)
        return key

    def of_nodes(self, inputs: Iterable[onnx.ValueInfoProto], nodes: Iterable[onnx.NodeProto],
                 constants: Mapping[str, onnx.TensorProto]) -> dict[str, Key | None]:
        """Each value ``nodes`` compute (in order) -> its key; None where it reads a subgraph, a value neither
        computed before it, nor an input (keyed by its name and declared type: the runs feed it by them), nor a
        constant, or a value without a key."""
        keys: dict[str, Key | None] = {
            i.name: b"input:%s:%s" % (i.name.encode(), i.type.SerializeToString(deterministic=True)) for i in inputs}
        for node in nodes:
            ins: list[Key | None] = []
            for name in node.input:
                if not name:
                    ins.append(b"")
                elif name in keys:
                    ins.append(keys[name])
                elif name in constants:
                    ins.append(self.tensor(constants[name]))
                else:
                    ins.append(None)
            subgraph = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
            if subgraph or any(k is None for k in ins):
                keys.update((o, None) for o in node.output if o)
                continue
            h = hashlib.blake2b(digest_size=20)
            h.update(b"node:%s:%s:" % (node.domain.encode(), node.op_type.encode()))
            for a in sorted(node.attribute, key=lambda a: a.name):
                h.update(a.SerializeToString(deterministic=True))
            for k in ins:
                h.update(b"|" + (k or b""))
            for index, o in enumerate(node.output):
                if o:
                    out = h.copy()
                    out.update(b"#%d" % index)
                    keys[o] = out.digest()
        return keys


def batch_key(keys: Sequence[Key]) -> Key:
    """The key of values run together in one batch: the value's own where it is one."""
    return keys[0] if len(keys) == 1 else hashlib.blake2b(b"batch" + b"".join(sorted(keys)), digest_size=20).digest()
