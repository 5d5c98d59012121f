"""The house's boundaries, read from the code's imports (every import, function-level ones included):
no import circle among the project's modules, the rubric engine and the bisection harness free of Django,
and PyGithub behind rubric_app/github/client.py alone."""

from __future__ import annotations

import ast
import re
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
    modules = project_modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for target, line in imported(name, path, modules):
            # A package's __init__ importing its own submodules (or a submodule its package) is how
            # packages are built, not a circle between workflows.
            if target in modules and target != name and not _same_package_init(name, target):
                edges.setdefault(target, line)
    return graph


def _same_package_init(a: str, b: str) -> bool:
    return b.startswith(a + ".") or a.startswith(b + ".")


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
    return [
        f"{name}:{line} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, edges in graph.items()
        if layer_of(name) is not None
        for target, line in edges.items()
        if layer_of(target) is not None and layer_of(target) > layer_of(name)
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
