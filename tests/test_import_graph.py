"""karpy's import graph has no cycles: no module imports, directly or through others, a module that imports it
back (function-level imports included, since they are cycles too once they run)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "karpy"


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    out: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in mods)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                target = f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                if target in mods and target != name:
                    out.add(target)
    return out


def test_no_import_cycles():
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)
    assert len(graph) > 50  # the walk found karpy's modules


# karpy.viewer reads the cluster through karpy's Kubernetes client and reads simulate results as JSON: of the
# engine it may use only pure helpers (quantities, the pod request formula, the budget arithmetic, the catalogs)
VIEWER_MAY_IMPORT = ("karpy.viewer", "karpy.kube", "karpy.resources", "karpy.errors", "karpy.timeutil",
                     "karpy.scheduling.pods", "karpy.disruption.budgets", "karpy.cloudprovider.catalog")


def test_viewer_uses_only_the_client_and_pure_helpers():
    mods = _modules()
    bad = sorted(f"{m} -> {n}" for m, p in mods.items() if m.startswith("karpy.viewer")
                 for n in _imports(m, p, mods)
                 if not any(n == a or n.startswith(a + ".") for a in VIEWER_MAY_IMPORT))
    assert bad == []
    assert any(m.startswith("karpy.viewer.") for m in mods)
