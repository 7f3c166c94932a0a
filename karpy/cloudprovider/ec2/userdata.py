"""User data per AMI family, merged with the EC2NodeClass's own ``userData`` as upstream merges it.

* AL2023: a MIME multipart archive (boundary ``//``): the user's parts first (a MIME archive spliced part by
  part, YAML as ``application/node.eks.aws``, anything else as a shell script), then karpy's ``NodeConfig``
  (cluster name, endpoint, CA, service CIDR; kubelet maxPods, reserved resources, taints; node labels).
* Bottlerocket: TOML; the user's settings with ``[settings.kubernetes]`` overwritten by karpy's.
* AL2: MIME, the user's parts then ``/etc/eks/bootstrap.sh`` with the kubelet's extra arguments.
* Custom: the user's data unchanged.
"""

from __future__ import annotations

import base64
import email
import json
import tomllib
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_BYTES = 16 * 1024  # EC2's limit on decoded user data


@dataclass
class Bootstrap:
    cluster_name: str
    endpoint: str
    ca_bundle: str  # base64
    cidr: str | None
    labels: dict[str, str]
    taints: list[dict]
    max_pods: int | None
    kubelet: dict[str, Any] = field(default_factory=dict)
    cluster_dns: str | None = None
    user_data: str | None = None


def _taint(t: dict) -> str:
    v = t.get("value")
    return f"{t['key']}={v}:{t['effect']}" if v else f"{t['key']}:{t['effect']}"


def _mime(parts: list[tuple[str, str]]) -> str:
    out = ['MIME-Version: 1.0', 'Content-Type: multipart/mixed; boundary="//"', ""]
    for ctype, body in parts:
        out += ["--//", f"Content-Type: {ctype}", "", body.rstrip("\n")]
    out += ["--//--", ""]
    return "\n".join(out)


def _user_parts(user: str | None) -> list[tuple[str, str]]:
    if not user:
        return []
    if user.lstrip().startswith("MIME-Version"):
        msg = email.message_from_string(user)
        return [(p.get_content_type() if not p.get("Content-Type") else p["Content-Type"], p.get_payload())
                for p in msg.walk() if not p.is_multipart()]
    try:
        if isinstance(yaml.safe_load(user), dict):
            return [("application/node.eks.aws", user)]
    except yaml.YAMLError:
        pass
    return [('text/x-shellscript; charset="us-ascii"', user)]


def al2023(b: Bootstrap) -> str:
    config: dict[str, Any] = {**b.kubelet, "registerWithTaints": [
        {k: t[k] for k in ("key", "value", "effect") if t.get(k)} for t in b.taints]}
    if b.max_pods is not None:
        config["maxPods"] = b.max_pods
    if b.cluster_dns:
        config["clusterDNS"] = [b.cluster_dns]
    node_config = {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": {
        "cluster": {"name": b.cluster_name, "apiServerEndpoint": b.endpoint,
                    "certificateAuthority": b.ca_bundle, "cidr": b.cidr or ""},
        "kubelet": {"config": config,
                    "flags": ["--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(b.labels.items()))]}}}
    body = "# Karpenter Generated NodeConfig\n" + yaml.safe_dump(node_config, sort_keys=True)
    return _mime([*_user_parts(b.user_data), ("application/node.eks.aws", body)])


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _toml(d: dict, prefix: str = "") -> str:
    scalars = [f"{json.dumps(k) if not k.replace('-', '').replace('_', '').isalnum() else k} = {_toml_value(v)}"
               for k, v in d.items() if not isinstance(v, dict)]
    out = ([f"[{prefix}]"] if prefix and scalars else []) + scalars
    for k, v in d.items():
        if isinstance(v, dict):
            key = k if k.replace("-", "").replace("_", "").isalnum() else json.dumps(k)
            out.append(_toml(v, f"{prefix}.{key}" if prefix else key))
    return "\n".join(x for x in out if x)


def bottlerocket(b: Bootstrap) -> str:
    doc = tomllib.loads(b.user_data) if b.user_data else {}
    kube = doc.setdefault("settings", {}).setdefault("kubernetes", {})
    kube.update({"cluster-name": b.cluster_name, "api-server": b.endpoint, "cluster-certificate": b.ca_bundle})
    kube["node-labels"] = {**(kube.get("node-labels") or {}), **b.labels}
    taints: dict[str, list[str]] = {}
    for t in b.taints:
        taints.setdefault(t["key"], []).append(f"{t.get('value') or ''}:{t['effect']}")
    kube["node-taints"] = taints
    if b.max_pods is not None:
        kube["max-pods"] = b.max_pods
    if b.cluster_dns:
        kube["cluster-dns-ip"] = b.cluster_dns
    for key, name in (("kubeReserved", "kube-reserved"), ("systemReserved", "system-reserved"),
                      ("evictionHard", "eviction-hard")):
        if b.kubelet.get(key):
            kube[name] = {str(k): str(v) for k, v in b.kubelet[key].items()}
    return _toml(doc) + "\n"


def al2(b: Bootstrap) -> str:
    extra = ["--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(b.labels.items()))]
    if b.taints:
        extra.append("--register-with-taints=" + ",".join(_taint(t) for t in b.taints))
    if b.max_pods is not None:
        extra.append(f"--max-pods={b.max_pods}")
    script = ["#!/bin/bash -xe", "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1",
              f"/etc/eks/bootstrap.sh '{b.cluster_name}' --apiserver-endpoint '{b.endpoint}' --b64-cluster-ca '{b.ca_bundle}'"
              + (f" \\\n--dns-cluster-ip '{b.cluster_dns}'" if b.cluster_dns else "")
              + (" \\\n--use-max-pods false" if b.max_pods is not None else "")
              + f" \\\n--kubelet-extra-args '{' '.join(extra)}'"]
    return _mime([*_user_parts(b.user_data), ('text/x-shellscript; charset="us-ascii"', "\n".join(script))])


def render(family: str, b: Bootstrap) -> str:
    """Base64 user data for an AMI family (ValueError past EC2's 16 KiB)."""
    text = {"AL2023": al2023, "Bottlerocket": bottlerocket, "AL2": al2}.get(family, lambda x: x.user_data or "")(b)
    raw = text.encode()
    if len(raw) > MAX_BYTES:
        raise ValueError(f"user data is {len(raw)} bytes, EC2 takes at most {MAX_BYTES}")
    return base64.b64encode(raw).decode()
