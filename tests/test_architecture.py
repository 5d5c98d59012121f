"""The house's boundaries, read from the code's imports (every import, function-level ones included):
no import circle among the project's modules, the rubric engine and the bisection harness free of Django,
and PyGithub behind rubric_app/github/client.py alone."""

from __future__ import annotations

import ast
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


def test_it_keeps_the_rubric_engine_and_the_bisection_harness_free_of_django():
    modules = project_modules()
    offenders = [
        f"{name}:{line}"
        for name, path in modules.items()
        if name.startswith(("rubric_app.rubric", "rubric_app.bisection"))
        for target, line in imported(name, path, modules)
        if target == "django"
        or (target in modules and not target.startswith(("rubric_app.rubric", "rubric_app.bisection")))
    ]
    assert not offenders, f"pure Python packages importing Django or the app: {offenders}"


def test_it_lets_only_rubric_app_github_import_pygithub():
    modules = project_modules()
    importers = sorted(
        {name for name, path in modules.items() for target, _ in imported(name, path, modules) if target == "github"}
    )
    assert importers == ["rubric_app.github.client"], importers
