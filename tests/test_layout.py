"""The code's layout rules (docs/architecture.md), checked on the source:

- modules listed as pure import no I/O module, directly or through any of our modules
  they import (at module level or inside a function);
- no import cycles between our modules;
- no module ``__getattr__`` (no name forwarding between modules);
- nothing imports the folder names (``exporter``, ``forecaster``, ``demo``…) as
  top-level packages: the installed names are ``gpu_eta.<folder>``;
- every folder of ``.py`` files under a distribution's package folders is in its
  pyproject's hand-written ``packages`` list, so it reaches the wheel and the images.

Static (the ``ast`` of each file), so it sees imports hidden in functions too and needs
no extra installed. Third-party packages are not followed: ``prometheus_client``'s own
imports are its business; importing it for its metric types does not make a module do I/O.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]

# Parsing, maths, types and rendering: no network, no database, no processes.
PURE = (
    "gpu_eta.common.durations",
    "gpu_eta.common.gpu_resources",
    "gpu_eta.common.gpu_use",
    "gpu_eta.common.k8s_names",
    "gpu_eta.common.listen",
    "gpu_eta.common.retry_after",
    "gpu_eta.common.text",
    "gpu_eta.common.versioned_json",
    "gpu_eta.exporter.readings",
    "gpu_eta.exporter.snapshot",
    "gpu_eta.exporter.config",
    "gpu_eta.exporter.logformats",
    "gpu_eta.exporter.attribution",
    "gpu_eta.exporter.exposition",
    "gpu_eta.exporter.progress",
    "gpu_eta.exporter.progress_runs",
    "gpu_eta.exporter.scenario",
    "gpu_eta.forecaster.errors",
    "gpu_eta.forecaster.runs",
    "gpu_eta.forecaster.history_rows",
    "gpu_eta.forecaster.promparse",
    "gpu_eta.forecaster.series",
    "gpu_eta.forecaster.forecast",
    "gpu_eta.forecaster.config",
    "gpu_eta.forecaster.queries",
    "gpu_eta.forecaster.queue_replay",
    "gpu_eta.forecaster.kube_state",
    "gpu_eta.forecaster.set_match",
    "gpu_eta.forecaster.pending",
    "gpu_eta.forecaster.planless",
    "gpu_eta.forecaster.methods",
    "gpu_eta.forecaster.runs_from_series",
    "gpu_eta.forecaster.static_series",
    "gpu_eta.forecaster.scrape_gap",
    "gpu_eta.forecaster.request_headers",
    "gpu_eta.forecaster.finished_present",
    "gpu_eta.forecaster.publish",
    "gpu_eta.forecaster.calibration",
    "gpu_eta.forecaster.estimators",
    "gpu_eta.forecaster.estimators.analog",
    "gpu_eta.forecaster.estimators.as_of",
    "gpu_eta.forecaster.estimators.base",
    "gpu_eta.forecaster.estimators.campaign",
    "gpu_eta.forecaster.estimators.baselines",
    "gpu_eta.forecaster.estimators.blend",
    "gpu_eta.forecaster.estimators.choice",
    "gpu_eta.forecaster.estimators.eta_model",
    "gpu_eta.forecaster.estimators.job_calibration",
    "gpu_eta.forecaster.estimators.pooled",
    "gpu_eta.forecaster.estimators.prior",
    "gpu_eta.forecaster.estimators.rate",
    "gpu_eta.forecaster.estimators.replay",
    "gpu_eta.forecaster.estimators.selfcheck",
    "gpu_eta.forecaster.estimators.tuning",
    "gpu_eta.top.queries",
    "gpu_eta.top.view",
    "gpu_eta.top.render",
    "gpu_eta.simulation.epochs",
    "gpu_eta.simulation.ksm",
)
# What a pure module must not reach (the first dotted part is enough for packages).
IO_MODULES = frozenset(
    {
        "sqlite3",
        "requests",
        "urllib3",
        "socket",
        "socketserver",
        "ssl",
        "asyncio",
        "selectors",
        "subprocess",
        "multiprocessing",
        "http.server",
        "http.client",
        "urllib.request",
        "grpc",
        "kubernetes",
        "pynvml",
    }
)
OLD_TOP_LEVEL = frozenset(
    {"exporter", "forecaster", "demo", "top", "simulation", "launch", "common", "report"}
)


def modules() -> dict[str, Path]:
    """Every module of the gpu_eta distributions, by import name, from pyproject's
    package-dir mapping (the same mapping the wheel is built from)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = project["tool"]["setuptools"]["package-dir"]
    found: dict[str, Path] = {}
    for package, folder in mapping.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    report = ROOT / "report" / "gpu_eta_report"
    for path in sorted(report.rglob("*.py")):
        rel = path.relative_to(report).with_suffix("")
        found[".".join(["gpu_eta_report", *[p for p in rel.parts if p != "__init__"]])] = path
    return found


MODULES = modules()


def _imports(name: str, tree: ast.AST, *, module_level_only: bool) -> Iterator[str]:
    """Absolute names ``name``'s file imports (``from a import b`` yields ``a`` and
    ``a.b``: b may be a module). ``TYPE_CHECKING`` blocks are skipped."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    nodes = _module_level(tree) if module_level_only else _all_nodes(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            yield base
            for alias in node.names:
                yield f"{base}.{alias.name}"


def _module_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """Statements run at import (into if/try bodies), minus ``if TYPE_CHECKING:``."""
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "TYPE_CHECKING" not in test:
                stack.extend(node.body)
            stack.extend(node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                stack.extend(handler.body)
        else:
            yield node


def _all_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, into functions too, minus ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


TREES = _trees()


def _ours(imported: str) -> str | None:
    """The module of ours ``imported`` names (``a.b.C`` → ``a.b``), or None."""
    while imported:
        if imported in MODULES:
            return imported
        imported = imported.rpartition(".")[0]
    return None


@functools.cache
def _imported(name: str, *, module_level_only: bool) -> tuple[str, ...]:
    """``_imports`` of ``name``'s file, walked once per run: each pure module's check
    reads the imports of every module it reaches, most of them the same modules, and
    walking a tree (each ``if`` unparsed) is most of what a check costs."""
    return tuple(_imports(name, TREES[name], module_level_only=module_level_only))


@functools.cache
def _graph(module_level_only: bool) -> Mapping[str, frozenset[str]]:
    """Each of our modules' imports of our modules. Built once per run (``TREES`` does
    not change during it) and shared by every check: all of ``PURE`` (one test each)
    and the cycles read the same graph, ~0.5 s of CPU to build. Frozen sets: no check
    can change the graph another reads."""
    graph: dict[str, frozenset[str]] = {}
    for name in TREES:
        edges = set()
        for imported in _imported(name, module_level_only=module_level_only):
            target = _ours(imported)
            if target and target != name and not name.startswith(target + "."):
                edges.add(target)  # a package's own __init__ is no cycle
        graph[name] = frozenset(edges)
    return graph


def _io_reached(start: str) -> dict[str, list[str]]:
    """I/O modules reachable from ``start`` (any import, any depth), each with the path."""
    graph = _graph(module_level_only=False)
    seen, found = {start: [start]}, {}
    stack = [start]
    while stack:
        name = stack.pop()
        for imported in _imported(name, module_level_only=False):
            for io in IO_MODULES:
                if imported == io or imported.startswith(io + "."):
                    found.setdefault(io, [*seen[name], imported])
        for nxt in graph[name]:
            if nxt not in seen:
                seen[nxt] = [*seen[name], nxt]
                stack.append(nxt)
    return found


def test_the_pure_list_names_existing_modules() -> None:
    assert set(PURE) <= set(MODULES), set(PURE) - set(MODULES)


@pytest.mark.parametrize("name", PURE)
def test_pure_modules_reach_no_io_module(name: str) -> None:
    reached = _io_reached(name)
    assert not reached, "\n".join(" → ".join(path) for path in reached.values())


def test_the_io_check_sees_a_transitive_import() -> None:
    """The check itself: the forecaster's cycle reaches sqlite3 through the history store."""
    assert _io_reached("gpu_eta.forecaster.cycle")["sqlite3"][:3] == [
        "gpu_eta.forecaster.cycle",
        "gpu_eta.forecaster.history",
        "sqlite3",
    ]


def _cycles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return groups


def test_no_import_cycles() -> None:
    """Counting imports inside functions too: a lazy import is still a dependency."""
    assert _cycles(_graph(module_level_only=False)) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_getattr() -> None:
    forwarding = [
        name
        for name, tree in TREES.items()
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
    ]
    assert forwarding == []


def test_nothing_imports_the_folder_names() -> None:
    """``import exporter`` would find the repository folder from a checkout and nothing
    once installed: every import is ``gpu_eta.<folder>`` (or ``gpu_eta_report``)."""
    trees = {str(MODULES[name].relative_to(ROOT)): tree for name, tree in TREES.items()}
    for folder in ("tests", "bench", "rules"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            trees[rel] = ast.parse(path.read_text(), rel)
    bad = []
    for rel, tree in sorted(trees.items()):
        for node in _statements(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            bad += [f"{rel}: {n}" for n in names if n.split(".")[0] in OLD_TOP_LEVEL]
    assert bad == []


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` but expressions and what is inside them: an import is a
    statement, and no expression holds a statement (a lambda's body is an expression),
    so every import is among these. Why not ``ast.walk``: expressions are most of a
    file's nodes, and walking them costs as much as parsing the tests."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(
            child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr)
        )


def unlisted_packages(root: Path) -> list[str]:
    """Import packages under ``root`` that its ``pyproject.toml`` leaves out of its
    hand-written ``packages`` list: every folder holding ``.py`` files below a
    ``package-dir`` folder (or below a listed top-level package without one).

    Why: setuptools builds exactly that list; a sub-package left out is missing from
    the wheel and the images while an editable install and the suite, which read the
    checkout, stay green."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    mapping = setuptools.get("package-dir") or {name: name for name in listed if "." not in name}
    missing = set()
    for package, folder in mapping.items():
        for path in (root / folder).rglob("*.py"):
            rel = path.parent.relative_to(root / folder)
            name = ".".join([package, *rel.parts])
            if name not in listed:
                missing.add(name)
    return sorted(missing)


@pytest.mark.parametrize("project", [".", "report"])
def test_every_package_is_in_the_wheel(project: str) -> None:
    missing = unlisted_packages(ROOT / project)
    assert missing == [], (
        f"{Path(project, 'pyproject.toml')} [tool.setuptools] packages leaves out {missing}: "
        "they would be missing from the wheel and the images"
    )


def test_an_unlisted_sub_package_is_found(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "gpu_eta.forecaster" = "forecaster" }\n'
        'packages = ["gpu_eta.forecaster", "gpu_eta.forecaster.estimators"]\n'
    )
    for folder in ("forecaster", "forecaster/estimators", "forecaster/estimators/extra"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "forecaster" / "data").mkdir()  # no .py: not a package
    (tmp_path / "forecaster" / "data" / "x.yaml").write_text("")
    assert unlisted_packages(tmp_path) == ["gpu_eta.forecaster.estimators.extra"]


def test_every_file_listed_as_slow_exists() -> None:
    """tests/conftest.py hands the slow files out first; a file renamed or split away
    would leave its name there doing nothing (the suite's time, never its results)."""
    from tests.conftest import SLOW_FILES

    assert [name for name in SLOW_FILES if not (ROOT / name).is_file()] == []


def test_every_test_listed_as_spread_exists() -> None:
    """tests/conftest.py hands out each case of a ``SPREAD_TESTS`` test on its own; a
    test renamed or moved would leave its prefix matching nothing, and its cases back in
    one worker, one after another (the suite's time, never its results)."""
    from tests.conftest import SPREAD_TESTS

    def names_a_test(prefix: str) -> bool:
        path, _, name = prefix.removesuffix("[").partition("::")
        file = ROOT / path
        return prefix.endswith("[") and file.is_file() and f"\ndef {name}(" in file.read_text()

    assert [prefix for prefix in SPREAD_TESTS if not names_a_test(prefix)] == []
