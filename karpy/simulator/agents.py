"""Node agents: what removes a NodeClaim's startup taints once its node is up.

A NodePool's ``startupTaints`` belong to agents that run on every node (a CNI
such as Cilium, whose agent removes ``node.cilium.io/agent-not-ready``; a GPU
device plugin). Karpenter only waits for them to go before it calls the node
initialized. In ``karpy simulate`` and ``karpy sandbox`` these agents are part
of the simulated world; on a real control plane whose nodes are kwok's fake
nodes (``scripts/local-cluster``) nothing else would remove them, so the same
reconciler runs there as a process of its own::

    python -m karpy.simulator.agents --kubeconfig FILE

The agents act on a Node once it is Ready and Karpenter has registered it
(``karpenter.sh/registered=true``): they remove exactly the taints listed in
``spec.startupTaints`` of the NodeClaim that owns the node, and nothing else.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from ..kube.port import DELETED
from ..runtime.manager import Manager, deleting, is_true

REGISTERED = "karpenter.sh/registered"


def _taint_key(t: dict) -> tuple:
    return (t.get("key"), t.get("value") or "", t.get("effect"))


def startup_taints(mgr: Manager, node: dict) -> set[tuple]:
    """The startup taints of the NodeClaim that owns the node, as (key, value, effect)."""
    for r in node["metadata"].get("ownerReferences") or ():
        if r.get("kind") == "NodeClaim":
            claim = mgr.get("NodeClaim", r.get("name", ""))
            if claim is not None:
                return {_taint_key(t) for t in (claim.get("spec") or {}).get("startupTaints") or ()}
    return set()


def without_startup_taints(mgr: Manager, node: dict) -> list[dict] | None:
    """The node's taints once its agents removed theirs, or None when there is nothing to remove (not yet
    registered by Karpenter, no startup taints, or gone already)."""
    if (node["metadata"].get("labels") or {}).get(REGISTERED) != "true":
        return None
    startup = startup_taints(mgr, node)
    if not startup:
        return None
    current = (node.get("spec") or {}).get("taints") or []
    kept = [t for t in current if _taint_key(t) not in startup]
    return kept if len(kept) != len(current) else None


class NodeAgents:
    name = "world.node-agents"

    def __init__(self, mgr: Manager, api: Any):
        self.mgr = mgr
        self.api = api

    def setup(self, mgr: Manager) -> None:
        mgr.watch("Node", self._on_node)
        mgr.watch("NodeClaim", self._on_claim)

    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != DELETED:
            self.mgr.enqueue(self, obj["metadata"]["name"])

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        node = (obj.get("status") or {}).get("nodeName")
        if node and etype != DELETED:
            self.mgr.enqueue(self, node)

    def reconcile(self, name: str) -> float | None:
        node = self.mgr.get("Node", name)
        if node is None or deleting(node) or not is_true(node, "Ready"):
            return None
        kept = without_startup_taints(self.mgr, node)
        if kept is None:
            return None
        # the resourceVersion makes the patch conditional: a taint added meanwhile (by the node lifecycle
        # controller, by Karpenter) is never dropped by a stale list; the manager retries a conflict
        patch: dict = {"spec": {"taints": kept}}
        rv = node["metadata"].get("resourceVersion")
        if rv:
            patch["metadata"] = {"resourceVersion": rv}
        self.api.patch("Node", name, patch)
        return None


def run(kubeconfig: str | None, context: str | None) -> int:  # pragma: no cover - exercised as a process
    from ..kube.client import ConfigError, KubeClient, load_config
    from ..runtime.clock import RealClock

    try:
        config, _ = load_config(kubeconfig, context)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    api = KubeClient(config, user_agent="karpy-node-agents", field_manager="karpy-node-agents")
    clock = RealClock()
    mgr = Manager(api, clock, strict=False)
    mgr.realtime = True
    mgr.on_error = lambda controller, key, e: print(f"node agents: {key}: {e}", file=sys.stderr, flush=True)
    mgr.add(NodeAgents(mgr, api))
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        with clock.wakeup:
            clock.wakeup.notify_all()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    mgr.start()
    print("node agents: watching Nodes and NodeClaims", file=sys.stderr, flush=True)
    try:
        while not stop.is_set():
            for t in clock.pop_due(clock.now()):
                t.fn()
            mgr.drain()
            with clock.wakeup:
                if not mgr.busy() and not stop.is_set():
                    nt = clock.next_time()
                    clock.wakeup.wait(0.5 if nt is None else max(0.0, min(0.5, clock.wall_seconds_until(nt))))
    finally:
        mgr.stop()
        api.close()
    return 0


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - exercised as a process
    ap = argparse.ArgumentParser(prog="python -m karpy.simulator.agents", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", default=None)
    ap.add_argument("--context", default=None)
    args = ap.parse_args(argv)
    return run(args.kubeconfig, args.context)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
