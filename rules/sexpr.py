"""TENSAT's rule syntax: s-expressions over its operator language, variables ``?input_N``.

>>> parse("(matmul 0 ?input_1 (relu ?input_2))")
('matmul', 0, '?input_1', ('relu', '?input_2'))
"""

from __future__ import annotations

Pattern = str | int | tuple


def _tokens(text: str) -> list[str]:
    return text.replace("(", " ( ").replace(")", " ) ").split()


def parse(text: str) -> Pattern:
    toks = _tokens(text)
    pos = 0

    def read() -> Pattern:
        nonlocal pos
        tok = toks[pos]
        pos += 1
        if tok == "(":
            items = []
            while toks[pos] != ")":
                items.append(read())
            pos += 1
            return tuple(items)
        if tok == ")":
            raise ValueError(f"unexpected ')' in {text!r}")
        try:
            return int(tok)
        except ValueError:
            return tok

    out = read()
    if pos != len(toks):
        raise ValueError(f"trailing tokens in {text!r}")
    return out


def is_var(p: Pattern) -> bool:
    return isinstance(p, str) and p.startswith("?")


def variables(p: Pattern) -> list[str]:
    """Variables in order of first appearance."""
    out: list[str] = []

    def walk(q: Pattern) -> None:
        if is_var(q):
            if q not in out:
                out.append(q)  # type: ignore[arg-type]
        elif isinstance(q, tuple):
            for x in q[1:]:
                walk(x)

    walk(p)
    return out


def rename(p: Pattern, mapping: dict[str, str]) -> Pattern:
    if is_var(p):
        return mapping.get(p, p)  # type: ignore[arg-type]
    if isinstance(p, tuple):
        return (p[0],) + tuple(rename(x, mapping) for x in p[1:])
    return p


def show(p: Pattern) -> str:
    if isinstance(p, tuple):
        return "(" + " ".join(show(x) for x in p) + ")"
    return str(p)


def ops(p: Pattern) -> set[str]:
    if isinstance(p, tuple):
        out = {p[0]}
        for x in p[1:]:
            out |= ops(x)
        return out
    return set()
