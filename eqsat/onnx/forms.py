"""The exporter's ONNX forms for IR patterns that onnxruntime fuses only in the user's spelling.

Where the optimized program changed the user's nodes (so no :class:`~eqsat.ir.Origin` is written back
verbatim), the IR still spells a 3-D MatMul as ``reshape -> 2-D matmul -> reshape``, a bias as an ``ewadd`` of
a constant reshaped to the other operand's rank, a Conv's bias as a separate ``ewadd``. Written one IR node at a
time, onnxruntime would not form Gemm, FusedMatMul, SkipLayerNormalization or Conv+bias from them (those fusions
and their constraints: :mod:`eqsat.onnx.fusions`, whose predicates this module reads). The :func:`plan` here picks,
for such nodes, one ONNX form that reads fewer values:

- ``reshape(matmul(reshape(A), B))`` with a 2-D ``B`` whose outer reshape restores leading dimensions:
  ``MatMul(A, B)`` when the inner reshape only flattened them, else ``MatMul(Reshape(A), B)`` with ``A`` reshaped
  straight to those leading dimensions (and the batched form, ``B`` reshaped alike);
- ``ewadd(conv2d(x, w), c)`` with ``c`` a constant of shape ``(1, C, 1, 1)``: ``Conv(x, w, c.reshape(C))``, and
  ``ewadd(ewadd(conv2d(x, w), r), c)`` (a residual sum a rewrite moved before the bias):
  ``Add(Conv(x, w, c.reshape(C)), r)``;
- a 2-D ``matmul`` with a fused activation: ``Gemm`` then the activation (onnxruntime's FusedGemm; it fuses
  no activation into a MatMul: :data:`~eqsat.onnx.fusions.GEMM_ACTIVATION`);
- ``ewadd`` / ``ewmul`` of a tensor and a constant that broadcasts against it: the constant without its leading
  1-dimensions (a scalar when it holds one value);
- a value cut into parts by slices (slices of slices: TASO's binary split of a merged Q/K/V projection) along
  one axis: one ``Split`` with all the parts (a :class:`SplitGroup`); when the value is a 2-D ``matmul`` of
  ``reshape(A)`` that flattened A's leading dimensions, the N-D ``MatMul(A, W)``; and where a part is then
  (reshaped, keeping its last dimension, and) added to a constant bias along the cut axis, one ``Add`` of the
  concatenated bias before the ``Split``, which onnxruntime fuses with the MatMul into a Gemm;
- ``sdpa_causal`` of rank 4 whose keys and values are grouped heads repeated (transformers' ``repeat_kv``:
  ``reshape(Expand(Unsqueeze(x)))`` from [B, H, S, D] to [B, H * r, S, D], or the IR's ``repeat_heads`` that a
  shape-generic import reads it as, where the rule ``attention_grouped`` did not apply; the keys then transposed): opset 23's
  ``Attention`` of the unrepeated keys and values (it takes fewer key/value heads than query heads: grouped-query
  attention), where the writer may use the kernel (``kernels``): no Expand of either each call.

>>> from eqsat import ir
>>> x = ir.input_("x", (2, 3, 4)); w = ir.weight("w", (4, 5))
>>> y = ir.make("reshape", [ir.make("matmul", [ir.make("reshape", [x], (6, 4)), w], (0,))], (2, 3, 5))
>>> [n.name for n in plan([y], {})[id(y)].deps]
['x', 'w']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..dims import fingerprint, fp_of
from ..ir import Node, topo_order
from .fusions import GEMM_ACTIVATION, activation_fusion, channel_operand, row_bias, stripped


@dataclass(frozen=True)
class Form:
    """How to write one IR node: the values it reads, and the ONNX op it becomes."""

    deps: tuple[Node, ...]
    """the nodes whose values the form reads (written before it)"""
    kind: str
    """``matmul`` (MatMul of deps), ``gemm`` (a 2-D matmul with its fused activation), ``conv_bias`` (the conv2d ``of`` with a bias input, plus the last dep when
    there is one more than the conv reads), ``elementwise``, ``split`` (one part of ``group``), ``grouped`` (a
    causal attention of deps q, k, v with fewer key/value heads)"""
    of: Node | None = None
    """``conv_bias``: the conv2d node whose attributes the Conv takes"""
    constants: dict[int, np.ndarray] = field(default_factory=dict)
    """input position -> constant to write in its place (``elementwise``, ``conv_bias``: position 2)"""
    shape: tuple[int, ...] | None = None
    """``matmul``: the shape the first operand is reshaped to first (None: it has it already)"""
    group: SplitGroup | None = None
    """``split``: the one Split that writes this node with the other parts of its value"""


@dataclass(frozen=True, eq=False)
class SplitGroup:
    """One ``Split`` of a value the program cuts into parts along one axis: ``Split(MatMul(operand, W) + bias)``
    when ``operand`` is set (``source`` is then the 2-D matmul, ``W`` its second input), else
    ``Split(source + bias)``; the node ``tops[i]`` is part ``i`` (reshaped to the node's shape)."""

    source: Node
    operand: Node | None
    """the first operand of the N-D MatMul written for a 2-D matmul ``source`` (None: ``source`` is written)"""
    axis: int
    """the axis of the written value that is cut"""
    sizes: tuple[int, ...]
    tops: tuple[Node, ...]
    """the node whose value each part is, in axis order"""
    part_shapes: tuple[tuple[int, ...], ...]
    """the shape of each part as the Split writes it"""
    bias: np.ndarray | None
    """the biases of the parts (zero where a part has none), added along the last axis before the Split"""
    inner: tuple[Node, ...]
    """the nodes the group replaces, besides ``tops`` (the slices, the matmul, reshapes)"""

    @property
    def deps(self) -> tuple[Node, ...]:
        return (self.source,) if self.operand is None else (self.operand, self.source.inputs[1])


def _product(dims: Sequence[int]) -> int:
    return int(np.prod(dims, dtype=np.int64))


def _matmul(r: Node, uses: Counter) -> Form | None:
    """``reshape(matmul(reshape(A), B))`` that flattens then restores A's leading dims: ``MatMul(A, B)``."""
    m = r.inputs[0]
    if m.op != "matmul" or m.attrs[:1] != (0,) or uses[id(m)] != 1 or m.inputs[0].op != "reshape":
        return None
    a2, b2 = m.inputs
    a = a2.inputs[0]
    sa, lead = tuple(a.shape), tuple(r.shape[:-1])
    if len(b2.shape) == 2 and len(lead) >= 2 and _product(lead) == a2.shape[0]:
        k = a2.shape[1]
        return Form((a, b2), "matmul", shape=None if sa == lead + (k,) else lead + (k,))
    if len(sa) < 3:
        return None
    if len(b2.shape) == 3 and b2.op == "reshape" and len(a2.shape) == 3:
        b = b2.inputs[0]
        sb = tuple(b.shape)
        if len(sb) == len(sa) and sb[:-2] == sa[:-2] and tuple(a2.shape) == (_product(sa[:-2]),) + sa[-2:] \
                and tuple(b2.shape) == (_product(sb[:-2]),) + sb[-2:] and tuple(r.shape) == sa[:-1] + (sb[-1],):
            return Form((a, b), "matmul")
    return None


def _stripped(array: np.ndarray) -> np.ndarray:
    """``array`` without its leading 1-dimensions (a scalar when it holds one value):
    :func:`~eqsat.onnx.fusions.stripped`."""
    return array.reshape(stripped(array.shape))


def _bare_conv(n: Node, uses: Counter) -> bool:
    """A conv2d with no fused activation that only one node reads."""
    return n.op == "conv2d" and n.attrs[-1] == 0 and uses[id(n)] == 1


def _with_constant(n: Node, consts: Mapping[int, np.ndarray], uses: Counter) -> Form | None:
    """A Conv with its bias input, or an elementwise op with its constant operand in the smallest rank."""
    for k in (0, 1):
        c, other = n.inputs[k], n.inputs[1 - k]
        if id(c) not in consts or id(other) in consts or tuple(other.shape) != tuple(n.shape):
            continue
        value = consts[id(c)]
        if n.op == "ewadd" and channel_operand(c.shape, n.shape):
            if _bare_conv(other, uses):
                return Form(other.inputs, "conv_bias", other, {2: value.reshape(-1)})
            if other.op == "ewadd" and uses[id(other)] == 1:  # (conv + r) + bias, as a rewrite reassociated it
                for conv, r in (other.inputs, other.inputs[::-1]):
                    if _bare_conv(conv, uses) and id(r) not in consts and tuple(r.shape) == tuple(n.shape):
                        return Form(conv.inputs + (r,), "conv_bias", conv, {2: value.reshape(-1)})
        if value.size == 1 or (value.ndim > 1 and value.shape[0] == 1):
            return Form((other,), "elementwise", constants={k: _stripped(value)})
    return None


def _slice_tree(root: Node, readers: Mapping[int, list[Node]], uses: Counter) -> tuple[list[Node], list[Node]] | None:
    """The slices that cut ``root`` into parts along one axis, in axis order (slices of slices followed down to
    the slices some other node reads), and the slices between, when they cut all of ``root`` and nothing else
    reads ``root`` or a slice between."""
    axis: int | None = None
    leaves: list[tuple[int, Node]] = []
    between: list[Node] = []
    stack = [(root, 0)]
    while stack:
        n, offset = stack.pop()
        kids = readers.get(id(n), [])
        if n is not root:
            if not (kids and all(k.op == "slice" for k in kids)):
                leaves.append((offset, n))
                continue
            between.append(n)
        if not kids or uses[id(n)] != len(kids) or any(k.op != "slice" for k in kids):
            return None
        if axis is None:
            axis = kids[0].attrs[0]
        if any(k.attrs[0] != axis for k in kids):
            return None
        stack.extend((k, offset + k.attrs[1]) for k in kids)
    assert axis is not None
    leaves.sort(key=lambda t: t[0])
    end = 0
    for offset, leaf in leaves:
        if offset != end:
            return None  # a gap or an overlap
        end += leaf.shape[axis]
    if end != root.shape[axis] or len(leaves) < 2:
        return None
    return [leaf for _, leaf in leaves], between


def _part(leaf: Node, last: bool, consts: Mapping[int, np.ndarray], readers: Mapping[int, list[Node]],
          uses: Counter) -> tuple[Node, np.ndarray | None, list[Node]]:
    """The node that part ``leaf`` is written as: the leaf, its only reader when a reshape, or then (when the cut
    is along the last axis and the reshape keeps it) the only reader of that when an ``ewadd`` of a constant
    bias along it; the bias (1-D) and the nodes passed over."""
    top, passed = leaf, []
    n = leaf.shape[-1]
    nxt = readers.get(id(top), [])
    if uses[id(top)] == 1 and len(nxt) == 1 and nxt[0].op == "reshape":
        passed.append(top)
        top = nxt[0]
        nxt = readers.get(id(top), [])
    if last and uses[id(top)] == 1 and len(nxt) == 1 and nxt[0].op == "ewadd" and top.shape[-1] == n:
        add = nxt[0]
        c = add.inputs[1] if add.inputs[0] is top else add.inputs[0]
        if id(c) in consts and id(top) not in consts and tuple(add.shape) == tuple(top.shape) and row_bias(c.shape, n):
            return add, consts[id(c)].reshape(n), passed + [top]
    return top, None, passed


def _split(root: Node, consts: Mapping[int, np.ndarray], readers: Mapping[int, list[Node]],
           uses: Counter) -> SplitGroup | None:
    """The :class:`SplitGroup` of a value cut into parts by slices (see the module's documentation)."""
    tree = _slice_tree(root, readers, uses)
    if tree is None:
        return None
    leaves, inner = tree
    axis = leaves[0].attrs[0]
    operand, shape = None, tuple(root.shape)
    if root.op == "matmul" and len(root.shape) == 2 and root.attrs[:1] == (0,) and axis == 1:
        a2 = root.inputs[0]
        a = a2.inputs[0] if a2.op == "reshape" else a2
        operand = a if len(a.shape) >= 2 and tuple(a2.shape) == (_product(a.shape[:-1]), a.shape[-1]) else a2
        shape = tuple(operand.shape[:-1]) + (root.shape[1],)
        axis = len(shape) - 1
        inner.append(root)
    last = axis == len(shape) - 1
    tops, biases = [], []
    for leaf in leaves:
        top, bias, passed = _part(leaf, last, consts, readers, uses)
        tops.append(top)
        biases.append(bias)
        inner += passed
    sizes = tuple(leaf.shape[leaves[0].attrs[0]] for leaf in leaves)
    bias_all = None
    if any(b is not None for b in biases):
        dtype = next(b for b in biases if b is not None).dtype
        bias_all = np.concatenate([np.zeros(k, dtype) if b is None else b for k, b in zip(sizes, biases)])
    part_shapes = tuple(shape[:axis] + (k,) + shape[axis + 1:] for k in sizes)
    return SplitGroup(root, operand, axis, sizes, tuple(tops), part_shapes, bias_all, tuple(inner))


def _repeated(n: Node) -> Node | None:
    """``x`` where ``n`` repeats the heads of ``x`` (:func:`repeated_heads`), else None."""
    if n.op == "repeat_heads":
        return n.inputs[0]
    found = repeated_heads(n)
    return None if found is None else found[0]


def repeated_heads(n: Node) -> tuple[Node, int] | None:
    """``(x, r)`` where ``n`` is ``x`` [B, H, S, D] with each head repeated r > 1 times in turn (a ``reshape`` or
    an ONNX ``Reshape`` to [B, H * r, S, D] of an ONNX ``Expand`` to [B, H, r, S, D] of ``x`` made [B, H, 1, S, D]
    by an ``Unsqueeze`` or a ``reshape``: transformers' ``repeat_kv``), else None. The shapes decide it (compared
    as fingerprints: a symbolic dimension equal to itself only): inserting an axis of 1 and merging two axes move
    no value, and an Expand from 1 to r repeats. The importer reads such a chain as ``repeat_heads``."""
    if not (n.op == "reshape" or (n.op == "opaque" and n.attrs[:2] == ("Reshape", ""))) or len(n.shape) != 4:
        return None
    e = n.inputs[0]
    if not (e.op == "opaque" and e.attrs[:2] == ("Expand", "") and len(e.shape) == 5 and e.inputs):
        return None
    u = e.inputs[0]
    if not (u.op == "reshape" or (u.op == "opaque" and u.attrs[:2] == ("Unsqueeze", "") and u.inputs)):
        return None
    x, r = u.inputs[0], e.shape[2]
    if len(x.shape) != 4 or fp_of(r) != int(r) or int(r) <= 1:  # r a constant
        return None
    b, h, s, d = fingerprint(x.shape)
    if fingerprint(u.shape) != (b, h, 1, s, d) or fingerprint(e.shape) != (b, h, int(r), s, d) \
            or fingerprint(n.shape) != (b, h * int(r), s, d) or fp_of(x.shape[1]) != int(x.shape[1]) \
            or fp_of(x.shape[3]) != int(x.shape[3]):
        return None
    return x, int(r)


def _grouped(n: Node) -> Form | None:
    """A causal attention whose keys (transposed) and values are both :func:`_repeated`: the unrepeated ones."""
    if n.op != "sdpa_causal" or len(n.shape) != 4:
        return None
    q, kt, v = n.inputs
    if kt.op != "transpose" or tuple(kt.attrs) != (0, 1, 3, 2):
        return None
    k, v0 = _repeated(kt.inputs[0]), _repeated(v)
    if k is None or v0 is None or fingerprint(k.shape)[1] != fingerprint(v0.shape)[1]:
        return None
    return Form((q, k, v0), "grouped")


def plan(outputs: Sequence[Node], consts: Mapping[int, np.ndarray], kernels: bool = True) -> dict[int, Form]:
    """The node -> form of every node of the program rooted at ``outputs`` that has a better ONNX form;
    ``consts`` are the nodes folded into constants (id -> value); ``kernels``: the writer may use the runtime
    kernels of opset 23 (the ``grouped`` form is one)."""
    order = topo_order(outputs)
    uses: Counter = Counter(id(o) for o in outputs)
    readers: dict[int, list[Node]] = {}
    for n in order:
        uses.update({id(i) for i in n.inputs})
        for i in {id(i): i for i in n.inputs}.values():  # each reader once
            readers.setdefault(id(i), []).append(n)
    forms: dict[int, Form] = {}
    replaced: set[int] = set()  # nodes a split group replaces (its inner slices are no roots of another)
    for n in order:
        if id(n) in consts:
            continue
        slices = any(r.op == "slice" for r in readers.get(id(n), []))
        group = _split(n, consts, readers, uses) if slices and id(n) not in replaced else None
        if group is not None:
            forms.update({id(t): Form(group.deps, "split", group=group) for t in group.tops})
            replaced.update(id(i) for i in group.inner)
        form = None
        if n.op == "reshape":
            form = _matmul(n, uses)
        elif n.op == "matmul" and n.attrs[:1] != (0,) and activation_fusion(n.op, len(n.shape)) is GEMM_ACTIVATION:
            form = Form(n.inputs, "gemm")
        elif n.op in ("ewadd", "ewmul") and len(n.inputs) == 2:
            form = _with_constant(n, consts, uses)
        elif n.op == "sdpa_causal" and kernels:
            form = _grouped(n)
        if form is not None and forms.get(id(n), form).kind != "split":
            forms[id(n)] = form
    return forms


__all__ = ["Form", "SplitGroup", "plan", "repeated_heads"]
