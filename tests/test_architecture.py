"""The house's boundaries, read from the code's imports (every import, function-level ones included, and the edges
of the packages' __init__ files): no import circle among the project's modules, the layers imported downward only,
the rubric's wings (reading < likeness < rules < engine < offline) too, the rubric engine and the bisection harness
free of Django, and PyGithub behind rubric_app/github/client.py alone."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rubric_app", "triage_site")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    }


def imported(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(module, line) for each import of `name` (the module at `path`), resolved to the project's modules and to
    top-level names outside it ("django", "github", "torch")."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from rubric_app import github`: a submodule when one has that name, else a name of the package.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules and "." in target:
                target = target.rpartition(".")[0]
            found.append((target if target in modules else target.split(".")[0], node.lineno))
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line}, package `__init__` edges counted: a package's `__init__` importing its own
    submodules, and each import reaching the packages above its target (importing `rubric_app.rubric.reading.text`
    runs `rubric_app.rubric`'s and `rubric_app.rubric.reading`'s `__init__` first). Only the packages a module sits in
    itself are left out: Python runs them before the module whoever imports it."""
    modules = project_modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for target, line in imported(name, path, modules):
            if target not in modules:
                continue
            for reached in (*packages_above(target, modules), target):
                if reached != name and not name.startswith(reached + "."):
                    edges.setdefault(reached, line)
    return graph


def packages_above(name: str, modules: dict[str, Path]) -> list[str]:
    """The project's packages that hold `name`, outermost first: their `__init__` runs when `name` is imported."""
    parts = name.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in modules]


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_it_has_no_import_circle_among_the_projects_modules():
    graph = import_graph()
    found = circles(graph)
    described = [
        " -> ".join(f"{a} (line {graph[a][b]} imports {b})" for a in members for b in graph[a] if b in members)
        for members in found
    ]
    assert not found, "import circles:\n" + "\n".join(described)


def test_it_finds_a_circle_when_there_is_one():
    assert circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert circles({"a": {"b": 1}, "b": {}}) == []


def test_it_counts_the_edges_of_a_packages_init(tmp_path, monkeypatch):
    # The positive control: the circle issue 50 found, which only a function-level import kept from breaking:
    # vocabulary.py importing rubric/catalog.py runs rubric/__init__.py, which loaded the engine, which imports
    # vocabulary.py. Seen only when the __init__'s own edges and the edge to the package above the target count.
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    for path, text in {
        "rubric_app/__init__.py": "",
        "rubric_app/vocabulary.py": "def allowed():\n    from rubric_app.rubric.catalog import names\n",
        "rubric_app/rubric/__init__.py": "from .engine import evaluate\n",
        "rubric_app/rubric/catalog.py": "",
        "rubric_app/rubric/engine.py": "from rubric_app.vocabulary import Kind\n",
        "triage_site/__init__.py": "",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    graph = import_graph()
    assert graph["rubric_app.vocabulary"] == {"rubric_app.rubric": 2, "rubric_app.rubric.catalog": 2}
    assert graph["rubric_app.rubric"] == {"rubric_app.rubric.engine": 1}
    assert circles(graph) == [["rubric_app.rubric", "rubric_app.rubric.engine", "rubric_app.vocabulary"]]
    # The package a module sits in is no edge of its own: Python runs it first whoever imports the module.
    assert "rubric_app.rubric" not in graph["rubric_app.rubric.engine"]


PURE = ("rubric_app.rubric", "rubric_app.bisection", "rubric_app.vocabulary")

# Bottom to top; a module may import its own layer and the ones below it, never one above.
LAYERS = (
    ("pure Python", PURE),
    (
        "data",
        (
            "rubric_app.models",
            "rubric_app.bookkeeping",
            "rubric_app.lanes",
            "rubric_app.roles",
            "rubric_app.search",
            "rubric_app.search_index",
            "rubric_app.dispatch",
            "rubric_app.processes",
        ),
    ),
    # The workflows, ordered: github/ only talks to GitHub (it tells its callers which issues changed); runs/ records
    # and runs bisections; triage/ is a triager's work and what follows a change of issues (followups.py), starting
    # runs; tasks.py, on top, wires them to Celery.
    ("github, the adapter", ("rubric_app.github",)),
    ("runs", ("rubric_app.runs",)),
    ("triage", ("rubric_app.triage", "rubric_app.demo")),
    ("tasks", ("rubric_app.tasks",)),
    (
        "web and entry points",
        (
            "rubric_app.web",
            "rubric_app.urls",
            "rubric_app.admin",
            "rubric_app.apps",
            "rubric_app.management",
            "triage_site",
        ),
    ),
)


def layer_of(module: str) -> int | None:
    for level, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return level
    return None


def test_it_keeps_the_rubric_engine_and_the_bisection_harness_free_of_django():
    modules = project_modules()
    offenders = [
        f"{name}:{line}"
        for name, path in modules.items()
        if layer_of(name) == 0
        for target, line in imported(name, path, modules)
        if target == "django" or (target in modules and layer_of(target) != 0)
    ]
    assert not offenders, f"pure Python packages importing Django or the app: {offenders}"


def test_it_places_every_module_of_the_app_in_a_layer():
    unplaced = [
        name
        for name in project_modules()
        if name not in ("rubric_app", "rubric_app.migrations") and layer_of(name) is None
    ]
    assert not unplaced, f"modules in no layer (add them to LAYERS and docs/architecture.md): {unplaced}"


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    """Each import (from the graph: module -> {imported module: line}) that points up the layers."""
    return pointing_up(graph, layer_of, [name for name, _ in LAYERS])


def pointing_up(graph: dict[str, dict[str, int]], level_of, names: list[str]) -> list[str]:
    """Each edge of the graph from a module at one level (level_of: its index in names, or None) to one above it."""
    return [
        f"{name}:{line} ({names[level_of(name)]}) imports {target} ({names[level_of(target)]})"
        for name, edges in graph.items()
        if level_of(name) is not None
        for target, line in edges.items()
        if level_of(target) is not None and level_of(target) > level_of(name)
    ]


def test_it_never_imports_upward_across_the_layers():
    upward = upward_imports(import_graph())
    assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def test_it_finds_an_upward_import_between_the_workflows_when_there_is_one():
    # The positive control: github/ calling triage/ (what sync.py did before issue 42), runs/ calling triage/, and a
    # workflow importing tasks.py are each caught; the imports the layers allow are not.
    graph = {
        "rubric_app.github.sync": {"rubric_app.triage.suggestions": 35, "rubric_app.models": 34},
        "rubric_app.runs.coordinator": {"rubric_app.triage.suggestions": 24, "rubric_app.github.data": 3},
        "rubric_app.triage.decisions": {"rubric_app.tasks": 27, "rubric_app.runs.coordinator": 5},
        "rubric_app.tasks": {"rubric_app.triage.followups": 14},
    }
    assert upward_imports(graph) == [
        "rubric_app.github.sync:35 (github, the adapter) imports rubric_app.triage.suggestions (triage)",
        "rubric_app.runs.coordinator:24 (runs) imports rubric_app.triage.suggestions (triage)",
        "rubric_app.triage.decisions:27 (triage) imports rubric_app.tasks (tasks)",
    ]


# The rubric's wings, bottom to top; a module of the rubric imports its own wing and the ones below, never one above.
# The package's __init__ imports nothing (counted: test_it_keeps_the_rubric_packages_init_empty).
RUBRIC = "rubric_app.rubric"
WINGS = ("reading", "likeness", "rules", "engine", "offline")


def wing_of(module: str) -> int | None:
    parts = module.split(".")
    if module.startswith(RUBRIC + ".") and parts[2] in WINGS:
        return WINGS.index(parts[2])
    return None


def upward_wing_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    """Each import inside the rubric that points up its wings."""
    return pointing_up(graph, wing_of, list(WINGS))


def test_it_places_every_module_of_the_rubric_in_a_wing():
    unplaced = [name for name in project_modules() if name.startswith(RUBRIC + ".") and wing_of(name) is None]
    assert not unplaced, f"rubric modules in no wing (add them to WINGS and docs/architecture.md): {unplaced}"


def test_it_never_imports_upward_across_the_rubrics_wings():
    upward = upward_wing_imports(import_graph())
    assert not upward, "imports that point up the rubric's wings:\n" + "\n".join(upward)


def test_it_finds_an_upward_import_between_the_rubrics_wings_when_there_is_one():
    # The positive control: the reader asking the engine, a rule asking the labeler; not a rule reading the facts,
    # nor offline code running the engine, nor a module of the rubric importing one outside it.
    graph = {
        "rubric_app.rubric.reading.text": {"rubric_app.rubric.engine.assess": 12, "rubric_app.vocabulary": 3},
        "rubric_app.rubric.rules.general": {
            "rubric_app.rubric.engine.model": 40,
            "rubric_app.rubric.reading.facts": 31,
        },
        "rubric_app.rubric.offline.evaluation": {"rubric_app.rubric.engine.assess": 20},
        "rubric_app.rubric.likeness.neighbours": {"rubric_app.rubric.reading.types": 9},
    }
    assert upward_wing_imports(graph) == [
        "rubric_app.rubric.reading.text:12 (reading) imports rubric_app.rubric.engine.assess (engine)",
        "rubric_app.rubric.rules.general:40 (rules) imports rubric_app.rubric.engine.model (engine)",
    ]


def test_it_keeps_the_rubric_packages_init_empty():
    # Importing one wing's module runs rubric/__init__.py first: anything it imported would be imported by every
    # module of every wing, the lowest included (the circle of issue 50). Its wings' __init__ files import nothing
    # either.
    graph = import_graph()
    inits = [RUBRIC, *(f"{RUBRIC}.{wing}" for wing in WINGS)]
    assert {init: graph[init] for init in inits if graph[init]} == {}


def test_it_finds_what_a_packages_init_imports(tmp_path, monkeypatch):
    # The positive control of the test above: an __init__ that loads the engine is seen, with the edge every importer
    # of a wing's module gets to it.
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    for path, text in {
        "rubric_app/__init__.py": "",
        "rubric_app/rubric/__init__.py": "from .engine.assess import evaluate\n",
        "rubric_app/rubric/engine/__init__.py": "",
        "rubric_app/rubric/engine/assess.py": "",
        "rubric_app/rubric/reading/__init__.py": "",
        "rubric_app/rubric/reading/types.py": "",
        "rubric_app/models.py": "from rubric_app.rubric.reading.types import IssueText\n",
        "triage_site/__init__.py": "",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    graph = import_graph()
    assert graph[RUBRIC] == {f"{RUBRIC}.engine": 1, f"{RUBRIC}.engine.assess": 1}
    assert set(graph["rubric_app.models"]) == {RUBRIC, f"{RUBRIC}.reading", f"{RUBRIC}.reading.types"}


def test_it_lets_only_the_github_client_import_pygithub():
    modules = project_modules()
    importers = sorted(
        {name for name, path in modules.items() for target, _ in imported(name, path, modules) if target == "github"}
    )
    assert importers == ["rubric_app.github.client"], importers


def app_module_paths() -> list[str]:
    """Every module of the app as a path under rubric_app/ ("github/sync.py"), packages' __init__ and
    migrations left out."""
    app = ROOT / "rubric_app"
    return sorted(
        str(path.relative_to(app))
        for path in app.rglob("*.py")
        if path.name != "__init__.py" and "migrations" not in path.parts
    )


def test_it_names_every_module_of_the_app_on_the_architecture_page_and_in_the_readme():
    for page in ("docs/architecture.md", "README.md"):
        text = (ROOT / page).read_text()
        unnamed = [path for path in app_module_paths() if not _named(path, text)]
        assert not unnamed, f"{page} does not name: {unnamed}"


def _named(path: str, text: str) -> bool:
    """Named as its path under rubric_app/, or as its file name in a paragraph, list item or table row that names
    its folder."""
    if path in text:
        return True
    folder, _, name = path.rpartition("/")
    blocks = re.split(r"\n(?=\s*- |\| |#|\n)", text)
    return bool(folder) and any(f"`{name}`" in block and f"{folder}/" in block for block in blocks)
