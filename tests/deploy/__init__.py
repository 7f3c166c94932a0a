"""Tests of what installs karpy in a cluster: deploy/, charts/karpy, the Dockerfile."""

from __future__ import annotations


def pod_environment(container: dict, namespace: str) -> dict[str, str]:
    """A container's environment as the kubelet sets it in ``namespace`` (the namespace fieldRef resolved; a later
    entry of the same name wins)."""
    env = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = namespace
        else:
            raise AssertionError(f"env {e['name']}: a source the tests cannot resolve: {e}")
    return env
