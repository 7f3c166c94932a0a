"""The NodeOverlay controller (upstream ``nodeoverlay.controller``), registered only with the ``NodeOverlay``
feature gate on.

On every change of a NodeOverlay, a NodePool or a NodeClass it reads all NodeOverlays against every NodePool's
instance types (:func:`karpy.cloudprovider.overlay.evaluate`), hands the result to the cloud provider (whose
``get_instance_types`` and launch then see the overlaid prices and capacities) and sets each overlay's status:
``ValidationSucceeded`` True, or False with reason ``RuntimeValidation`` (the message says what) or ``Conflict``
("conflict with another overlay"); ``Ready`` follows it. A change of what the overlays do marks the cluster changed,
so consolidation looks again at prices that moved.
"""

from __future__ import annotations

from ..api.nodeoverlay import runtime_errors
from ..cloudprovider.overlay import CONFLICT, CONFLICT_MESSAGE, RUNTIME_VALIDATION, OverlayStore, evaluate, name_of
from ..kube.port import JSON_PATCH
from ..runtime.manager import deleting
from .env import Env
from .lifecycle import set_condition

GATE = "NodeOverlay"
NODECLASS_KINDS = ("AKSNodeClass", "EC2NodeClass", "KWOKNodeClass")


class NodeOverlayController:
    name = "nodeoverlay"

    def __init__(self, env: Env):
        self.env = env
        self.active = env.settings.gate(GATE) and hasattr(env.cloud, "overlays")
        self._version = 0
        self._last: tuple | None = None

    def setup(self, mgr) -> None:
        if not self.active:
            return  # upstream registers neither the controller nor the overlay decorator with the gate off
        self.env.cloud.overlays = OverlayStore()
        for kind in ("NodeOverlay", "NodePool", *NODECLASS_KINDS):
            mgr.watch(kind, lambda t, o, old: mgr.enqueue(self, ""))

    def reconcile(self, key: str = "") -> float | None:
        env = self.env
        cloud = env.cloud
        overlays = [o for o in env.mgr.list("NodeOverlay") if not deleting(o)]
        current = cloud.overlays
        cloud.overlays = None  # the instance types as the cloud lists them, without the overlays
        try:
            pools = []
            for np in sorted(env.mgr.list("NodePool"), key=name_of):
                if deleting(np):
                    continue
                nodeclass, _ = env.cluster.nodeclass_for(np)
                try:
                    pools.append((np, cloud.get_instance_types(np, nodeclass)))
                except ValueError:
                    continue  # a NodeClass the provider cannot serve: that NodePool is not evaluated
        finally:
            cloud.overlays = current
        store = evaluate(overlays, pools, runtime_errors)
        what = (store.updates_signature(), store.conflicts, tuple(sorted(store.invalid.items())), store.evaluated)
        if what != self._last:
            self._last = what
            self._version += 1
            store.version = self._version
            cloud.overlays = store
            env.cluster.version += 1  # upstream's MarkUnconsolidated: prices or capacities moved
        for ov in overlays:
            self._set_status(ov, store)
        return None

    def _set_status(self, ov: dict, store: OverlayStore) -> None:
        env = self.env
        name = name_of(ov)
        now = env.now()
        status = dict(ov.get("status") or {})
        if name in store.invalid:
            ok, reason, message = False, RUNTIME_VALIDATION, store.invalid[name]
        elif name in store.conflicts:
            ok, reason, message = False, CONFLICT, CONFLICT_MESSAGE
        else:
            ok, reason, message = True, None, None
        set_condition(status, "ValidationSucceeded", "True" if ok else "False", now, reason=reason, message=message)
        set_condition(status, "Ready", "True" if ok else "False", now,
                      reason=None if ok else "UnhealthyDependents",
                      message=None if ok else "ValidationSucceeded=False")
        if status != (ov.get("status") or {}):
            env.api.patch("NodeOverlay", name, [{"op": "add", "path": "/status", "value": status}],
                          patch_type=JSON_PATCH, subresource="status")


__all__ = ["GATE", "NodeOverlayController"]
