"""What karpy's controller asks of the API server, read from the code.

Every call ``<...>.api.<verb>(...)`` in the code ``karpy controller`` runs is found
by walking the source (ast): its kind comes from a literal first argument, from the
``"kind"`` of a literal object, or, for the few calls whose kind is a variable, from
:data:`DYNAMIC` (keyed by file, function and verb, so new code of that kind fails
the test until it is classified here). The kinds the informers list and watch come
from the controller process itself (its manager's watched kinds).
"""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass
from pathlib import Path

from karpy.kube.registry import BY_KIND

ROOT = Path(__file__).resolve().parents[2]

# code that is not part of `karpy controller`, and why
EXCLUDED = {
    "karpy/simulator/": "the simulated world of karpy simulate and karpy sandbox (kubelets, scheduler, workloads)",
    "karpy/sandbox/": "the karpy sandbox API server",
    "karpy/kube/memory.py": "the in-memory API server",
    "karpy/kube/client.py": "the API client itself: its verbs are what is scanned",
    "karpy/cli.py": "karpy simulate",
    "karpy/api/": "manifest validation, no API calls",
    "karpy/compare/": "karpy compare and sweep: simulations read back in memory",
    "karpy/viewer/": "karpy viewer: reads a cluster with its user's own credentials, not the controller's",
}

VERBS = ("get", "try_get", "list", "watch", "create", "update", "patch", "delete", "evict", "bind", "scale")

WATCHED = "<watched kinds>"

# (file, innermost function, verb) -> kind, for calls whose kind is not written at the call
DYNAMIC: dict[tuple[str, str, str], str | tuple[str, ...]] = {
    # a reserved NodeClaim, and its Node, turned on-demand once EC2 no longer holds the instance in a reservation
    ("karpy/cloudprovider/ec2/controllers.py", "_demote", "patch"): ("NodeClaim", "Node"),
    ("karpy/controllers/provisioning.py", "create_nodeclaim", "create"): "NodeClaim",
    ("karpy/controllers/provisioning.py", "create_nodeclaims", "create"): "NodeClaim",
    ("karpy/cloudprovider/simulated.py", "_register", "create"): "Node",
    ("karpy/controller/leader.py", "try_acquire_or_renew", "update"): "Lease",
    # the Recorder's Events, written by karpy controller's background writer
    ("karpy/controller/events.py", "_write", "create"): "Event",
    ("karpy/runtime/manager.py", "start", "list"): WATCHED,
    ("karpy/kube/informer.py", "relist", "list"): WATCHED,
    ("karpy/kube/informer.py", "watch_once", "watch"): WATCHED,
}


@dataclass(frozen=True)
class Call:
    file: str
    line: int
    function: str
    verb: str
    kind: str | None
    subresource: str | None

    def where(self) -> str:
        return f"{self.file}:{self.line} ({self.function})"


def _receiver_chain(node: ast.AST) -> list[str]:
    out = []
    while isinstance(node, ast.Attribute):
        out.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        out.append(node.id)
    return out


def _literal_kind(arg: ast.AST | None) -> str | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Dict):
        for k, v in zip(arg.keys, arg.values):
            if isinstance(k, ast.Constant) and k.value == "kind" and isinstance(v, ast.Constant):
                return v.value
    return None


class _Visitor(ast.NodeVisitor):
    def __init__(self, file: str):
        self.file = file
        self.functions: list[str] = ["<module>"]
        self.calls: list[Call] = []

    def _def(self, node: ast.AST) -> None:
        self.functions.append(node.name)  # type: ignore[attr-defined]
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = _def
    visit_AsyncFunctionDef = _def

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in VERBS:
            chain = _receiver_chain(f.value)
            if chain and chain[0] == "api":
                sub = None
                for kw in node.keywords:
                    if kw.arg == "subresource" and isinstance(kw.value, ast.Constant):
                        sub = kw.value.value
                kind = "Pod" if f.attr == "evict" or f.attr == "bind" else _literal_kind(node.args[0] if node.args else None)
                self.calls.append(Call(self.file, node.lineno, self.functions[-1], f.attr, kind, sub))
        self.generic_visit(node)


def scan() -> list[Call]:
    calls: list[Call] = []
    for path in sorted((ROOT / "karpy").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(x) for x in EXCLUDED):
            continue
        v = _Visitor(rel)
        v.visit(ast.parse(path.read_text(), rel))
        calls.extend(v.calls)
    return calls


def watched_kinds() -> set[str]:
    """The kinds `karpy controller`'s manager lists and watches (whatever --cloud-provider)."""
    from karpy.controller.process import ControllerProcess
    from karpy.controller.settings import ControllerSettings
    from karpy.kube.memory import MemoryAPI

    from karpy.controllers.env import DEFAULT_FEATURE_GATES

    out: set[str] = set()
    every_gate = {g: True for g in DEFAULT_FEATURE_GATES}  # a gate's controllers watch kinds of their own
    for provider in ("kwok", "simulated"):
        for gates in (dict(DEFAULT_FEATURE_GATES), every_gate):
            p = ControllerProcess(ControllerSettings(cloud_provider=provider, feature_gates=gates), MemoryAPI(),
                                  log_stream=io.StringIO())
            out |= set(p.mgr.watched_kinds())
    return out


# API verb(s) of each port method; a create implies get (the client re-reads an object whose
# create it retried, to tell its own earlier attempt from someone else's object)
_HTTP = {
    "get": ("get",),
    "try_get": ("get",),
    "list": ("list",),
    "watch": ("watch",),
    "create": ("create", "get"),
    "update": ("update",),
    "patch": ("patch",),
    "delete": ("delete",),
    "scale": ("patch",),
}


def permissions() -> tuple[set[tuple[str, str, str]], list[Call]]:
    """{(apiGroup, resource, verb)} that karpy's controller needs, and the calls left unclassified."""
    need: set[tuple[str, str, str]] = set()
    unresolved: list[Call] = []

    def add(kind: str, resource_suffix: str | None, verbs: tuple[str, ...]) -> None:
        t = BY_KIND[kind]
        res = t.plural + (f"/{resource_suffix}" if resource_suffix else "")
        for verb in verbs:
            need.add((t.group, res, verb))

    watched = watched_kinds()
    for kind in watched:
        add(kind, None, ("get", "list", "watch"))
    for c in scan():
        kind = c.kind or DYNAMIC.get((c.file, c.function, c.verb))
        if kind is None:
            unresolved.append(c)
            continue
        if kind == WATCHED:
            continue  # the informers: covered by the watched kinds
        for kind in (kind if isinstance(kind, tuple) else (kind,)):
            if c.verb == "evict":
                add("Pod", "eviction", ("create",))
            elif c.verb == "bind":
                add("Pod", "binding", ("create",))
            elif c.verb == "scale":
                add(kind, "scale", ("patch",))
            else:
                add(kind, c.subresource, _HTTP[c.verb])
    return need, unresolved
