"""Reading a cluster for the viewer: through karpy's Kubernetes client, any kubeconfig (a real cluster, or
``karpy sandbox``).

Nodes and NodeClaims are read with the ``--node-selector`` (server side); Pods, NodePools and Events unfiltered.
``--once`` lists each kind once; the interactive screen keeps them current with informers (list, then watch).
A cluster without Karpenter's CRDs has no NodeClaims or NodePools: the viewer shows its Nodes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..kube import errors as E
from ..kube.client import ConfigError, KubeClient, RetryPolicy
from ..kube.times import parse_time
from .model import Snapshot

SELECTED = ("Node", "NodeClaim")  # the kinds the node selector applies to
KINDS = ("Node", "NodeClaim", "Pod", "NodePool", "Event")
OPTIONAL = ("NodeClaim", "NodePool")  # absent without Karpenter's CRDs


class SourceError(Exception):
    """The cluster cannot be read (exit status 2, with this message)."""


def latest_time(*groups: list[dict]) -> float:
    """The newest timestamp in the objects: a lower bound of the API server's clock (a sandbox's runs ahead of
    this machine's when it runs faster than real time)."""
    best = 0.0
    for objs in groups:
        for o in objs:
            meta = o.get("metadata") or {}
            for v in (meta.get("creationTimestamp"), o.get("lastTimestamp"), o.get("eventTime")):
                t = parse_time(v) if v else None
                if t is not None and t > best:
                    best = t
            for c in (o.get("status") or {}).get("conditions") or ():
                t = parse_time(c.get("lastTransitionTime"))
                if t is not None and t > best:
                    best = t
    return best


class _Selected:
    """The client, with the node selector on every list and watch of Nodes and NodeClaims (for the informers)."""

    def __init__(self, client: KubeClient, selector: str):
        self.client = client
        self.selector = selector or None

    def list(self, kind: str, **kw: Any):
        if kind in SELECTED:
            kw["label_selector"] = self.selector
        return self.client.list(kind, **kw)

    def watch(self, kind: str, **kw: Any):
        if kind in SELECTED:
            kw["label_selector"] = self.selector
        return self.client.watch(kind, **kw)


class LiveSource:
    def __init__(self, kubeconfig: str | None, context: str | None, selector: str = ""):
        self.selector = selector
        try:
            self.client = KubeClient.from_kubeconfig(kubeconfig, context, retry=RetryPolicy(attempts=3, base=0.2),
                                                     timeout=10.0, user_agent="karpy-viewer")
        except ConfigError as e:
            raise SourceError(f"--kubeconfig: {e}") from None
        self.context = context or getattr(self.client.config, "context_name", None) or ""
        self.server = str(getattr(self.client.config.cluster, "server", "") or "")
        self.missing: set[str] = set()
        self._store: dict[str, dict[tuple[str, str], dict]] = {k: {} for k in KINDS}
        self._lock = threading.Lock()
        self._informers: Any = None
        self.version = 0  # bumped on every change the informers deliver

    # --- one read -----------------------------------------------------------------------------------------------
    def _list(self, kind: str) -> list[dict]:
        try:
            items, _ = self.client.list(kind, label_selector=self.selector or None if kind in SELECTED else None)
            return items
        except E.NotFound:
            if kind in OPTIONAL:
                self.missing.add(kind)
                return []
            raise
        except E.BadRequest as e:
            raise SourceError(f"--node-selector: the API server refused it: {e}") from None

    def read(self) -> Snapshot:
        """Every kind listed once."""
        try:
            objs = {k: self._list(k) for k in KINDS}
        except SourceError:
            raise
        except E.ApiError as e:
            raise SourceError(f"reading the cluster at {self.server}: {e.code} {e.reason}: {e}") from None
        except OSError as e:
            raise SourceError(f"reading the cluster at {self.server}: {e}") from None
        return self._snapshot(objs)

    def _snapshot(self, objs: dict[str, list[dict]]) -> Snapshot:
        now = max(time.time(), latest_time(objs["Node"], objs["NodeClaim"], objs["Event"]))
        return Snapshot(now=now, nodes=objs["Node"], nodeclaims=objs["NodeClaim"], pods=objs["Pod"],
                        nodepools=objs["NodePool"], events=objs["Event"])

    # --- kept current --------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Read once (errors surface here), then keep every kind current with informers."""
        from ..kube.informer import Informers

        first = self.read()
        with self._lock:
            for kind, items in (("Node", first.nodes), ("NodeClaim", first.nodeclaims), ("Pod", first.pods),
                                ("NodePool", first.nodepools), ("Event", first.events)):
                self._store[kind] = {_key(o): o for o in items}
        kinds = [k for k in KINDS if k not in self.missing]
        self._informers = Informers(_Selected(self.client, self.selector), kinds, self._deliver)
        self._informers.start()

    def _deliver(self, etype: str, obj: dict) -> None:
        kind = obj.get("kind") or ""
        with self._lock:
            store = self._store.setdefault(kind, {})
            if etype == "DELETED":
                store.pop(_key(obj), None)
            else:
                store[_key(obj)] = obj
            self.version += 1

    def snapshot(self) -> Snapshot:
        with self._lock:
            objs = {k: list(v.values()) for k, v in self._store.items()}
        return self._snapshot(objs)

    def close(self) -> None:
        if self._informers is not None:
            self._informers.stop()
        self.client.close()


def _key(o: dict) -> tuple[str, str]:
    meta = o.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
