"""No module of the project over MAX_LINES lines (the house rule: a module small enough to read, named for what it
holds): every Python file of the repository, the tests and scripts included; folders whose name starts with a dot
(a virtual environment, git's), build outputs and installed packages are not the project's."""

from __future__ import annotations

from paths import REPO

MAX_LINES = 600


NOT_OURS = {"build", "dist", "__pycache__", "site-packages", "node_modules"}


def project_python_files() -> list[str]:
    return sorted(str(p.relative_to(REPO)) for p in REPO.rglob("*.py")
                  if not any(part.startswith(".") or part in NOT_OURS or part.endswith(".egg-info")
                             for part in p.relative_to(REPO).parts[:-1]))


def test_no_module_is_longer_than_the_limit():
    files = project_python_files()
    assert len(files) > 100 and "eqsat/app/pipeline.py" in files  # the list is the project's
    long = {f: n for f in files if (n := len((REPO / f).read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by what they hold): {long}"
