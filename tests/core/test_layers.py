"""The layers of the code base, checked on the source: no import cycle between packages, every import
pointing down, and no egglog below the e-graph wrapper.

The import graph is read with ``ast`` from every module of every package (the folders come from
pyproject.toml's package-dir: ``rules/`` is ``eqsat.rules`` and so on), and it holds ALL imports, those
inside functions and under ``if TYPE_CHECKING`` included: an import deferred into a function hides a
cycle from Python, not from the design.

The floors, from the bottom (the root folder ``eqsat/`` holds modules of several floors: :data:`ROOT_FLOORS` puts
each on its own by name, and a test checks that none is left out):

* ``eqsat.errors``: the basement, the exception hierarchy every layer raises; it imports nothing of eqsat.
  (It is a floor of its own here, though one module, so that the operator table may raise ShapeError without a
  cycle.)
* ``eqsat.ops``: the operator table.
* ``eqsat.core`` (no package of that name: root modules): the IR and what it is made of, and the plain data and
  tools every floor above may use: ``ir``, ``dims``, ``shapes``, ``evaluate`` (the IR's numpy semantics),
  ``snapshot`` (the e-graph as plain data), ``memory``, ``progress``. Importing ``eqsat`` (the facade) counts as
  importing this floor: Python imports the facade anyway as the parent of every ``eqsat.*`` module, and its
  top-level imports stay here (checked).
* ``eqsat.egglog`` (schema, codec, runtime wrapper) and ``eqsat.onnx`` (ONNX <-> IR), side by side on
  ``eqsat.core``, neither importing the other: the ONNX layer is imported by the floors that must never load
  egglog (the cost models, measurement, the shape-generic writer).
* ``eqsat`` (the root modules over the ONNX layer): ``decode`` (e-graph -> IR, carrying the ONNX origins over) and
  ``blocks`` (repeated blocks of a program); on ``eqsat.onnx`` and below, no egglog. Beside them, on the same
  ground and importing neither, ``eqsat.verification`` (feeds, and two programs checked against each other in
  onnxruntime).
* ``eqsat.generic``: the shape-generic writer, on the ONNX layer and below, no egglog. The ONNX layer never
  imports it, even deferred: a generic import's rewrite (the writer's forms) is passed down as an argument
  (``import_model(simplify=...)``, :func:`eqsat.generic.import_generic`).
* ``eqsat.measurement``: timing end to end, the shipping gate and the ship decision, on the root folder's floors
  but egglog.
* ``eqsat.rules`` and ``eqsat.models``: each on the root folder's floors only (:data:`GROUND`);
  ``eqsat.extract`` and ``eqsat.cost`` the same but egglog (extract and cost share the e-graph data through
  ``eqsat.snapshot``); ``eqsat.cost`` times operators with ``eqsat.measurement``'s clocks and session settings.
* ``eqsat.mcts``: rules, extract and cost, and the root folder's floors.
* ``eqsat.app``: the pipeline, config, report and CLI, on top of everything.

``eqsat/__init__.py`` is the public facade and is exempt as an importer: its one upward import
(``eqsat.app``, deferred to the first use of ``eqsat.optimize``) is what a facade is for, and its
top-level imports stay on ``eqsat.core`` and ``eqsat.errors``. ``eqsat/__main__.py`` (``python -m eqsat``) must
live in the root folder but is the CLI's entry point: it counts as part of ``eqsat.app``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from paths import REPO

FACADE = "eqsat"
ENTRY = "eqsat.__main__"
"""``python -m eqsat``: the CLI's entry point, on the top floor wherever Python wants its file"""
CORE = "eqsat.core"
"""the floor of the root modules the IR is made of (no package of that name)"""
ROOT = "eqsat"
"""the floor of the root modules over the ONNX layer"""
ROOT_FLOORS: dict[str, str] = {
    "eqsat.errors": "eqsat.errors",
    **{f"eqsat.{m}": CORE for m in ("ir", "dims", "shapes", "evaluate", "snapshot", "memory", "progress")},
    **{f"eqsat.{m}": ROOT for m in ("decode", "blocks")},
}
"""module of the root folder -> its floor (the facade and the CLI's entry point apart: see the docstring)"""
BOTTOM = {CORE, "eqsat.ops", "eqsat.errors"}
NO_EGGLOG_GROUND = BOTTOM | {"eqsat.onnx", ROOT, "eqsat.verification"}
"""the floors of the root folder, egglog's apart"""
GROUND = NO_EGGLOG_GROUND | {"eqsat.egglog"}
"""the floors of the root folder"""
ALLOWED: dict[str, set[str]] = {
    "eqsat.errors": set(),
    "eqsat.ops": {"eqsat.errors"},
    CORE: {"eqsat.ops", "eqsat.errors"},
    "eqsat.egglog": BOTTOM,
    "eqsat.onnx": BOTTOM,
    ROOT: BOTTOM | {"eqsat.onnx"},
    "eqsat.verification": BOTTOM | {"eqsat.onnx"},
    "eqsat.generic": NO_EGGLOG_GROUND,
    "eqsat.measurement": NO_EGGLOG_GROUND,
    "eqsat.rules": GROUND,
    "eqsat.extract": NO_EGGLOG_GROUND,
    "eqsat.cost": NO_EGGLOG_GROUND | {"eqsat.measurement"},
    "eqsat.models": GROUND,
    "eqsat.mcts": GROUND | {"eqsat.rules", "eqsat.extract", "eqsat.cost", "eqsat.measurement"},
    "eqsat.app": GROUND | {"eqsat.generic", "eqsat.measurement", "eqsat.rules", "eqsat.extract", "eqsat.cost",
                           "eqsat.models", "eqsat.mcts"},
}
"""floor -> the other floors it may import"""
SUBPACKAGES = ("eqsat.app", "eqsat.ops", "eqsat.rules", "eqsat.extract", "eqsat.mcts", "eqsat.cost", "eqsat.models",
               "eqsat.generic", "eqsat.measurement", "eqsat.onnx", "eqsat.egglog", "eqsat.verification")
NO_EGGLOG = (CORE, "eqsat.onnx", ROOT, "eqsat.verification", "eqsat.generic", "eqsat.measurement", "eqsat.extract",
             "eqsat.cost")
"""the floors that never import the egglog library (those of :data:`NO_EGGLOG_GROUND` and the ones on them alone)"""


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    """the imported module (or, for a name imported from a module, that module)"""
    where: str
    """file:line and the statement, for messages"""


def package_dirs(root: Path = REPO) -> dict[str, Path]:
    """Top-level import name -> folder, from pyproject.toml's [tool.setuptools] package-dir."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    return {name: root / folder for name, folder in config["tool"]["setuptools"]["package-dir"].items()}


def modules(dirs: dict[str, Path]) -> dict[str, Path]:
    """Module name -> source file, for every .py file under the package folders."""
    out: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            if not all(p.isidentifier() for p in rel):  # __pycache__ holds no .py; skip odd names
                continue
            name = ".".join((package, *rel))
            if name in out and out[name] != path:  # a folder nested in another package's folder: the nearer wins
                continue
            out[name] = path
    return out


def imports(name: str, path: Path, known: set[str], root: Path = REPO) -> list[Import]:
    """Every import statement of one module (anywhere in it), resolved to module names."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}: {ast.unparse(node)}" if targets else ""
        out.extend(Import(name, t, where) for t in dict.fromkeys(targets))
    return out


def package_of(module: str) -> str:
    """The floor of a module (or of the module a name is imported from)."""
    if module == ENTRY:
        return "eqsat.app"
    if module == FACADE:
        return CORE
    if module in ROOT_FLOORS:
        return ROOT_FLOORS[module]
    for package in SUBPACKAGES:
        if module == package or module.startswith(package + "."):
            return package
    return ROOT  # a root module not in ROOT_FLOORS (test_every_root_module_is_on_a_floor fails on it)


def package_edges(root: Path = REPO) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the importing lines, for imports between eqsat packages."""
    mods = modules(package_dirs(root))
    known = set(mods)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, path in mods.items():
        if name == FACADE:
            continue
        for imp in imports(name, path, known, root):
            if imp.target.split(".")[0] != "eqsat":
                continue
            a, b = package_of(imp.importer), package_of(imp.target)
            if a != b:
                edges[(a, b)].append(imp.where)
    return dict(edges)


def find_cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """One cycle (a list of packages, first == last) through each strongly connected component of the graph."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan (the package graph is small: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(set(graph) | {b for _, b in edges}):
        if v not in index:
            connect(v)
    cycles = []
    for component in components:
        start = min(component)
        paths = {start: [start]}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:  # breadth first: the shortest way back to start
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & component):
                    if w == start:
                        cycle = paths[v] + [start]
                        break
                    if w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                if cycle:
                    break
            frontier = nxt
        cycles.append(cycle or [start, start])
    return cycles


def describe(path: list[str], edges: dict[tuple[str, str], list[str]]) -> str:
    lines = [" -> ".join(path)]
    for a, b in zip(path, path[1:]):
        lines.append(f"  {a} -> {b}:")
        lines.extend(f"    {w}" for w in edges[(a, b)][:5])
        if len(edges[(a, b)]) > 5:
            lines.append(f"    ... and {len(edges[(a, b)]) - 5} more")
    return "\n".join(lines)


def test_no_import_cycle_between_packages():
    edges = package_edges()
    cycles = find_cycles(edges)
    assert not cycles, "import cycles between packages:\n" + "\n".join(describe(c, edges) for c in cycles)


def test_every_import_points_down_the_layers():
    edges = package_edges()
    bad = sorted((a, b) for a, b in edges if b not in ALLOWED.get(a, set()))
    assert not bad, "imports against the layering (see tests/core/test_layers.py's docstring):\n" + "\n".join(
        describe([a, b], edges) for a, b in bad)


def test_the_onnx_layer_never_loads_the_shape_generic_writer():
    """The ONNX layer imports nothing of the writer above it, not even inside a function (the generic import's
    rewrite is an argument), and importing it loads none of the writer."""
    assert ("eqsat.onnx", "eqsat.generic") not in package_edges()
    out = subprocess.run([sys.executable, "-c", "import sys, eqsat.onnx; print('eqsat.generic' in sys.modules)"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False", "importing eqsat.onnx imported the shape-generic writer"


def test_every_root_module_is_on_a_floor():
    """Each module of the root folder has its floor in :data:`ROOT_FLOORS` (but the facade and the CLI's entry
    point), and the facade's top-level imports stay on the floors it counts as (see the docstring)."""
    dirs = package_dirs()
    mods = modules(dirs)
    root = [name for name, path in mods.items() if path.parent == dirs[FACADE] and path.name != "__init__.py"]
    missing = sorted(set(root) - set(ROOT_FLOORS) - {ENTRY})
    assert not missing, f"put each in ROOT_FLOORS (tests/core/test_layers.py): {missing}"
    assert not set(ROOT_FLOORS) - set(root), "ROOT_FLOORS names a module the root folder no longer has"
    tree = ast.parse(mods[FACADE].read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    found = [imp for imp in imports(FACADE, mods[FACADE], set(mods)) if imp.target.split(".")[0] == "eqsat"
             and int(imp.where.split(":")[1]) in {node.lineno for node in top}]
    assert found and all(package_of(imp.target) in {CORE, "eqsat.errors"} for imp in found), [i.where for i in found]


def test_extractors_and_cost_models_never_import_egglog():
    mods = modules(package_dirs())
    known = set(mods)
    found = [imp.where for name, path in mods.items() if package_of(name) in NO_EGGLOG
             for imp in imports(name, path, known) if imp.target.split(".")[0] == "egglog"]
    assert not found, "egglog imported on a floor of NO_EGGLOG (an extractor, a cost model, ...):\n" + "\n".join(found)
    code = ("import sys, eqsat.extract, eqsat.cost, eqsat.extract.ilp, eqsat.cost.measure, eqsat.snapshot; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'egglog'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", f"importing the extractors and cost models loaded {out.stdout.strip()}"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_tree(root: Path, files: dict[str, str]) -> None:
    """A small source tree under ``root``: relative path -> text."""
    for rel, text in files.items():
        write(root / rel, text)


def test_checker_finds_a_cycle_hidden_in_a_function_through_mapped_folders(tmp_path):
    """The checker itself: a cycle eqsat.rules -> eqsat.extract -> eqsat.rules where one import is relative,
    one sits inside a function, and the folders are mapped by package-dir like the real project."""
    write_tree(tmp_path, {
        "pyproject.toml": '[tool.setuptools]\npackage-dir = { "eqsat" = "eqsat", "eqsat.rules" = "rules", '
                          '"eqsat.extract" = "extract" }\n',
        "eqsat/__init__.py": "import eqsat.app\n",  # the facade: exempt
        "eqsat/ir.py": "from . import errors\n",
        "eqsat/errors.py": "",
        "rules/__init__.py": "",
        "rules/engine.py": "from eqsat import ir\nfrom .sub import x\n",
        "rules/sub.py": "def f():\n    from eqsat.extract.base import g\n",
        "extract/__init__.py": "",
        "extract/base.py": "from eqsat.rules import engine\n",
    })
    edges = package_edges(tmp_path)
    assert set(edges) == {("eqsat.rules", CORE), ("eqsat.rules", "eqsat.extract"), ("eqsat.extract", "eqsat.rules"),
                          (CORE, "eqsat.errors")}
    assert edges[("eqsat.rules", "eqsat.extract")] == ["rules/sub.py:2: from eqsat.extract.base import g"]
    cycles = find_cycles(edges)
    assert cycles == [["eqsat.extract", "eqsat.rules", "eqsat.extract"]]
    message = describe(cycles[0], edges)
    assert "extract/base.py:1: from eqsat.rules import engine" in message and "rules/sub.py:2" in message


def test_checker_puts_the_root_modules_on_their_floors(tmp_path):
    """The checker itself: in the root folder, the IR reading a check (inside a function) is an import up, from
    eqsat.core to the floor over the ONNX layer, and closes a cycle with the check's import of the IR; the ONNX
    layer importing egglog is one sideways."""
    write_tree(tmp_path, {
        "pyproject.toml": '[tool.setuptools]\npackage-dir = { "eqsat" = "eqsat" }\n',
        "eqsat/__init__.py": "from .ir import Graph\n",
        "eqsat/ir.py": "def f():\n    from .decode import check\n",
        "eqsat/decode.py": "from eqsat.ir import Graph\nfrom .onnx.io import session\n",
        "eqsat/onnx/__init__.py": "",
        "eqsat/onnx/io.py": "from ..egglog import EGraph\n",
        "eqsat/egglog/__init__.py": "from eqsat import Graph\n",
    })
    edges = package_edges(tmp_path)
    assert set(edges) == {(CORE, ROOT), (ROOT, CORE), (ROOT, "eqsat.onnx"), ("eqsat.onnx", "eqsat.egglog"),
                          ("eqsat.egglog", CORE)}
    assert edges[(CORE, ROOT)] == ["eqsat/ir.py:2: from .decode import check"]
    assert find_cycles(edges) == [[ROOT, CORE, ROOT]]
    assert sorted((a, b) for a, b in edges if b not in ALLOWED[a]) == [(CORE, ROOT), ("eqsat.onnx", "eqsat.egglog")]


def module_edges(package: str, root: Path = REPO) -> dict[tuple[str, str], list[str]]:
    """(importing module, imported module) -> the importing lines, between the modules of one subpackage or floor
    of the root folder (its ``__init__``, the facade that re-exports them, exempt as an importer)."""
    mods = modules(package_dirs(root))
    known = set(mods)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, path in mods.items():
        if name in (package, FACADE) or package_of(name) != package:
            continue
        for imp in imports(name, path, known, root):
            if (imp.target in known and imp.target not in (package, name, FACADE)
                    and package_of(imp.target) == package):
                edges[(name, imp.target)].append(imp.where)
    return dict(edges)


def test_no_import_cycle_between_the_modules_of_a_subpackage():
    """Inside a subpackage or a floor of the root folder too (eqsat.mcts's search and parallel once imported each
    other, one side inside a function): each module depends on the ones below it."""
    found = []
    for package in (*SUBPACKAGES, CORE, ROOT):
        edges = module_edges(package)
        found += [describe(c, edges) for c in find_cycles(edges)]
    assert not found, "import cycles between modules:\n" + "\n".join(found)


def test_checker_finds_a_module_cycle_hidden_in_a_function(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.setuptools]\npackage-dir = { "eqsat" = "eqsat", "eqsat.mcts" = "mcts" }\n')
    write(tmp_path / "eqsat/__init__.py", "")
    write(tmp_path / "mcts/__init__.py", "from .search import run\nfrom .parallel import Forest\n")
    write(tmp_path / "mcts/search.py", "def run():\n    from .parallel import Forest\n")
    write(tmp_path / "mcts/parallel.py", "from .search import run\n")
    edges = module_edges("eqsat.mcts", tmp_path)
    assert set(edges) == {("eqsat.mcts.search", "eqsat.mcts.parallel"), ("eqsat.mcts.parallel", "eqsat.mcts.search")}
    assert find_cycles(edges) == [["eqsat.mcts.parallel", "eqsat.mcts.search", "eqsat.mcts.parallel"]]
