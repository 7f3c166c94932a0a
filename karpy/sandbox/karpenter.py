"""Karpenter as ``karpy sandbox`` shows it: a Deployment ``karpenter`` in namespace ``karpenter``
(``--karpenter-namespace``), labelled ``app.kubernetes.io/name=karpenter`` as upstream's chart labels
it, whose one pod's container ``controller`` has the controllers' JSON log lines as its log
(``kubectl logs -n karpenter -l app.kubernetes.io/name=karpenter``).

Karpenter runs in the sandbox's control plane, not on a simulated node: its pod template is bound to
the node name ``karpy-sandbox-control-plane`` (:data:`CONTROL_PLANE_NODE`), which has no Node object,
as on a cluster whose Karpenter runs in a managed control plane. So the simulated kube-scheduler never
places it, Karpenter never counts it as pending nor as load on a node it could consolidate, and the
simulated kubelets never see it. :class:`ControlPlaneKubelet` runs such pods (Running, their
containers ready) in their place; a pod deleted by a client is replaced by its ReplicaSet as usual.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..kube import errors as E
from ..kube.times import fmt_time
from ..runtime.manager import Manager, deleting
from ..simulator.kubelet import READY_CONDITIONS
from ..state import pods as P

DEFAULT_NAMESPACE = "karpenter"
NAME = "karpenter"
CONTAINER = "controller"
CONTROL_PLANE_NODE = "karpy-sandbox-control-plane"
IMAGE = f"ghcr.io/karpy/karpy:{__version__}"
LABELS = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}


def karpenter_objects(namespace: str) -> list[dict]:
    """The ServiceAccount and Deployment that stand for Karpenter in ``namespace``."""
    meta = {"name": NAME, "namespace": namespace,
            "labels": {**LABELS, "app.kubernetes.io/version": __version__, "app.kubernetes.io/part-of": "karpy"}}
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)}
    container = {
        "name": CONTAINER, "image": IMAGE, "imagePullPolicy": "IfNotPresent", "args": ["sandbox"],
        "env": [{"name": "SYSTEM_NAMESPACE", "value": namespace}, {"name": "LOG_LEVEL", "value": "info"}],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": dict(meta),
        "spec": {
            "replicas": 1, "revisionHistoryLimit": 10,
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "serviceAccountName": NAME, "priorityClassName": "system-cluster-critical",
                    "nodeName": CONTROL_PLANE_NODE, "containers": [container],
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                },
            },
        },
    }
    return [sa, deployment]


def is_karpenter_pod(pod: dict, namespace: str) -> bool:
    """A pod whose log is Karpenter's: the Deployment's, in its namespace, run in the control plane."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (meta.get("namespace") == namespace and P.node_name(pod) == CONTROL_PLANE_NODE
            and all(labels.get(k) == v for k, v in LABELS.items()))


class ControlPlaneKubelet:
    """Runs the pods bound to :data:`CONTROL_PLANE_NODE`: Running, Ready, each container running."""

    name = "sandbox.control-plane"

    def __init__(self, mgr: Manager, api: Any, clock: Any):
        self.mgr = mgr
        self.api = api
        self.clock = clock

    def setup(self, mgr: Manager) -> None:
        mgr.watch("Pod", self._on_pod)

    def _on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype != "DELETED" and P.node_name(obj) == CONTROL_PLANE_NODE and P.phase(obj) == "Pending" \
                and not deleting(obj):
            self.mgr.enqueue(self, P.pod_key(obj))

    def reconcile(self, key: str) -> float | None:
        ns, _, name = key.partition("/")
        pod = self.mgr.get("Pod", name, ns)
        if pod is None or P.phase(pod) != "Pending" or deleting(pod) or P.node_name(pod) != CONTROL_PLANE_NODE:
            return None
        ts = fmt_time(self.clock.now())
        statuses = [{"name": c.get("name"), "image": c.get("image", ""), "imageID": "", "ready": True,
                     "restartCount": 0, "started": True, "state": {"running": {"startedAt": ts}}}
                    for c in (pod.get("spec") or {}).get("containers") or ()]
        conds = [{"type": t, "status": "True", "lastTransitionTime": ts} for t in READY_CONDITIONS]
        status = {**(pod.get("status") or {}), "phase": "Running", "startTime": ts, "conditions": conds,
                  "containerStatuses": statuses}
        try:
            self.api.patch("Pod", name, {"status": status}, ns, subresource="status")
        except E.NotFound:
            pass
        return None
