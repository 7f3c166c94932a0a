"""Server-side Table output (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``).

``kubectl get`` asks the API server for a Table and prints its rows; the
columns are the server's: kube-apiserver's printers for built-in kinds (the
same columns as a real cluster, ``-o wide`` ones at priority 1) and the CRD's
``additionalPrinterColumns`` for custom resources, evaluated with a small
JSONPath (the subset printer columns use: fields, escaped dots, indexes,
``[*]`` and ``[?(@.field=="value")]`` filters).

Ages are measured on the sandbox's clock (simulated time), so ``AGE`` agrees
with the timestamps the simulated cluster writes at ``--speed N``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from ..kube.times import parse_time

# --- durations ----------------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def age(ts: Any, now: float) -> str:
    t = parse_time(ts) if isinstance(ts, str) else None
    if t is None:
        return "<unknown>"
    return human_duration(now - t)


# --- JSONPath (the subset printer columns use) ---------------------------------------------------

_FILTER = re.compile(r"""^\?\(@((?:\.[^=!<>]+?)+)\s*(==|!=)\s*(?:"([^"]*)"|'([^']*)'|([^)\s]*))\s*\)$""")


def _split_fields(path: str) -> list[str]:
    """``.a.b\\.c`` -> ["a", "b.c"]."""
    out, cur, i = [], [], 0
    while i < len(path):
        ch = path[i]
        if ch == "\\" and i + 1 < len(path):
            cur.append(path[i + 1])
            i += 2
            continue
        if ch == ".":
            if cur:
                out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    if cur:
        out.append("".join(cur))
    return out


def _tokens(expr: str) -> list[tuple[str, Any]]:
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    out: list[tuple[str, Any]] = []
    i = 0
    buf = []
    while i < len(expr):
        ch = expr[i]
        if ch == "\\" and i + 1 < len(expr):
            buf.append(expr[i:i + 2])
            i += 2
            continue
        if ch == "[":
            if buf:
                out.extend(("field", f) for f in _split_fields("".join(buf)))
                buf = []
            depth, j = 0, i
            while j < len(expr):
                if expr[j] == "[":
                    depth += 1
                elif expr[j] == "]":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            inner = expr[i + 1:j].strip()
            i = j + 1
            if inner == "*":
                out.append(("all", None))
            elif inner.startswith("?"):
                m = _FILTER.match(inner)
                if not m:
                    raise ValueError(f"unsupported filter {inner!r}")
                fields = _split_fields(m.group(1))
                value = next(v for v in m.group(3, 4, 5) if v is not None)
                out.append(("filter", (fields, m.group(2), value)))
            elif re.fullmatch(r"-?\d+", inner):
                out.append(("index", int(inner)))
            else:
                out.append(("field", inner.strip("'\"")))
            continue
        buf.append(ch)
        i += 1
    if buf:
        out.extend(("field", f) for f in _split_fields("".join(buf)))
    return out


def _get_path(obj: Any, fields: list[str]) -> Any:
    for f in fields:
        if not isinstance(obj, dict) or f not in obj:
            return None
        obj = obj[f]
    return obj


def jsonpath(obj: Any, expr: str) -> list[Any]:
    """Every value ``expr`` selects in ``obj``."""
    try:
        toks = _tokens(expr)
    except ValueError:
        return []
    cur = [obj]
    for kind, arg in toks:
        nxt = []
        for v in cur:
            if kind == "field":
                if isinstance(v, dict) and arg in v:
                    nxt.append(v[arg])
            elif kind == "index":
                if isinstance(v, list) and -len(v) <= arg < len(v):
                    nxt.append(v[arg])
            elif kind == "all":
                if isinstance(v, list):
                    nxt.extend(v)
                elif isinstance(v, dict):
                    nxt.extend(v.values())
            elif kind == "filter":
                fields, op, value = arg
                if isinstance(v, list):
                    for item in v:
                        got = _get_path(item, fields)
                        s = None if got is None else (json.dumps(got) if isinstance(got, bool) else str(got))
                        if (op == "==" and s == value) or (op == "!=" and s is not None and s != value):
                            nxt.append(item)
        cur = nxt
    return cur


# --- columns --------------------------------------------------------------------------------------


def col(name: str, type_: str = "string", priority: int = 0, fmt: str = "", description: str = "") -> dict:
    return {"name": name, "type": type_, "format": fmt, "description": description or name, "priority": priority}


NAME_COL = col("Name", fmt="name", description="Name must be unique within a namespace.")


def _meta(o: dict) -> dict:
    return o.get("metadata") or {}


def _spec(o: dict) -> dict:
    return o.get("spec") or {}


def _status(o: dict) -> dict:
    return o.get("status") or {}


def _cond(o: dict, t: str) -> dict | None:
    for c in _status(o).get("conditions") or ():
        if c.get("type") == t:
            return c
    return None


def _containers(tmpl_spec: dict) -> tuple[str, str]:
    cs = tmpl_spec.get("containers") or []
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def _selector_str(sel: dict | None) -> str:
    from ..kube.selectors import selector_to_string

    return selector_to_string(sel) or "<none>"


def _none(v: Any) -> Any:
    return "<none>" if v in (None, "", []) else v


def _pod_row(p: dict, now: float) -> list:
    spec, st = _spec(p), _status(p)
    containers = spec.get("containers") or []
    total = len(containers)
    statuses = st.get("containerStatuses") or []
    if statuses:
        ready = sum(1 for c in statuses if c.get("ready"))
        restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    else:
        c = _cond(p, "Ready")
        ready = total if c is not None and c.get("status") == "True" else 0
        restarts = 0
    reason = st.get("reason") or st.get("phase") or "Unknown"
    if reason == "Succeeded":
        reason = "Completed"
    elif reason == "Failed":
        reason = "Error"
    for cs in statuses:
        w = (cs.get("state") or {}).get("waiting") or {}
        if w.get("reason"):
            reason = w["reason"]
    if _meta(p).get("deletionTimestamp"):
        reason = "Terminating"
    elif st.get("phase") == "Pending" and not spec.get("nodeName"):
        gates = spec.get("schedulingGates")
        reason = "SchedulingGated" if gates else "Pending"
    gates = ",".join(g.get("conditionType", "") for g in spec.get("readinessGates") or ()) or "<none>"
    return [_meta(p).get("name"), f"{ready}/{total}", reason, str(restarts), age(_meta(p).get("creationTimestamp"), now),
            _none(st.get("podIP")), _none(spec.get("nodeName")), _none(st.get("nominatedNodeName")), gates]


def _node_row(n: dict, now: float) -> list:
    c = _cond(n, "Ready")
    status = "Unknown" if c is None or c.get("status") == "Unknown" else ("Ready" if c.get("status") == "True" else "NotReady")
    if _spec(n).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = _meta(n).get("labels") or {}
    roles = sorted({k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k}
                   | {v for k, v in labels.items() if k == "kubernetes.io/role" and v})
    info = _status(n).get("nodeInfo") or {}
    addrs = _status(n).get("addresses") or []

    def addr(t: str) -> str:
        for a in addrs:
            if a.get("type") == t:
                return a.get("address", "")
        return "<none>"

    return [_meta(n).get("name"), status, ",".join(r for r in roles if r) or "<none>",
            age(_meta(n).get("creationTimestamp"), now), info.get("kubeletVersion", ""),
            addr("InternalIP"), addr("ExternalIP"), info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


def _deploy_row(d: dict, now: float) -> list:
    spec, st = _spec(d), _status(d)
    tspec = ((spec.get("template") or {}).get("spec") or {})
    names, images = _containers(tspec)
    return [_meta(d).get("name"), f"{int(st.get('readyReplicas') or 0)}/{int(spec.get('replicas', 1) or 0)}",
            int(st.get("updatedReplicas") or 0), int(st.get("availableReplicas") or 0),
            age(_meta(d).get("creationTimestamp"), now), names, images, _selector_str(spec.get("selector"))]


def _rs_row(d: dict, now: float) -> list:
    spec, st = _spec(d), _status(d)
    names, images = _containers(((spec.get("template") or {}).get("spec") or {}))
    return [_meta(d).get("name"), int(spec.get("replicas", 1) or 0), int(st.get("replicas") or 0),
            int(st.get("readyReplicas") or 0), age(_meta(d).get("creationTimestamp"), now), names, images,
            _selector_str(spec.get("selector"))]


def _sts_row(d: dict, now: float) -> list:
    spec, st = _spec(d), _status(d)
    names, images = _containers(((spec.get("template") or {}).get("spec") or {}))
    return [_meta(d).get("name"), f"{int(st.get('readyReplicas') or 0)}/{int(spec.get('replicas', 1) or 0)}",
            age(_meta(d).get("creationTimestamp"), now), names, images]


def _ds_row(d: dict, now: float) -> list:
    spec, st = _spec(d), _status(d)
    tspec = ((spec.get("template") or {}).get("spec") or {})
    names, images = _containers(tspec)
    sel = ",".join(f"{k}={v}" for k, v in sorted((tspec.get("nodeSelector") or {}).items())) or "<none>"
    return [_meta(d).get("name"), int(st.get("desiredNumberScheduled") or 0), int(st.get("currentNumberScheduled") or 0),
            int(st.get("numberReady") or 0), int(st.get("updatedNumberScheduled") or 0),
            int(st.get("numberAvailable") or 0), sel, age(_meta(d).get("creationTimestamp"), now), names, images,
            _selector_str(spec.get("selector"))]


def _job_row(j: dict, now: float) -> list:
    spec, st = _spec(j), _status(j)
    completions = spec.get("completions")
    succeeded = int(st.get("succeeded") or 0)
    comp = f"{succeeded}/{completions}" if completions is not None else f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    if _cond(j, "Complete") and _cond(j, "Complete").get("status") == "True":
        status = "Complete"
    elif _cond(j, "Failed") and _cond(j, "Failed").get("status") == "True":
        status = "Failed"
    elif _cond(j, "Suspended") and _cond(j, "Suspended").get("status") == "True":
        status = "Suspended"
    elif _meta(j).get("deletionTimestamp"):
        status = "Terminating"
    else:
        status = "Running"
    start, end = parse_time(st.get("startTime")), parse_time(st.get("completionTime"))
    duration = human_duration((end if end is not None else now) - start) if start is not None else ""
    names, images = _containers(((spec.get("template") or {}).get("spec") or {}))
    return [_meta(j).get("name"), status, comp, duration, age(_meta(j).get("creationTimestamp"), now), names, images,
            _selector_str(spec.get("selector"))]


def _pdb_row(p: dict, now: float) -> list:
    spec, st = _spec(p), _status(p)
    return [_meta(p).get("name"), "N/A" if spec.get("minAvailable") is None else str(spec["minAvailable"]),
            "N/A" if spec.get("maxUnavailable") is None else str(spec["maxUnavailable"]),
            int(st.get("disruptionsAllowed") or 0), age(_meta(p).get("creationTimestamp"), now)]


def _ns_row(n: dict, now: float) -> list:
    return [_meta(n).get("name"), _status(n).get("phase") or "Active", age(_meta(n).get("creationTimestamp"), now)]


def _event_row(e: dict, now: float) -> list:
    # a core Event, or an events.k8s.io/v1 one (whose deprecated* fields are the core ones)
    io = e.get("involvedObject") or e.get("regarding") or {}
    last = e.get("lastTimestamp") or e.get("deprecatedLastTimestamp") or e.get("eventTime") or \
        _meta(e).get("creationTimestamp")
    first = e.get("firstTimestamp") or e.get("deprecatedFirstTimestamp") or e.get("eventTime") or \
        _meta(e).get("creationTimestamp")
    src = (e.get("source") or e.get("deprecatedSource") or {}).get("component") or e.get("reportingComponent") or \
        e.get("reportingController") or ""
    count = e.get("count") or e.get("deprecatedCount") or (e.get("series") or {}).get("count") or 1
    return [age(last, now), e.get("type", ""), e.get("reason", ""), f"{str(io.get('kind', '')).lower()}/{io.get('name', '')}",
            io.get("fieldPath", ""), src, e.get("message") or e.get("note") or "", age(first, now),
            int(count), _meta(e).get("name")]


def _lease_row(lz: dict, now: float) -> list:
    return [_meta(lz).get("name"), _spec(lz).get("holderIdentity") or "", age(_meta(lz).get("creationTimestamp"), now)]


def _crd_row(c: dict, now: float) -> list:
    return [_meta(c).get("name"), _meta(c).get("creationTimestamp") or ""]


def _cm_row(c: dict, now: float) -> list:
    return [_meta(c).get("name"), len(c.get("data") or {}) + len(c.get("binaryData") or {}),
            age(_meta(c).get("creationTimestamp"), now)]


def _secret_row(c: dict, now: float) -> list:
    return [_meta(c).get("name"), c.get("type") or "Opaque", len(c.get("data") or {}),
            age(_meta(c).get("creationTimestamp"), now)]


def _svc_row(s: dict, now: float) -> list:
    spec = _spec(s)
    ports = ",".join(f"{p.get('port')}/{p.get('protocol') or 'TCP'}" for p in spec.get("ports") or ()) or "<none>"
    return [_meta(s).get("name"), spec.get("type") or "ClusterIP", spec.get("clusterIP") or "<none>", "<none>", ports,
            age(_meta(s).get("creationTimestamp"), now), _none(",".join(f"{k}={v}" for k, v in
                                                                     sorted((spec.get("selector") or {}).items())))]


def _pc_row(p: dict, now: float) -> list:
    return [_meta(p).get("name"), int(p.get("value") or 0), bool(p.get("globalDefault")),
            age(_meta(p).get("creationTimestamp"), now), p.get("preemptionPolicy") or "PreemptLowerPriority"]


def _generic_row(o: dict, now: float) -> list:
    return [_meta(o).get("name"), age(_meta(o).get("creationTimestamp"), now)]


def _sa_row(o: dict, now: float) -> list:
    return [_meta(o).get("name"), len(o.get("secrets") or ()), age(_meta(o).get("creationTimestamp"), now)]


def _sc_row(o: dict, now: float) -> list:
    name = _meta(o).get("name")
    if (_meta(o).get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true":
        name = f"{name} (default)"
    return [name, o.get("provisioner") or "", o.get("reclaimPolicy") or "Delete",
            o.get("volumeBindingMode") or "Immediate", bool(o.get("allowVolumeExpansion")),
            age(_meta(o).get("creationTimestamp"), now)]


def _access_modes(modes: Any) -> str:
    short = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    return ",".join(short.get(m, m) for m in modes or ())


def _storage(res: Any) -> str:
    v = (res or {}).get("storage")
    return "" if v is None else str(v)


def _pv_row(o: dict, now: float) -> list:
    spec, st = _spec(o), _status(o)
    ref = spec.get("claimRef") or {}
    claim = f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else ""
    return [_meta(o).get("name"), _storage(spec.get("capacity")), _access_modes(spec.get("accessModes")),
            spec.get("persistentVolumeReclaimPolicy") or "", st.get("phase") or "", claim,
            spec.get("storageClassName") or "", spec.get("volumeAttributesClassName") or "<unset>",
            st.get("reason") or "", age(_meta(o).get("creationTimestamp"), now), spec.get("volumeMode") or "Filesystem"]


def _pvc_row(o: dict, now: float) -> list:
    spec, st = _spec(o), _status(o)
    bound = st.get("phase") == "Bound"
    return [_meta(o).get("name"), st.get("phase") or "", spec.get("volumeName") or "",
            _storage(st.get("capacity")) if bound else "", _access_modes(st.get("accessModes")) if bound else "",
            spec.get("storageClassName") or "", spec.get("volumeAttributesClassName") or "<unset>",
            age(_meta(o).get("creationTimestamp"), now), spec.get("volumeMode") or "Filesystem"]


def _created_at(o: dict, now: float) -> list:
    return [_meta(o).get("name"), _meta(o).get("creationTimestamp") or ""]


def _binding_row(o: dict, now: float) -> list:
    ref = o.get("roleRef") or {}
    subjects = [x for x in o.get("subjects") or () if isinstance(x, dict)]
    users = ",".join(x.get("name", "") for x in subjects if x.get("kind") == "User")
    groups = ",".join(x.get("name", "") for x in subjects if x.get("kind") == "Group")
    sas = ",".join(f"{x.get('namespace', '')}/{x.get('name', '')}" for x in subjects if x.get("kind") == "ServiceAccount")
    return [_meta(o).get("name"), f"{ref.get('kind', '')}/{ref.get('name', '')}", age(_meta(o).get("creationTimestamp"), now),
            users, groups, sas]


def _rc_row(o: dict, now: float) -> list:
    return [_meta(o).get("name"), o.get("handler") or "", age(_meta(o).get("creationTimestamp"), now)]


AGE = col("Age", description="CreationTimestamp is a timestamp representing the server time when this object was created.")
CONTAINERS = col("Containers", priority=1, description="Names of each container in the template.")
IMAGES = col("Images", priority=1, description="Images referenced by each container in the template.")
SELECTOR = col("Selector", priority=1, description="Label selector for pods.")

BUILTIN: dict[str, tuple[list[dict], Callable[[dict, float], list]]] = {
    "Pod": ([NAME_COL, col("Ready"), col("Status"), col("Restarts", "string"), AGE, col("IP", priority=1),
             col("Node", priority=1), col("Nominated Node", priority=1), col("Readiness Gates", priority=1)], _pod_row),
    "Node": ([NAME_COL, col("Status"), col("Roles"), AGE, col("Version"), col("Internal-IP", priority=1),
              col("External-IP", priority=1), col("OS-Image", priority=1), col("Kernel-Version", priority=1),
              col("Container-Runtime", priority=1)], _node_row),
    "Deployment": ([NAME_COL, col("Ready"), col("Up-to-date"), col("Available"), AGE,
                    CONTAINERS, IMAGES, SELECTOR], _deploy_row),
    "ReplicaSet": ([NAME_COL, col("Desired", "integer"), col("Current", "integer"), col("Ready", "integer"), AGE,
                    CONTAINERS, IMAGES, SELECTOR], _rs_row),
    "StatefulSet": ([NAME_COL, col("Ready"), AGE, CONTAINERS, IMAGES], _sts_row),
    "DaemonSet": ([NAME_COL, col("Desired", "integer"), col("Current", "integer"), col("Ready", "integer"),
                   col("Up-to-date", "integer"), col("Available", "integer"), col("Node Selector"), AGE, CONTAINERS,
                   IMAGES, SELECTOR], _ds_row),
    "Job": ([NAME_COL, col("Status"), col("Completions"), col("Duration"), AGE, CONTAINERS, IMAGES, SELECTOR], _job_row),
    "PodDisruptionBudget": ([NAME_COL, col("Min Available"), col("Max Unavailable"),
                             col("Allowed Disruptions", "integer"), AGE], _pdb_row),
    "Namespace": ([NAME_COL, col("Status"), AGE], _ns_row),
    "Event": ([col("Last Seen"), col("Type"), col("Reason"), col("Object"), col("Subobject", priority=1),
               col("Source", priority=1), col("Message"), col("First Seen", priority=1),
               col("Count", priority=1), col("Name", priority=1, fmt="name")], _event_row),
    "Lease": ([NAME_COL, col("Holder"), AGE], _lease_row),
    "CustomResourceDefinition": ([NAME_COL, col("Created At", "date")], _crd_row),
    "ConfigMap": ([NAME_COL, col("Data"), AGE], _cm_row),
    "Secret": ([NAME_COL, col("Type"), col("Data"), AGE], _secret_row),
    "ServiceAccount": ([NAME_COL, col("Secrets"), AGE], _sa_row),
    "StorageClass": ([NAME_COL, col("Provisioner"), col("ReclaimPolicy"), col("VolumeBindingMode"),
                      col("AllowVolumeExpansion"), AGE], _sc_row),
    "PersistentVolume": ([NAME_COL, col("Capacity"), col("Access Modes"), col("Reclaim Policy"), col("Status"),
                          col("Claim"), col("StorageClass"), col("VolumeAttributesClass"), col("Reason"), AGE,
                          col("VolumeMode", priority=1)], _pv_row),
    "PersistentVolumeClaim": ([NAME_COL, col("Status"), col("Volume"), col("Capacity"), col("Access Modes"),
                               col("StorageClass"), col("VolumeAttributesClass"), AGE, col("VolumeMode", priority=1)],
                              _pvc_row),
    "Role": ([NAME_COL, col("Created At", "date")], _created_at),
    "ClusterRole": ([NAME_COL, col("Created At", "date")], _created_at),
    "RoleBinding": ([NAME_COL, col("Role"), AGE, col("Users", priority=1), col("Groups", priority=1),
                     col("ServiceAccounts", priority=1)], _binding_row),
    "ClusterRoleBinding": ([NAME_COL, col("Role"), AGE, col("Users", priority=1), col("Groups", priority=1),
                            col("ServiceAccounts", priority=1)], _binding_row),
    "RuntimeClass": ([NAME_COL, col("Handler"), AGE], _rc_row),
    "Service": ([NAME_COL, col("Type"), col("Cluster-IP"), col("External-IP"), col("Port(s)"), AGE,
                 col("Selector", priority=1)], _svc_row),
    "PriorityClass": ([NAME_COL, col("Value", "integer"), col("Global-Default", "boolean"), AGE,
                       col("PreemptionPolicy")], _pc_row),
}
GENERIC = ([NAME_COL, AGE], _generic_row)


def _cell(value: Any, type_: str, now: float) -> Any:
    if value is None:
        return None
    if type_ == "date":
        return age(value, now) if isinstance(value, str) else value
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if type_ == "integer":
        try:
            return int(value)
        except (TypeError, ValueError):
            return value
    if type_ == "string":
        return value if isinstance(value, str) else (json.dumps(value) if isinstance(value, bool) else str(value))
    return value


def crd_table(columns: list[dict]) -> tuple[list[dict], Callable[[dict, float], list]]:
    """Columns and a row function from a CRD's additionalPrinterColumns (a column without a description is
    described by its JSONPath, as kube-apiserver does)."""
    defs = [NAME_COL] + [col(c.get("name", ""), c.get("type", "string"), int(c.get("priority") or 0),
                            c.get("format", ""), c.get("description") or
                            f"Custom resource definition column (in JSONPath format): {c.get('jsonPath', '')}")
                         for c in columns]

    def row(o: dict, now: float) -> list:
        cells = [_meta(o).get("name")]
        for c in columns:
            vals = jsonpath(o, c.get("jsonPath", ""))
            cells.append(_cell(vals[0] if vals else None, c.get("type", "string"), now))
        return cells

    return defs, row


def partial_metadata(obj: dict) -> dict:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": _meta(obj)}


def table(objs: list[dict], columns: list[dict], row: Callable[[dict, float], list], now: float,
          resource_version: str, include_object: str = "Metadata", headers: bool = True) -> dict:
    rows = []
    for o in objs:
        r: dict[str, Any] = {"cells": row(o, now)}
        if include_object == "Object":
            r["object"] = o
        elif include_object != "None":
            r["object"] = partial_metadata(o)
        rows.append(r)
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version}}
    out["columnDefinitions"] = columns if headers else []
    out["rows"] = rows
    return out
