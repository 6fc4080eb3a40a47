"""TASO's rule set (TENSAT's conversion, MIT: data/LICENSE.tensat-MIT) plus TASO's hand-written rules.

* 120 learned single-pattern lines ``taso_s000`` .. ``taso_s119``; 4 lines repeat earlier ones and are
  marked ``duplicate_of`` (listed, so the paper's count of 124 single rules holds, but not scheduled).
* 4 hand-written ``taso_s120`` .. ``taso_s123``: conv(x, w) -> conv(x, merge(w, 2)) for stride 1 or 2,
  SAME padding, activation NONE or RELU (a grouped conv with half as many groups).
* 13 learned multi-pattern rules ``taso_m00`` .. ``taso_m12`` and 2 hand-written ``taso_m13``, ``taso_m14``:
  conv(x, w1), conv(x, w3) -> the halves of conv(x, concat(enlarge(w1, w3), w3)), stride 1, SAME,
  activation NONE / RELU. The NASRNN variant replaces ``taso_m04`` by a copy of ``taso_m00``.
"""

from __future__ import annotations

from importlib import resources

from . import sexpr
from .rule import Rule, compile_multi, compile_single


def _lines(name: str) -> list[str]:
    text = resources.files("eqsat.rules").joinpath("data", name).read_text()
    return [line.strip() for line in text.split("\n") if line.strip()]


def single_rules() -> list[Rule]:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for i, line in enumerate(_lines("converted.txt")):
        lhs, rhs = line.split("=>")
        name = f"taso_s{i:03d}"
        rules.append(compile_single(name, sexpr.parse(lhs), sexpr.parse(rhs), duplicate_of=seen.get(line)))
        seen.setdefault(line, name)
    k = len(rules)
    for stride in (1, 2):
        for act in (0, 2):
            name = f"taso_s{k:03d}"
            k += 1
            query = (f"(= root (Conv2d {stride} {stride} -1 -1 {act} x w)) (= (S4 n c h wd) (shape x)) "
                     "(= (S4 co cg kh kw) (shape w)) (> c cg)")
            action = f"(Pend root (Conv2d {stride} {stride} -1 -1 {act} x (Merge (/ c cg) 2 w)))"
            rules.append(Rule(name, "single", "taso",
                              f"conv2d(s={stride}, SAME, act={act})(x, w) -> conv2d(x, merge(w, 2))",
                              ((query, action),), lhs=(("conv2d", stride, stride, 0, act, "?x", "?w"),)))
    return rules


def multi_rules(nasrnn: bool = False) -> list[Rule]:
    lines = _lines("converted_multi_nasrnn.txt" if nasrnn else "converted_multi.txt")
    rules = []
    for i in range(0, len(lines), 2):
        (s1, d1), (s2, d2) = (lines[i].split("=>")), (lines[i + 1].split("=>"))
        rules.append(compile_multi(f"taso_m{i // 2:02d}", sexpr.parse(s1), sexpr.parse(d1), sexpr.parse(s2),
                                   sexpr.parse(d2)))
    for k, act in enumerate((0, 2)):
        conv = f"(Conv2d 1 1 -1 -1 {act} x (Concat 0 (Enlarge w1 w3) w3))"
        query = (f"(= r1 (Conv2d 1 1 -1 -1 {act} x w1)) (= r2 (Conv2d 1 1 -1 -1 {act} x w3)) (!= r1 r2) "
                 "(= (S4 n a1 h wd) (shape r1)) (= (S4 n a3 h wd) (shape r2)) "
                 "(= (S4 n c xh xw) (shape x)) (= (S4 a1 c k1 l1) (shape w1)) (= (S4 a3 c k3 l3) (shape w3))")
        actions = f"(Pend r1 (Slice 1 0 a1 {conv})) (Pend r2 (Slice 1 a1 (+ a1 a3) {conv}))"
        rules.append(Rule(f"taso_m{13 + k:02d}", "multi", "taso",
                          f"conv(x, w1), conv(x, w3) -> split(conv(x, concat(enlarge(w1, w3), w3))), act={act}",
                          ((query, actions),),
                          lhs=(("conv2d", 1, 1, 0, act, "?x", "?w1"), ("conv2d", 1, 1, 0, act, "?x", "?w3"))))
    return rules
