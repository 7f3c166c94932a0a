"""``metrics.k8s.io/v1beta1`` on karpy sandbox: what metrics-server serves, from the simulated usage, so that
``kubectl top nodes`` and ``kubectl top pods`` work.

The sandbox runs no containers, so usage is modelled: a running container uses what it requests (its limits
where it requests nothing), and a pod may say otherwise with the annotation ``karpy.dev/usage`` (a resource
list, ``cpu=250m,memory=300Mi``, split evenly over its containers). A Ready node uses the sum of its running
pods plus a system share for the kubelet, the container runtime and the OS: half of what the node reserves for
them (capacity minus allocatable; the other half stands for the eviction threshold and headroom). As
metrics-server, only running pods and Ready nodes have metrics; CPU is given in nanocores, memory in Ki.
"""

from __future__ import annotations

from typing import Any

from .. import resources as res
from ..kube import errors as E
from ..kube.memory import MemoryAPI
from ..kube.times import fmt_time

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
USAGE_ANNOTATION = "karpy.dev/usage"
WINDOW = "30s"  # metrics-server's default resolution: usage averaged over the last scrape window
RESOURCES = {"nodes": ("NodeMetrics", False), "pods": ("PodMetrics", True)}  # plural -> (kind, namespaced)
_MEASURED = (res.CPU, res.MEMORY)


def _quantities(units: dict[str, int]) -> dict[str, str]:
    return {res.CPU: f"{units.get(res.CPU, 0) * 1_000_000}n", res.MEMORY: f"{units.get(res.MEMORY, 0) // 1024}Ki"}


def _annotated(pod: dict) -> dict[str, int] | None:
    text = ((pod["metadata"].get("annotations") or {}).get(USAGE_ANNOTATION) or "").strip()
    if not text:
        return None
    try:
        pairs = dict(kv.split("=", 1) for kv in text.split(","))
        return {k: v for k, v in res.parse_resource_list({k.strip(): v.strip() for k, v in pairs.items()}).items()
                if k in _MEASURED}
    except ValueError:  # an unreadable annotation: the requests then
        return None


def container_usage(pod: dict) -> list[tuple[str, dict[str, int]]]:
    """(container, usage) of a running pod's containers."""
    containers = (pod.get("spec") or {}).get("containers") or []
    annotated = _annotated(pod)
    out = []
    for c in containers:
        if annotated is not None:
            use = {k: v // max(1, len(containers)) for k, v in annotated.items()}
        else:
            r = c.get("resources") or {}
            use = res.parse_resource_list(r.get("limits"))
            use.update(res.parse_resource_list(r.get("requests")))
        out.append((c.get("name", ""), {k: use.get(k, 0) for k in _MEASURED}))
    return out


def _running(pod: dict) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") == "Running" \
        and not pod["metadata"].get("deletionTimestamp")


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or ())


def _meta(obj: dict, now: str) -> dict:
    m = obj["metadata"]
    out: dict[str, Any] = {"name": m["name"]}
    if m.get("namespace"):
        out["namespace"] = m["namespace"]
    out["creationTimestamp"] = now
    if m.get("labels"):
        out["labels"] = dict(m["labels"])
    return out


def pod_metrics(pod: dict, now: str) -> dict:
    return {"kind": "PodMetrics", "apiVersion": API_VERSION, "metadata": _meta(pod, now), "timestamp": now,
            "window": WINDOW, "containers": [{"name": n, "usage": _quantities(u)} for n, u in container_usage(pod)]}


def system_share(capacity: int, allocatable: int) -> int:
    """What the kubelet, the runtime and the OS use of one resource of a node."""
    return max(0, capacity - allocatable) // 2


def node_metrics(node: dict, pods: list[dict], now: str) -> dict:
    st = node.get("status") or {}
    capacity, allocatable = res.parse_resource_list(st.get("capacity")), res.parse_resource_list(st.get("allocatable"))
    used = {k: system_share(capacity.get(k, 0), allocatable.get(k, capacity.get(k, 0))) for k in _MEASURED}
    for p in pods:
        for _, u in container_usage(p):
            used = res.add(used, u)
    return {"kind": "NodeMetrics", "apiVersion": API_VERSION, "metadata": _meta(node, now), "timestamp": now,
            "window": WINDOW, "usage": _quantities(used)}


def serve(api: MemoryAPI, now: float, method: str, rest: list[str], query: dict) -> dict | None:
    """The answer to ``GET /apis/metrics.k8s.io/v1beta1/<rest>``; None when ``rest`` names nothing here."""
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not rest or rest[0] not in RESOURCES or len(rest) > 2:
        return None
    kind, namespaced = RESOURCES[rest[0]]
    if ns is not None and not namespaced:
        return None
    if method != "GET":
        raise E.MethodNotAllowed("the server does not allow this method on the requested resource")
    name = rest[1] if len(rest) == 2 else None
    ls = query.get("labelSelector") or None
    stamp = fmt_time(now)
    if kind == "PodMetrics":
        if name is not None:
            pod = api.try_get("Pod", name, ns or "default")
            if pod is None or not _running(pod):
                raise E.NotFound(f'podmetrics.metrics.k8s.io "{name}" not found', kind="pods", name=name, group=GROUP)
            return pod_metrics(pod, stamp)
        pods = [p for p in api.list("Pod", ns, label_selector=ls)[0] if _running(p)]
        items = [pod_metrics(p, stamp) for p in sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""),
                                                                             p["metadata"]["name"]))]
        return {"kind": "PodMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items}
    by_node: dict[str, list[dict]] = {}
    for p in api.all("Pod"):
        if _running(p):
            by_node.setdefault(p["spec"]["nodeName"], []).append(p)
    if name is not None:
        node = api.try_get("Node", name)
        if node is None or not _ready(node):
            raise E.NotFound(f'nodemetrics.metrics.k8s.io "{name}" not found', kind="nodes", name=name, group=GROUP)
        return node_metrics(node, by_node.get(name, []), stamp)
    nodes = sorted((n for n in api.list("Node", label_selector=ls)[0] if _ready(n)), key=lambda n: n["metadata"]["name"])
    return {"kind": "NodeMetricsList", "apiVersion": API_VERSION, "metadata": {},
            "items": [node_metrics(n, by_node.get(n["metadata"]["name"], []), stamp) for n in nodes]}
