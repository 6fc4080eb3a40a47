"""The egglog program that declares the tensor language and its analyses.

* ``T``: one datatype of tensor operators (constructor table :data:`CONSTRUCTORS`).
* ``shape``: the shape analysis, a function ``T -> Shape`` filled by the ``analysis`` ruleset for terms
  that rules create (the encoder sets it directly for the initial program). A term without a shape is
  ill-formed: rewrites only *propose* a right-hand side (``Pend lhs rhs``) and the ``commit`` ruleset
  unions it only once its shape exists and equals the left-hand side's, so no ill-shaped term is ever
  part of an e-class reachable from the program.
* ``AllW``: the all-weights flag (computable from weights alone, so precomputable before inference).
* ``node``: one table of named handles (``"n17"``) for the encoder; no ``let`` globals.
"""

from __future__ import annotations

from itertools import permutations

# constructor -> (IR op, argument kinds): i = i64 literal, s = String, h = Shape value, t = tensor,
# l = list of tensors
CONSTRUCTORS: dict[str, tuple[str, str]] = {
    "Input": ("input", "s"),
    "Weight": ("weight", "s"),
    "Ewadd": ("ewadd", "tt"),
    "Ewmul": ("ewmul", "tt"),
    "Relu": ("relu", "t"),
    "Tanh": ("tanh", "t"),
    "Sigmoid": ("sigmoid", "t"),
    "Dropout": ("dropout", "t"),
    "Matmul": ("matmul", "itt"),
    "Conv2d": ("conv2d", "iiiiitt"),
    "Pool": ("pool", "iiiiiiiit"),
    "Concat": ("concat", "itt"),
    "ConcatN": ("concat", "il"),
    "Slice": ("slice", "iiit"),
    "Transpose": ("transpose", "ht"),
    "Reshape": ("reshape", "ht"),
    "Merge": ("merge", "iit"),
    "Enlarge": ("enlarge", "tt"),
    "BatchNorm": ("batchnorm", "ittttt"),
    "BnScale": ("bn_scale", "itt"),
    "BnShift": ("bn_shift", "itttt"),
    "Opaque": ("opaque", "il"),
}
OP_TO_CONSTRUCTOR = {"input": "Input", "weight": "Weight", "ewadd": "Ewadd", "ewmul": "Ewmul", "relu": "Relu",
                     "tanh": "Tanh", "sigmoid": "Sigmoid", "dropout": "Dropout", "matmul": "Matmul",
                     "conv2d": "Conv2d", "pool": "Pool", "slice": "Slice", "transpose": "Transpose",
                     "reshape": "Reshape", "merge": "Merge", "enlarge": "Enlarge", "batchnorm": "BatchNorm",
                     "bn_scale": "BnScale", "bn_shift": "BnShift", "opaque": "Opaque"}
_SORT = {"i": "i64", "s": "String", "h": "Shape", "t": "T", "l": "TList"}
MAX_RANK = 4


def _shape_ctor(rank: int) -> str:
    return f"S{rank}"


def shape_term(dims) -> str:
    """egglog term of a shape value."""
    dims = list(dims)
    if len(dims) <= MAX_RANK:
        return f"({_shape_ctor(len(dims))}{''.join(' ' + str(int(d)) for d in dims)})"
    return f'(SN "{"_".join(str(int(d)) for d in dims)}")'


def _vars(prefix: str, rank: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(rank)]


def _s(vs: list[str]) -> str:
    return f"({_shape_ctor(len(vs))} {' '.join(vs)})" if vs else "(S0)"


def _rule(name: str, query: list[str], actions: list[str], ruleset: str = "analysis") -> str:
    return f"(rule ({' '.join(query)}) ({' '.join(actions)}) :ruleset {ruleset} :name \"{name}\")"


def _shape_rules() -> list[str]:
    rules = []
    for op in ("Relu", "Tanh", "Sigmoid", "Dropout"):
        rules.append(_rule(f"shape_{op}", [f"(= e ({op} x))", "(= s (shape x))"], ["(set (shape e) s)"]))
    for op in ("Ewadd", "Ewmul"):
        for r in range(1, MAX_RANK + 1):
            a, b = _vars("a", r), _vars("b", r)
            conds = [f"(= 0 (* (* (- {x} {y}) (- {x} 1)) (- {y} 1)))" for x, y in zip(a, b)]
            out = [f"(max {x} {y})" for x, y in zip(a, b)]
            rules.append(_rule(f"shape_{op}{r}", [f"(= e ({op} x y))", f"(= {_s(a)} (shape x))",
                                                   f"(= {_s(b)} (shape y))", *conds], [f"(set (shape e) {_s(out)})"]))
    rules.append(_rule("shape_Matmul2", ["(= e (Matmul act x y))", "(= (S2 m k) (shape x))", "(= (S2 k n) (shape y))"],
                       ["(set (shape e) (S2 m n))"]))
    rules.append(_rule("shape_Matmul3", ["(= e (Matmul act x y))", "(= (S3 b m k) (shape x))",
                                         "(= (S3 b k n) (shape y))"], ["(set (shape e) (S3 b m n))"]))
    conv_ok = ["(> ci 0)", "(= 0 (% c ci))", "(= 0 (% co (/ c ci)))", "(> sh 0)", "(> sw 0)"]
    rules.append(_rule("shape_Conv2d_same", ["(= e (Conv2d sh sw -1 -1 act x w))", "(= (S4 n c h wd) (shape x))",
                                             "(= (S4 co ci kh kw) (shape w))", *conv_ok, "(= 1 (% kh 2))", "(= 1 (% kw 2))"],
                       ["(set (shape e) (S4 n co (+ (/ (- h 1) sh) 1) (+ (/ (- wd 1) sw) 1)))"]))
    rules.append(_rule("shape_Conv2d", ["(= e (Conv2d sh sw ph pw act x w))", "(>= ph 0)", "(>= pw 0)",
                                        "(= (S4 n c h wd) (shape x))", "(= (S4 co ci kh kw) (shape w))", *conv_ok,
                                        "(>= (+ h (* 2 ph)) kh)", "(>= (+ wd (* 2 pw)) kw)"],
                       ["(set (shape e) (S4 n co (+ (/ (- (+ h (* 2 ph)) kh) sh) 1) (+ (/ (- (+ wd (* 2 pw)) kw) sw) 1)))"]))
    rules.append(_rule("shape_Pool_same", ["(= e (Pool k kh kw sh sw -1 -1 act x))", "(= (S4 n c h wd) (shape x))",
                                           "(= 1 (% kh 2))", "(= 1 (% kw 2))", "(> sh 0)", "(> sw 0)"],
                       ["(set (shape e) (S4 n c (+ (/ (- h 1) sh) 1) (+ (/ (- wd 1) sw) 1)))"]))
    rules.append(_rule("shape_Pool", ["(= e (Pool k kh kw sh sw ph pw act x))", "(>= ph 0)", "(>= pw 0)",
                                      "(= (S4 n c h wd) (shape x))", "(> sh 0)", "(> sw 0)",
                                      "(>= (+ h (* 2 ph)) kh)", "(>= (+ wd (* 2 pw)) kw)"],
                       ["(set (shape e) (S4 n c (+ (/ (- (+ h (* 2 ph)) kh) sh) 1) (+ (/ (- (+ wd (* 2 pw)) kw) sw) 1)))"]))
    for r in range(1, MAX_RANK + 1):
        for ax in range(r):
            a = _vars("d", r)
            b = list(a)
            b[ax] = "q"
            out = list(a)
            out[ax] = f"(+ {a[ax]} q)"
            rules.append(_rule(f"shape_Concat{r}_{ax}", [f"(= e (Concat {ax} x y))", f"(= {_s(a)} (shape x))",
                                                         f"(= {_s(b)} (shape y))"], [f"(set (shape e) {_s(out)})"]))
            out = list(a)
            out[ax] = "(- en st)"
            rules.append(_rule(f"shape_Slice{r}_{ax}", [f"(= e (Slice {ax} st en x))", f"(= {_s(a)} (shape x))",
                                                        "(>= st 0)", "(< st en)", f"(<= en {a[ax]})"],
                               [f"(set (shape e) {_s(out)})"]))
    for r in range(2, MAX_RANK + 1):
        for perm in permutations(range(r)):
            a = _vars("d", r)
            rules.append(_rule(f"shape_Transpose_{''.join(map(str, perm))}",
                               [f"(= e (Transpose {_s([str(p) for p in perm])} x))", f"(= {_s(a)} (shape x))"],
                               [f"(set (shape e) {_s([a[p] for p in perm])})"]))
    for r in range(1, MAX_RANK + 1):
        for q in range(1, MAX_RANK + 1):
            a, b = _vars("a", r), _vars("b", q)
            va = a[0] if r == 1 else "(* " * (r - 1) + a[0] + "".join(f" {x})" for x in a[1:])
            vb = b[0] if q == 1 else "(* " * (q - 1) + b[0] + "".join(f" {x})" for x in b[1:])
            rules.append(_rule(f"shape_Reshape{r}_{q}", [f"(= e (Reshape {_s(b)} x))", f"(= {_s(a)} (shape x))",
                                                         f"(= {va} {vb})"], [f"(set (shape e) {_s(b)})"]))
    rules.append(_rule("shape_Merge", ["(= e (Merge g cnt w))", "(= (S4 co cg kh kw) (shape w))", "(> cnt 0)",
                                       "(= 0 (% g cnt))", "(= 0 (% co g))"],
                       ["(set (shape e) (S4 co (* cg cnt) kh kw))"]))
    rules.append(_rule("shape_Enlarge", ["(= e (Enlarge w r))", "(= (S4 a b kh kw) (shape w))",
                                         "(= (S4 c d rh rw) (shape r))", "(<= kh rh)", "(<= kw rw)",
                                         "(= 0 (% (- rh kh) 2))", "(= 0 (% (- rw kw) 2))"],
                       ["(set (shape e) (S4 a b rh rw))"]))
    rules.append(_rule("shape_BatchNorm", ["(= e (BatchNorm eps x s b m v))", "(= (S4 n c h w) (shape x))",
                                           "(= (S1 c) (shape s))", "(= (S1 c) (shape b))", "(= (S1 c) (shape m))",
                                           "(= (S1 c) (shape v))"], ["(set (shape e) (S4 n c h w))"]))
    rules.append(_rule("shape_BnScale", ["(= e (BnScale eps s v))", "(= (S1 c) (shape s))", "(= (S1 c) (shape v))"],
                       ["(set (shape e) (S1 c))"]))
    rules.append(_rule("shape_BnShift", ["(= e (BnShift eps b m s v))", "(= (S1 c) (shape b))", "(= (S1 c) (shape m))",
                                         "(= (S1 c) (shape s))", "(= (S1 c) (shape v))"], ["(set (shape e) (S1 c))"]))
    return rules


def _allw_rules() -> list[str]:
    rules = []
    for ctor, (op, kinds) in CONSTRUCTORS.items():
        if op in ("input", "weight", "opaque") or "l" in kinds:
            continue
        args = [f"a{i}" for i in range(len(kinds))]
        tensors = [a for a, k in zip(args, kinds) if k == "t"]
        rules.append(_rule(f"allw_{ctor}", [f"(= e ({ctor} {' '.join(args)}))", *[f"(AllW {t})" for t in tensors]],
                           ["(AllW e)"]))
    return rules


def program() -> list[str]:
    """The schema as a list of top-level egglog forms (parse them one at a time: parsing is quadratic)."""
    shape_ctors = " ".join(f"({_shape_ctor(r)}{' i64' * r})" for r in range(MAX_RANK + 1))
    forms = [
        f"(datatype Shape {shape_ctors} (SN String))",
        "(sort TList)",
        "(sort T)",
        "(constructor TNil () TList)",
        "(constructor TCons (T TList) TList)",
    ]
    for ctor, (_op, kinds) in CONSTRUCTORS.items():
        forms.append(f"(constructor {ctor} ({' '.join(_SORT[k] for k in kinds)}) T)")
    forms += [
        "(function shape (T) Shape :merge old)",
        "(function node (String) T :merge old)",
        "(relation AllW (T))",
        "(relation Pend (T T))",
        "(ruleset analysis)",
        "(ruleset commit)",
        "(ruleset probe)",
    ]
    forms += _shape_rules() + _allw_rules()
    forms.append(_rule("commit", ["(Pend a b)", "(= s (shape a))", "(= s (shape b))"], ["(union a b)"], "commit"))
    return forms
