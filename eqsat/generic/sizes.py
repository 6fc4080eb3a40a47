"""The int64 tensors of sizes a shape-generic program computes at run time from its inputs' shapes
(:mod:`eqsat.generic`): a vector of monomials of the interface's symbols written as a constant, an input's
``Shape``, or Gathers of an input's sizes joined by a Concat, each written once and shared."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat.dims import Mono, SymShape
from eqsat.onnx.axes.symbolic import constant_shape


class SizeWriter:
    """Writes new nodes and constants into ``model`` (its nodes collected in :attr:`nodes`), knowing where each
    symbol is read (:attr:`places`: symbol -> (input, axis)) and the symbolic shape of each value."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        g = model.graph
        self.constants = {t.name: t for t in g.initializer}
        self.shapes: dict[str, SymShape | None] = {}
        self.types: dict[str, int] = {}
        self.places: dict[str, tuple[str, int]] = {}
        self.names = {n for node in g.node for n in [*node.input, *node.output]} | set(self.constants) \
            | {vi.name for vi in g.input}
        self.counter = 0
        self.cache: dict[str, str] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.ports: list[str] = []
        self.written: dict[str, list[Mono]] = {}
        """the vectors :meth:`vector` wrote (name -> entries; a scalar's one), which shape inference reads as sizes (a
        Reshape's target, a Range's length)"""

    def fresh(self, base: str) -> str:
        while True:
            self.counter += 1
            name = f"{base}_g{self.counter}"
            if name not in self.names:
                self.names.add(name)
                return name

    def const(self, array: np.ndarray, base: str) -> str:
        name = self.fresh(base)
        tensor = numpy_helper.from_array(np.asarray(array), name)
        self.model.graph.initializer.append(tensor)
        self.constants[name] = tensor
        self.types[name] = tensor.data_type
        self.shapes[name] = constant_shape(tensor)
        return name

    def emit(self, op: str, inputs: list[str], base: str, size: int | None = 1, **attrs: Any) -> str:
        """A node computing an int64 vector of ``size`` entries (None: a scalar) from ``inputs``."""
        out = self.fresh(base)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.types[out] = onnx.TensorProto.INT64
        self.shapes[out] = [] if size is None else [Mono.const(size)]
        return out

    def vector(self, monos: list[Mono], scalar: bool = False) -> str:
        """An int64 tensor holding ``monos`` at run time (``scalar``: the one entry as a scalar): a constant, an
        input's ``Shape`` where they are its sizes, else the entries computed from the inputs' shapes (one
        ``Gather`` of consecutive sizes of an input, constants between, joined by a ``Concat``)."""
        key = ("scalar:" if scalar else "vector:") + ",".join(m.key() for m in monos)
        if key not in self.cache:
            self.cache[key] = self._vector(monos, scalar)
            self.written[self.cache[key]] = list(monos)
        return self.cache[key]

    def _vector(self, monos: list[Mono], scalar: bool) -> str:
        if all(m.is_const for m in monos):
            values = [int(m.coef) for m in monos]
            return self.const(np.array(values[0] if scalar else values, np.int64), "shape")
        if scalar:
            got = self._dim(monos[0], scalar=True)
            assert got is not None
            return got
        port = next((p for p in self.ports if self.shapes.get(p) == monos), None)
        if port is not None:
            return self._shape_of(port)
        pieces: list[str] = []
        for kind, payload in self._plan(monos):
            if kind == "const":
                pieces.append(self.const(np.array(payload, np.int64), "dims"))
            elif kind == "sizes":
                port_, axes_ = payload
                pieces.append(self._sizes(port_, axes_))
            else:
                dim = self._dim(payload)
                assert dim is not None
                pieces.append(dim)
        return pieces[0] if len(pieces) == 1 else self.emit("Concat", pieces, "shape", len(monos), axis=0)

    def _plan(self, monos: list[Mono]) -> list[tuple[str, Any]]:
        """The pieces :meth:`vector` joins for ``monos`` (not a constant, not an input's whole shape): runs of
        constants (``("const", values)``), consecutive sizes of one input (``("sizes", (input, axes))``) and the
        other entries one by one (``("dim", mono)``)."""
        pieces: list[tuple[str, Any]] = []
        run: list[int] = []
        axes: tuple[str, list[int]] | None = None

        def flush() -> None:
            nonlocal run, axes
            if run:
                pieces.append(("const", run))
            if axes:
                pieces.append(("sizes", axes))
            run, axes = [], None

        for m in monos:
            place = self.places.get(m.powers[0][0]) if m.coef == 1 and len(m.powers) == 1 \
                and m.powers[0][1] == 1 else None
            if m.is_const:
                if axes:
                    flush()
                run.append(int(m.coef))
            elif place is not None and (axes is None or axes[0] == place[0] and axes[1][-1] + 1 == place[1]):
                if run:
                    flush()
                axes = axes or (place[0], [])
                axes[1].append(place[1])
            else:
                flush()
                pieces.append(("dim", m))
        flush()
        return pieces

    def cost(self, monos: list[Mono]) -> int:
        """How many nodes :meth:`vector` writes for ``monos`` now (0: a constant, or written before): the pieces not
        written yet, and the Concat joining them. An entry computed from several sizes counts as one."""
        if self.ready(monos):
            return 0
        port = next((p for p in self.ports if self.shapes.get(p) == monos), None)
        if port is not None:
            return 0 if f"shape_of:{port}" in self.cache else 1
        pieces = self._plan(monos)
        new = sum(1 for kind, payload in pieces if kind == "sizes" and f"sizes:{payload[0]}:{payload[1]}" not in self.cache
                  or kind == "dim" and payload.key() not in self.cache)
        return new + (len(pieces) > 1)

    def _shape_of(self, port: str) -> str:
        key = f"shape_of:{port}"
        if key not in self.cache:
            self.cache[key] = self.emit("Shape", [port], "shape_of", len(self.shapes[port] or []))
        return self.cache[key]

    def _sizes(self, port: str, axes: list[int]) -> str:
        """The sizes of ``port``'s consecutive ``axes``: one ``Shape`` with ``start`` and ``end`` (opset 15), else a
        Gather of its whole shape; each written once."""
        key = f"sizes:{port}:{axes}"
        if key in self.cache:
            return self.cache[key]
        opset = max((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), default=0)
        if opset >= 15:
            self.cache[key] = self.emit("Shape", [port], "dims", len(axes), start=axes[0], end=axes[-1] + 1)
        else:
            self.cache[key] = self.emit("Gather", [self._shape_of(port), self.const(np.array(axes, np.int64), "axes")],
                                        "dims", len(axes), axis=0)
        return self.cache[key]

    def _dim(self, m: Mono, scalar: bool = False) -> str | None:
        """A one-element int64 tensor (``scalar``: a scalar) holding ``m`` at run time, computed from the inputs'
        shapes."""
        key = ("scalar:" if scalar else "") + m.key()
        if key in self.cache:
            return self.cache[key]

        size = None if scalar else 1

        def const(n: int) -> str:
            return self.const(np.array(n if scalar else [n], np.int64), "coef")

        if m.is_const:  # (the whole rest of a product of floors: 8 channels flattened with the sides)
            self.cache[key] = const(int(m.coef))
            return self.cache[key]
        factors = self._floors(m)
        if factors:  # a product of floors, each written as one (not the floor of the product)
            parts = [part for f in factors if (part := self._dim(f, scalar)) is not None]
            if len(parts) < len(factors):
                return None
            product = parts[0]
            for part in parts[1:]:
                product = self.emit("Mul", [product, part], "dim", size)
            self.cache[key] = product
            return product
        value: str | None = None
        below: list[str] = []
        for s, p in m.powers:
            if s not in self.places:
                return None
            name, axis = self.places[s]
            skey = ("scalar:" if scalar else "") + s
            if skey not in self.cache:
                self.cache[skey] = self._sizes(name, [axis]) if size else \
                    self.emit("Gather", [self._shape_of(name), const(axis)], "dim", size, axis=0)
            if p < 0:
                below += [self.cache[skey]] * -p
            for _ in range(p):
                value = self.cache[skey] if value is None else self.emit("Mul", [value, self.cache[skey]], "dim", size)
        # the numerator before any division (``60 / batch``, not ``(1 / batch) * 60``: 0 at a batch above 1)
        if value is None:
            value = const(int(m.coef.numerator))
        elif m.coef.numerator != 1:
            value = self.emit("Mul", [value, const(m.coef.numerator)], "dim", size)
        for divisor in below:
            value = self.emit("Div", [value, divisor], "dim", size)
        if m.coef.denominator != 1:
            value = self.emit("Div", [value, const(m.coef.denominator)], "dim", size)
        self.cache[key] = value
        return value

    def _floors(self, m: Mono) -> list[Mono]:
        """``m``, of fractional coefficient and more than one symbol (or a power), as a product of floors the
        program's values hold (``1/4*h``, ``1/4*w``: the sides after a Conv of stride 4, each ``floor(h/4)``) and a
        rest of whole coefficient; ``[]`` where it is none. Such a size is a product of the floors (a strided Conv's
        output flattened: ``floor(h/4) * floor(w/4)``, 16 at a side of 18), which ``floor(h*w/16)`` (20 there) is
        not.

        >>> from fractions import Fraction
        >>> w = SizeWriter(onnx.ModelProto())
        >>> h, v, q = Mono.symbol("h"), Mono.symbol("w"), Mono.const(Fraction(1, 4))
        >>> w.shapes["c"] = [Mono.const(8), q * h, q * v]
        >>> [f.key() for f in w._floors(Mono.const(8) * q * h * q * v)], w._floors(q * h)
        (['1/4*h', '1/4*w', '8'], [])
        """
        if m.coef.denominator == 1 or m.coef <= 0 or [p for _, p in m.powers] == [1] \
                or any(p < 0 for _, p in m.powers):
            return []
        floors: dict[str, set[Mono]] = {}  # symbol -> the floors of it the program's values hold
        for shape in self.shapes.values():
            for d in shape or []:
                if d is not None and d.coef.denominator != 1 and d.coef > 0 and [p for _, p in d.powers] == [1]:
                    floors.setdefault(d.powers[0][0], set()).add(d)
        factors: list[Mono] = []
        rest = m
        for symbol, power in m.powers:  # each symbol's floor taken for its whole power: one floor of it, or none
            if len(floors.get(symbol, ())) == 1:
                factors += list(floors[symbol]) * power
        for floor in factors:
            rest = rest / floor
        if rest.coef.denominator != 1 or not factors:
            return []
        return factors + ([] if rest == Mono.const(1) else [rest])

    def ready(self, monos: list[Mono]) -> bool:
        """Whether :meth:`vector` writes ``monos`` without a new node."""
        return "vector:" + ",".join(m.key() for m in monos) in self.cache or all(m.is_const for m in monos) \
            or any(self.shapes.get(p) == monos for p in self.ports)


__all__ = ["SizeWriter"]
