"""Workload controllers: the pods a Deployment, ReplicaSet, StatefulSet, Job or DaemonSet owns."""

from __future__ import annotations

import copy
from typing import Mapping

from .names import NameGenerator, template_hash

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet")


def desired_replicas(obj: Mapping) -> int:
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Job":
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions")
        n = int(parallelism if parallelism is not None else 1)
        if completions is not None:
            n = min(n, int(completions))
        return n
    if kind == "DaemonSet":
        return 0
    r = spec.get("replicas", 1)
    return int(1 if r is None else r)


def pod_from_template(owner: Mapping, name: str, extra_labels: Mapping[str, str] | None = None,
                      owner_kind: str | None = None, owner_name: str | None = None) -> dict:
    """A Pod manifest stamped from a workload's pod template."""
    meta = owner.get("metadata") or {}
    template = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    if extra_labels:
        labels.update(extra_labels)
    pod_meta: dict = {
        "name": name,
        "namespace": meta.get("namespace", "default"),
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": "batch/v1" if (owner_kind or owner.get("kind")) == "Job" else "apps/v1",
            "kind": owner_kind or owner.get("kind"),
            "name": owner_name or meta.get("name"),
            "controller": True,
        }],
    }
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    spec = template.get("spec") or {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec, "status": {"phase": "Pending"}}


def replicaset_name(deployment: Mapping) -> tuple[str, str]:
    """The ReplicaSet a Deployment's current template maps to, and its pod-template-hash."""
    h = template_hash((deployment.get("spec") or {}).get("template"))
    return f"{deployment['metadata']['name']}-{h}", h


def new_pod_names(owner: Mapping, count: int, names: NameGenerator, existing: int) -> list[str]:
    kind = owner.get("kind")
    name = owner["metadata"]["name"]
    if kind == "StatefulSet":
        return [f"{name}-{i}" for i in range(existing, existing + count)]
    return [names.generate(f"{name}-") for _ in range(count)]
