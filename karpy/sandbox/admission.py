"""What kube-apiserver's admission plugins, registry strategies and a few controllers add to objects, which
``karpy simulate`` does without and clients of ``karpy sandbox`` see (``kubectl get -o yaml``).

* Pods (:func:`admit_pod`, every pod the store creates, the simulated world's too): the ServiceAccount
  ``default`` and its token volume (ServiceAccount admission), the not-ready and unreachable tolerations
  (DefaultTolerationSeconds), ``priority`` 0 and ``preemptionPolicy`` when no PriorityClass applies, and the
  QoS class.
* Services (:class:`ServiceIPs`): cluster IPs from ``10.96.0.0/12`` (``10.96.0.1`` is the ``kubernetes``
  Service's), node ports from 30000-32767, and the defaults of their spec.
* PersistentVolumeClaims and PersistentVolumes: the protection finalizer, taken off at their deletion once
  no pod uses them.
* Secrets (``stringData`` folded into ``data``, type ``Opaque``), core Events (the zero values Go writes),
  DaemonSets (the template-generation annotation), Nodes created by clients (the ``not-ready`` taint, which
  the sandbox takes off once the node is Ready, as the node lifecycle controller does).
* Namespaces: the ServiceAccount ``default`` and the ConfigMap ``kube-root-ca.crt`` (holding the sandbox's
  CA), as kube-controller-manager creates them in every namespace.
"""

from __future__ import annotations

import base64
import ipaddress
from ..kube.names import suffix

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
                       "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
                       "guaranteed across distributions of Kubernetes clusters.")
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)
DS_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


def _meta(o: dict) -> dict:
    m = o.get("metadata")
    return m if isinstance(m, dict) else {}


# --- pods -------------------------------------------------------------------------------------------------

def admit_pod(pod: dict) -> dict:
    """A pod as admission leaves it (a new dict; ``pod`` is not changed)."""
    spec = dict(pod.get("spec") or {})
    meta = _meta(pod)
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec.get("serviceAccount") or "default"
    spec["serviceAccount"] = spec["serviceAccountName"]
    if spec.get("automountServiceAccountToken") is not False and not _mounts_token(spec):
        name = "kube-api-access-" + suffix(f"{meta.get('namespace')}/{meta.get('name') or meta.get('generateName')}"
                                           f"/{meta.get('uid', '')}")
        spec["volumes"] = list(spec.get("volumes") or ()) + [_token_volume(name)]
        mount = {"name": name, "readOnly": True, "mountPath": SA_MOUNT}
        for field in ("initContainers", "containers"):
            if spec.get(field):
                spec[field] = [dict(c, volumeMounts=list(c.get("volumeMounts") or ()) + [mount])
                               if isinstance(c, dict) else c for c in spec[field]]
    tolerations = list(spec.get("tolerations") or ())
    for key in (NOT_READY, UNREACHABLE):
        if not any(isinstance(t, dict) and t.get("key") in (key, None, "") and t.get("effect") in ("NoExecute", None, "")
                   and (t.get("key") or t.get("operator") == "Exists") for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    spec["tolerations"] = tolerations
    if spec.get("priority") is None:
        spec["priority"] = 0
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    out = dict(pod)
    out["spec"] = spec
    status = dict(pod.get("status") or {})
    status.setdefault("qosClass", qos_class(spec))
    out["status"] = status
    return out


def _mounts_token(spec: dict) -> bool:
    return any(isinstance(m, dict) and m.get("mountPath") == SA_MOUNT
               for c in spec.get("containers") or () if isinstance(c, dict) for m in c.get("volumeMounts") or ())


def _token_volume(name: str) -> dict:
    return {"name": name, "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                       "fieldPath": "metadata.namespace"}}]}},
    ], "defaultMode": 420}}


def qos_class(spec: dict) -> str:
    """Guaranteed (every container's cpu and memory limited, requests equal to limits), BestEffort (nothing
    requested or limited), else Burstable."""
    containers = [c for f in ("initContainers", "containers") for c in spec.get(f) or () if isinstance(c, dict)]
    anything = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            anything = True
        for r in ("cpu", "memory"):
            if r not in lim or str(req.get(r, lim[r])) != str(lim[r]):
                guaranteed = False
    if not anything:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# --- services ---------------------------------------------------------------------------------------------

class ServiceIPs:
    """Cluster IPs and node ports in use, handed out lowest first (kube-apiserver draws them at random)."""

    def __init__(self) -> None:
        self.ips: set[str] = {str(SERVICE_CIDR[1])}
        self.ports: set[int] = set()

    def note(self, svc: dict) -> None:
        spec = svc.get("spec") or {}
        for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]:
            if ip and ip != "None":
                self.ips.add(ip)
        for p in spec.get("ports") or ():
            if isinstance(p, dict) and isinstance(p.get("nodePort"), int):
                self.ports.add(p["nodePort"])

    def forget(self, svc: dict) -> None:
        spec = svc.get("spec") or {}
        for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]:
            if ip != str(SERVICE_CIDR[1]):
                self.ips.discard(ip)
        for p in spec.get("ports") or ():
            if isinstance(p, dict):
                self.ports.discard(p.get("nodePort"))

    def ip(self) -> str:
        for i in range(10, SERVICE_CIDR.num_addresses - 1):
            ip = str(SERVICE_CIDR[i])
            if ip not in self.ips:
                self.ips.add(ip)
                return ip
        raise RuntimeError("the service IP range is full")

    def port(self) -> int:
        for p in NODE_PORTS:
            if p not in self.ports:
                self.ports.add(p)
                return p
        raise RuntimeError("the node port range is full")


def default_service(svc: dict) -> dict:
    """A Service's spec with the defaults kube-apiserver's decoder gives it (owned by whoever wrote it)."""
    spec = dict(svc.get("spec") or {})
    stype = spec.setdefault("type", "ClusterIP")
    if stype != "ExternalName":
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        if stype in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
    ports = []
    for p in spec.get("ports") or ():
        if isinstance(p, dict):
            p = dict(p)
            p.setdefault("protocol", "TCP")
            if stype != "ExternalName":
                p.setdefault("targetPort", p.get("port"))
        ports.append(p)
    if "ports" in spec:
        spec["ports"] = ports
    out = dict(svc)
    out["spec"] = spec
    return out


def allocate_service(svc: dict, ips: ServiceIPs, old: dict | None = None) -> dict:
    """A Service with the addresses and ports kube-apiserver's registry allocates (``old``: the Service it
    replaces, whose addresses and ports stay)."""
    spec = dict(svc.get("spec") or {})
    ospec = (old or {}).get("spec") or {}
    stype = spec.get("type") or "ClusterIP"
    if stype != "ExternalName":
        if not spec.get("clusterIP") and ospec.get("clusterIP"):
            spec["clusterIP"] = ospec["clusterIP"]
        if not spec.get("clusterIP"):
            spec["clusterIP"] = ips.ip()
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        if spec["clusterIP"] != "None" or spec.get("selector"):
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
    old_ports = {(p.get("port"), p.get("protocol") or "TCP"): p for p in ospec.get("ports") or () if isinstance(p, dict)}
    if stype in ("NodePort", "LoadBalancer") and spec.get("ports"):
        ports = []
        for p in spec["ports"]:
            if isinstance(p, dict) and not p.get("nodePort"):
                prev = old_ports.get((p.get("port"), p.get("protocol") or "TCP"))
                p = {**p, "nodePort": prev["nodePort"] if prev and prev.get("nodePort") else ips.port()}
            ports.append(p)
        spec["ports"] = ports
    out = dict(svc)
    out["spec"] = spec
    out["status"] = svc.get("status") or {"loadBalancer": {}}
    ips.note(out)
    return out


def kubernetes_service(port: int) -> dict:
    """The Service ``default/kubernetes`` that fronts the API server."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": str(SERVICE_CIDR[1]), "clusterIPs": [str(SERVICE_CIDR[1])],
                     "internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
                     "sessionAffinity": "None", "type": "ClusterIP"},
            "status": {"loadBalancer": {}}}


# --- other kinds --------------------------------------------------------------------------------------------

def default_secret(secret: dict) -> dict:
    out = dict(secret)
    out.setdefault("type", "Opaque")
    string_data = out.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = dict(out.get("data") or {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        out["data"] = data
    return out


def default_event(ev: dict) -> dict:
    """A core Event with the zero values Go writes out for what it leaves unset."""
    out = dict(ev)
    out.setdefault("involvedObject", {})
    out.setdefault("source", {})
    for k in ("firstTimestamp", "lastTimestamp", "eventTime"):
        out.setdefault(k, None)
    for k in ("reportingComponent", "reportingInstance"):
        out.setdefault(k, "")
    return out


def default_daemonset(ds: dict, old: dict | None) -> dict:
    """The template generation annotation: 1 at creation, one more each time the pod template changes."""
    meta = dict(_meta(ds))
    ann = dict(meta.get("annotations") or {})
    if old is None:
        gen = 1
    else:
        prev = (_meta(old).get("annotations") or {}).get(DS_TEMPLATE_GENERATION, "1")
        try:
            gen = int(prev)
        except ValueError:
            gen = 1
        if (ds.get("spec") or {}).get("template") != (old.get("spec") or {}).get("template"):
            gen += 1
    ann[DS_TEMPLATE_GENERATION] = str(gen)
    meta["annotations"] = ann
    out = dict(ds)
    out["metadata"] = meta
    return out


PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"


def protect_volume(obj: dict) -> dict:
    """The StorageObjectInUseProtection admission: a claim or a volume is not deleted while in use."""
    fin = PVC_PROTECTION if obj.get("kind") == "PersistentVolumeClaim" else PV_PROTECTION
    meta = dict(obj.get("metadata") or {})
    if fin in (meta.get("finalizers") or ()):
        return obj
    meta["finalizers"] = list(meta.get("finalizers") or ()) + [fin]
    return {**obj, "metadata": meta}


def taint_new_node(node: dict) -> dict:
    """A Node created by a client starts not ready (TaintNodesByCondition) unless it says it is Ready."""
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or () if isinstance(c, dict))
    spec = dict(node.get("spec") or {})
    taints = list(spec.get("taints") or ())
    if ready or any(isinstance(t, dict) and t.get("key") == NOT_READY for t in taints):
        return node
    taints.append({"key": NOT_READY, "effect": "NoSchedule"})
    spec["taints"] = taints
    out = dict(node)
    out["spec"] = spec
    return out


def namespace_objects(ns: str, ca_pem: str | None) -> list[dict]:
    """What kube-controller-manager puts in every namespace: the ServiceAccount ``default`` and the ConfigMap
    ``kube-root-ca.crt``."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                      "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
         "data": {"ca.crt": ca_pem or ""}},
    ]
