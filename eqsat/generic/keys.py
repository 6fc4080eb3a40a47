"""Content keys of the values a program computes: a digest of the computation that makes each one (its operator,
its number of outputs, its attributes and the keys of its inputs, down to the program's inputs by name and its
constants by content), the same in two programs exactly where they compute the value alike, whatever the names in
them.

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
_ABSENT = object()


class Keys:
    """The content keys of one program's values (:func:`of_nodes`), and the digests of the constants read so far
    (each constant hashed once; a constant is held here, so its ``id`` names it while the digest is kept: one per
    rewrite, whose program holds the constants anyway). A node's key is kept by its serialized bytes and its
    inputs' keys, so a program asked again (the rewrite asks after each fit, its prefix a little longer each time:
    a Swin's import asked 149 times) hashes again only the nodes that changed or are new."""

    def __init__(self) -> None:
        self._tensors: dict[int, tuple[onnx.TensorProto, Key]] = {}
        self._nodes: dict[bytes, tuple[tuple[str, ...], tuple[str, ...], bytes | None]] = {}
        """a node's bytes -> its inputs, its outputs, and what its key hashes before its inputs' keys (None: it
        has a subgraph)"""
        self._made: dict[tuple[bytes, tuple[Key, ...]], list[Key]] = {}
        """(what a node's key hashes first, its inputs' keys) -> the key of each of its outputs, by index"""

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

    def _node(self, node: onnx.NodeProto) -> tuple[tuple[str, ...], tuple[str, ...], bytes | None]:
        raw = node.SerializeToString()
        held = self._nodes.get(raw)
        if held is None:
            subgraph = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
            # its number of outputs too: a Split without sizes cuts its input into as many parts as it has outputs
            head = None if subgraph else b"node:%s:%s:%d:" % (
                node.domain.encode(), node.op_type.encode(), len(node.output)) + b"".join(
                a.SerializeToString(deterministic=True) for a in sorted(node.attribute, key=lambda a: a.name))
            held = self._nodes[raw] = (tuple(node.input), tuple(node.output), head)
        return held

    def of_nodes(self, inputs: Iterable[onnx.ValueInfoProto], nodes: Iterable[onnx.NodeProto],
                 constants: Mapping[str, onnx.TensorProto]) -> dict[str, Key | None]:
        """Each value ``nodes`` compute (in order) -> its key; None where it reads a subgraph, a value neither
        computed before it, nor an input (keyed by its name and declared type: the runs feed it by them), nor a
        constant, or a value without a key."""
        keys: dict[str, Key | None] = {
            i.name: b"input:%s:%s" % (i.name.encode(), i.type.SerializeToString(deterministic=True)) for i in inputs}
        for node in nodes:
            names, outputs, head = self._node(node)
            ins: list[Key | None] = []
            for name in names:
                key = keys.get(name, _ABSENT) if name else b""
                if key is _ABSENT:
                    key = self.tensor(constants[name]) if name in constants else None
                ins.append(key)  # type: ignore[arg-type]
            if head is None or None in ins:
                keys.update((o, None) for o in outputs if o)
                continue
            memo = (head, tuple(ins))
            made = self._made.get(memo)  # type: ignore[arg-type]
            if made is None:
                h = hashlib.blake2b(head, digest_size=20)
                for k in ins:
                    h.update(b"|" + (k or b""))
                made = []
                for index in range(len(outputs)):
                    out = h.copy()
                    out.update(b"#%d" % index)
                    made.append(out.digest())
                self._made[memo] = made  # type: ignore[index]
            for o, key in zip(outputs, made):
                if o:
                    keys[o] = key
        return keys


def batch_key(keys: Sequence[Key]) -> Key:
    """The key of values run together in one batch: the value's own where it is one."""
    return keys[0] if len(keys) == 1 else hashlib.blake2b(b"batch" + b"".join(sorted(keys)), digest_size=20).digest()
