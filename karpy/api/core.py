"""Kubernetes built-in kinds: what the API server rejects or defaults that matters for scheduling.

Covers v1 Pod, Node, Namespace, PersistentVolumeClaim, PersistentVolume;
apps/v1 Deployment, ReplicaSet, StatefulSet, DaemonSet; batch/v1 Job;
policy/v1 PodDisruptionBudget; node.k8s.io/v1 RuntimeClass;
scheduling.k8s.io/v1 PriorityClass; storage.k8s.io/v1 StorageClass.

Fields that do not affect scheduling (probes, env, security contexts, volume
sources...) are accepted as they are. Unknown fields are reported, as
``kubectl apply`` does with its default strict field validation.

Defaults applied, as the API server applies them: pod ``restartPolicy``
Always, ``terminationGracePeriodSeconds`` 30, ``dnsPolicy`` ClusterFirst,
``schedulerName`` default-scheduler, container ``imagePullPolicy``,
``terminationMessagePath``/``Policy``, port ``protocol`` TCP, host ports on
``hostNetwork`` pods, resource ``requests`` from ``limits`` (the API server does
this for Pods; karpy also does it for pod templates, so that every pod a
controller stamps out carries the same requests), workload ``replicas`` 1,
strategies, ``revisionHistoryLimit``, Job ``parallelism``/``completions``/
``backoffLimit``/... and its ``job-name`` labels and generated selector, PVC and
PV ``volumeMode``, PV ``persistentVolumeReclaimPolicy``, StorageClass
``reclaimPolicy``/``volumeBindingMode``, PriorityClass ``preemptionPolicy``,
and Node ``status.allocatable`` from ``status.capacity``.
"""

from __future__ import annotations

import json

import uuid
from fractions import Fraction
from typing import Any

from ..resources import quantity_range_error, to_units
from . import names
from .meta import object_meta, template_meta, validate_label_name, validate_labels
from .schema import (
    Ctx,
    Node,
    arr,
    as_dict,
    as_list,
    boolean,
    child,
    duplicate,
    fmt_value,
    forbidden,
    get,
    hkey,
    index,
    int32,
    int64,
    int_or_string,
    invalid,
    is_int,
    not_found,
    not_supported,
    obj,
    opaque,
    opaque_obj,
    parse_quantity,
    quantity_map,
    required,
    string,
    string_map,
)

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NODE_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")

# --- label selectors (metav1) -------------------------------------------------


def check_label_selector(sel: dict, path: str, ctx: Ctx) -> None:
    validate_labels(sel.get("matchLabels"), child(path, "matchLabels"), ctx)
    for i, req in enumerate(as_list(sel.get("matchExpressions"))):
        if not isinstance(req, dict):
            continue
        p = index(child(path, "matchExpressions"), i)
        op = req.get("operator")
        values = req.get("values")
        has_values = isinstance(values, list) and len(values) > 0
        if op is None:
            ctx.err(child(p, "operator"), required())
        elif op in ("In", "NotIn"):
            if not has_values:
                ctx.err(child(p, "values"), required("must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if has_values:
                ctx.err(child(p, "values"), forbidden("may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        elif isinstance(op, str):
            ctx.err(child(p, "operator"), invalid(op, "not a valid selector operator"))
        key = req.get("key")
        if key is None:
            ctx.err(child(p, "key"), required())
        else:
            validate_label_name(key, child(p, "key"), ctx)
        for j, val in enumerate(as_list(values)):
            if isinstance(val, str):
                for msg in names.is_valid_label_value(val):
                    ctx.err(index(child(p, "values"), j), invalid(val, msg))


def label_selector() -> Node:
    expr = obj({"key": string(), "operator": string(), "values": arr(string())})
    return obj({"matchLabels": string_map(), "matchExpressions": arr(expr)}, checks=[check_label_selector])


def selector_matches(sel: Any, labels: Any) -> bool:
    """Does a LabelSelector select this label set? (nil selector: nothing; empty: everything)."""
    if not isinstance(sel, dict):
        return False
    labels = as_dict(labels)
    for k, v in as_dict(sel.get("matchLabels")).items():
        if labels.get(k) != v:
            return False
    for req in as_list(sel.get("matchExpressions")):
        if not isinstance(req, dict):
            return False
        key, op, values = req.get("key"), req.get("operator"), as_list(req.get("values"))
        if op == "In":
            if key not in labels or labels[key] not in values:
                return False
        elif op == "NotIn":
            if key in labels and labels[key] in values:
                return False
        elif op == "Exists":
            if key not in labels:
                return False
        elif op == "DoesNotExist":
            if key in labels:
                return False
        else:
            return False
    return True


def selector_is_empty(sel: Any) -> bool:
    return isinstance(sel, dict) and not sel.get("matchLabels") and not sel.get("matchExpressions")


# --- node selectors -----------------------------------------------------------


def check_node_selector_requirement(req: dict, path: str, ctx: Ctx) -> None:
    op = req.get("operator")
    values = req.get("values")
    n = len(values) if isinstance(values, list) else 0
    if op in ("In", "NotIn"):
        if n == 0:
            ctx.err(child(path, "values"), required("must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist"):
        if n > 0:
            ctx.err(child(path, "values"), forbidden("may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt"):
        if n != 1:
            ctx.err(child(path, "values"), required("must be specified single value when `operator` is 'Lt' or 'Gt'"))
        elif isinstance(values[0], str) and not _is_integer(values[0]):
            # The API server lets this through, but neither kube-scheduler nor Karpenter can use it (the pod
            # could never be scheduled); karpy refuses it rather than simulate a pod nothing would place.
            ctx.err(
                index(child(path, "values"), 0),
                invalid(values[0], f"must be an integer for operator {op}"),
            )
    elif op is None:
        ctx.err(child(path, "operator"), required())
    else:
        ctx.err(child(path, "operator"), not_supported(op, NODE_SELECTOR_OPS))
    key = req.get("key")
    validate_label_name(key if key is not None else "", child(path, "key"), ctx)


def _is_integer(s: str) -> bool:
    """A decimal integer, optionally signed, as Go's strconv.Atoi reads it (any size)."""
    t = s[1:] if s[:1] in "+-" else s
    return t.isascii() and t.isdigit()


def check_node_field_requirement(req: dict, path: str, ctx: Ctx) -> None:
    op = req.get("operator")
    values = as_list(req.get("values"))
    if op in ("In", "NotIn"):
        if len(values) != 1:
            ctx.err(
                child(path, "values"),
                required("must be only one value when `operator` is 'In' or 'NotIn' for node field selector"),
            )
    elif op is None:
        ctx.err(child(path, "operator"), required())
    else:
        ctx.err(child(path, "operator"), not_supported(op, ("In", "NotIn")))
    if req.get("key") != "metadata.name":
        ctx.err(child(path, "key"), not_supported(req.get("key", ""), ("metadata.name",)))


def node_selector_term() -> Node:
    req = obj({"key": string(), "operator": string(), "values": arr(string())}, checks=[check_node_selector_requirement])
    fld = obj({"key": string(), "operator": string(), "values": arr(string())}, checks=[check_node_field_requirement])
    return obj({"matchExpressions": arr(req), "matchFields": arr(fld)})


def _check_terms_nonempty(sel: dict, path: str, ctx: Ctx) -> None:
    terms = sel.get("nodeSelectorTerms")
    if terms is None or (isinstance(terms, list) and not terms):
        ctx.err(child(path, "nodeSelectorTerms"), required("must have at least one node selector term"))


def node_selector() -> Node:
    return obj({"nodeSelectorTerms": arr(node_selector_term())}, checks=[_check_terms_nonempty])


def _check_weight(item: dict, path: str, ctx: Ctx) -> None:
    w = item.get("weight", 0)
    if is_int(w) and not 1 <= w <= 100:
        ctx.err(child(path, "weight"), invalid(w, "must be in the range 1-100"))


def _check_pod_affinity_term(term: dict, path: str, ctx: Ctx) -> None:
    tk = term.get("topologyKey")
    if tk is None or tk == "":
        ctx.err(child(path, "topologyKey"), required("can not be empty"))
    else:
        validate_label_name(tk, child(path, "topologyKey"), ctx)
    for i, ns in enumerate(as_list(term.get("namespaces"))):
        if isinstance(ns, str):
            for msg in names.is_dns1123_label(ns):
                ctx.err(index(child(path, "namespaces"), i), invalid(ns, msg))
    _check_match_label_keys(term, path, ctx, ("matchLabelKeys", "mismatchLabelKeys"))


def _selector_keys(sel: Any) -> set:
    sel = as_dict(sel)
    keys = set(as_dict(sel.get("matchLabels")))
    keys.update(hkey(e.get("key"))[0] for e in as_list(sel.get("matchExpressions")) if isinstance(e, dict))
    return keys


def _check_match_label_keys(term: dict, path: str, ctx: Ctx, fields: tuple[str, ...]) -> None:
    sel = term.get("labelSelector")
    in_selector = _selector_keys(sel)
    seen: dict[str, str] = {}
    for f in fields:
        for i, k in enumerate(as_list(term.get(f))):
            p = index(child(path, f), i)
            if not isinstance(k, str):
                continue
            validate_label_name(k, p, ctx)
            if sel is None:
                ctx.err(p, forbidden("must not be specified when labelSelector is not set"))
            elif k in in_selector and f == "matchLabelKeys" and "mismatchLabelKeys" not in fields:
                ctx.err(p, invalid(k, "exists in both matchLabelKeys and labelSelector"))
            if k in seen and seen[k] != f:
                ctx.err(p, invalid(k, "exists in both matchLabelKeys and mismatchLabelKeys"))
            seen.setdefault(k, f)


def affinity() -> Node:
    pod_term = obj(
        {
            "labelSelector": label_selector(),
            "namespaceSelector": label_selector(),
            "namespaces": arr(string()),
            "topologyKey": string(),
            "matchLabelKeys": arr(string()),
            "mismatchLabelKeys": arr(string()),
        },
        checks=[_check_pod_affinity_term],
    )
    weighted_pod_term = obj({"weight": int32(), "podAffinityTerm": pod_term}, checks=[_check_weight])
    pod_aff = obj(
        {
            "requiredDuringSchedulingIgnoredDuringExecution": arr(pod_term),
            "preferredDuringSchedulingIgnoredDuringExecution": arr(weighted_pod_term),
        }
    )
    node_aff = obj(
        {
            "requiredDuringSchedulingIgnoredDuringExecution": node_selector(),
            "preferredDuringSchedulingIgnoredDuringExecution": arr(
                obj({"weight": int32(), "preference": node_selector_term()}, checks=[_check_weight])
            ),
        }
    )
    return obj({"nodeAffinity": node_aff, "podAffinity": pod_aff, "podAntiAffinity": pod_aff})


# --- tolerations and taints ---------------------------------------------------


def check_toleration(t: dict, path: str, ctx: Ctx) -> None:
    key = t.get("key") or ""
    op = t.get("operator") or ""
    value = t.get("value") or ""
    effect = t.get("effect") or ""
    if key:
        validate_label_name(key, child(path, "key"), ctx)
    if not key and op != "Exists":
        ctx.err(
            child(path, "operator"),
            invalid(op, 'operator must be Exists when `key` is empty, which means "match all values and all keys"'),
        )
    if t.get("tolerationSeconds") is not None and effect != "NoExecute":
        ctx.err(child(path, "effect"), invalid(effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    if op in ("Equal", ""):
        if isinstance(value, str):
            msgs = names.is_valid_label_value(value)
            if msgs:
                ctx.err(child(path, "operator"), invalid(value, ";".join(msgs)))
    elif op == "Exists":
        if value:
            ctx.err(child(path, "operator"), invalid(t, "value must be empty when `operator` is 'Exists'"))
    else:
        ctx.err(child(path, "operator"), not_supported(op, ("Equal", "Exists")))
    if effect and effect not in TAINT_EFFECTS:
        ctx.err(child(path, "effect"), not_supported(effect, TAINT_EFFECTS))


def tolerations() -> Node:
    return arr(
        obj(
            {
                "key": string(),
                "operator": string(),
                "value": string(),
                "effect": string(),
                "tolerationSeconds": int64(),
            },
            checks=[check_toleration],
        )
    )


def _check_node_taints(taints: list, path: str, ctx: Ctx) -> None:
    seen: set = set()
    for i, t in enumerate(taints):
        if not isinstance(t, dict):
            continue
        p = index(path, i)
        key = t.get("key", "")
        validate_label_name(key if isinstance(key, str) else "", child(p, "key"), ctx)
        value = t.get("value", "")
        if isinstance(value, str):
            msgs = names.is_valid_label_value(value)
            if msgs:
                ctx.err(child(p, "value"), invalid(value, ";".join(msgs)))
        effect = t.get("effect")
        if not effect:
            ctx.err(child(p, "effect"), required())
        elif effect not in TAINT_EFFECTS:
            ctx.err(child(p, "effect"), not_supported(effect, TAINT_EFFECTS))
        pair = hkey(key, effect)
        if pair in seen:
            ctx.err(p, f"Duplicate value: {fmt_value(t)}: taints must be unique by key and effect pair")
        seen.add(pair)


def node_taints() -> Node:
    item = obj({"key": string(), "value": string(), "effect": string(), "timeAdded": string()})
    return arr(item, checks=[_check_node_taints])


# --- resources ----------------------------------------------------------------

STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def _is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _q(v: Any) -> Fraction | None:
    try:
        return parse_quantity(v)
    except (ValueError, TypeError, ZeroDivisionError):
        return None


def _default_requests_from_limits(res: dict, ctx: Ctx) -> None:
    limits = res.get("limits")
    if not isinstance(limits, dict) or not limits:
        return
    requests = res.get("requests")
    if requests is None:
        requests = res["requests"] = {}
    if not isinstance(requests, dict):
        return
    for k, v in limits.items():
        if k not in requests and _q(v) is not None:
            requests[k] = v


def check_resource_requirements(res: dict, path: str, ctx: Ctx, for_pod: bool = False) -> None:
    limits = as_dict(res.get("limits"))
    requests = as_dict(res.get("requests"))
    for field, lst in (("limits", limits), ("requests", requests)):
        for name, raw in lst.items():
            p = child(child(path, field), name)
            if "/" not in name:
                if name not in STANDARD_CONTAINER_RESOURCES and not _is_hugepages(name):
                    ctx.err(p, invalid(name, "must be a standard resource for containers"))
                    continue
            else:
                msgs = names.is_qualified_name(name)
                for msg in msgs:
                    ctx.err(p, invalid(name, msg))
                if msgs:
                    continue
                if _is_native(name):
                    ctx.err(p, invalid(name, "must be a standard resource for containers"))
                    continue
            q = _q(raw)
            if q is None:
                continue  # reported by the schema
            if q < 0:
                ctx.err(p, invalid(raw, "must be greater than or equal to 0"))
            if not _is_native(name) and q.denominator != 1:
                ctx.err(p, invalid(raw, "must be an integer"))
    for name, raw in requests.items():
        q = _q(raw)
        if q is None:
            continue
        p = child(child(path, "requests"), name)
        overcommit = _is_native(name) and not _is_hugepages(name)
        if name in limits:
            lim = _q(limits[name])
            if lim is None:
                continue
            if overcommit and q > lim:
                ctx.err(p, invalid(raw, f"must be less than or equal to {name} limit of {limits[name]}"))
            elif not overcommit and q != lim:
                ctx.err(p, invalid(raw, f"must be equal to {name} limit of {limits[name]}"))
        elif not overcommit:
            ctx.err(p, required("Limit must be set for non overcommitable resources"))


def resource_requirements(**kw: Any) -> Node:
    return obj(
        {"limits": quantity_map(), "requests": quantity_map(), "claims": arr(opaque())},
        defaulter=_default_requests_from_limits,
        checks=[check_resource_requirements],
        **kw,
    )


# --- containers and pod spec --------------------------------------------------


def _default_container(c: dict, ctx: Ctx) -> None:
    image = c.get("image")
    if "imagePullPolicy" not in c and isinstance(image, str) and image:
        ref = image.split("@", 1)[0]
        last = ref.rsplit("/", 1)[-1]
        tag = last.split(":", 1)[1] if ":" in last else ""
        c["imagePullPolicy"] = "Always" if "@" not in image and tag in ("", "latest") else "IfNotPresent"


def container(ephemeral: bool = False) -> Node:
    port = obj(
        {
            "name": string(),
            "hostPort": int32(),
            "containerPort": int32(),
            "protocol": string(enum=("TCP", "UDP", "SCTP"), default="TCP"),
            "hostIP": string(),
        }
    )
    mount = obj(
        {
            "name": string(),
            "readOnly": boolean(),
            "recursiveReadOnly": string(),
            "mountPath": string(),
            "subPath": string(),
            "mountPropagation": string(),
            "subPathExpr": string(),
        }
    )
    props = {
        "name": string(),
        "image": string(),
        "command": arr(string()),
        "args": arr(string()),
        "workingDir": string(),
        "ports": arr(port),
        "envFrom": opaque(),
        "env": opaque(),
        "resources": resource_requirements(default={}),  # a struct Go always writes out
        "resizePolicy": opaque(),
        "restartPolicy": string(),
        "restartPolicyRules": opaque(),
        "volumeMounts": arr(mount),
        "volumeDevices": opaque(),
        "livenessProbe": opaque(),
        "readinessProbe": opaque(),
        "startupProbe": opaque(),
        "lifecycle": opaque(),
        "terminationMessagePath": string(default="/dev/termination-log"),
        "terminationMessagePolicy": string(enum=("File", "FallbackToLogsOnError"), default="File"),
        "imagePullPolicy": string(enum=("Always", "Never", "IfNotPresent")),
        "securityContext": opaque(),
        "stdin": boolean(),
        "stdinOnce": boolean(),
        "tty": boolean(),
    }
    if ephemeral:
        props["targetContainerName"] = string()
    return obj(props, defaulter=_default_container)


def _default_pod_spec(spec: dict, ctx: Ctx) -> None:
    if spec.get("hostNetwork") is True:
        for field in ("containers", "initContainers"):
            for c in as_list(spec.get(field)):
                for port in as_list(as_dict(c).get("ports")):
                    if isinstance(port, dict) and not port.get("hostPort") and is_int(port.get("containerPort")):
                        port["hostPort"] = port["containerPort"]


def _check_containers(spec: dict, path: str, ctx: Ctx) -> None:
    containers = spec.get("containers")
    if containers is None or (isinstance(containers, list) and not containers):
        ctx.err(child(path, "containers"), required())
    volumes: set = set()
    for i, vol in enumerate(as_list(spec.get("volumes"))):
        if not isinstance(vol, dict):
            continue
        p = index(child(path, "volumes"), i)
        vname = vol.get("name")
        if not vname:
            ctx.err(child(p, "name"), required())
        elif isinstance(vname, str):
            for msg in names.is_dns1123_label(vname):
                ctx.err(child(p, "name"), invalid(vname, msg))
            if vname in volumes:
                ctx.err(child(p, "name"), duplicate(vname))
            volumes.add(vname)
        pvc = vol.get("persistentVolumeClaim")
        if isinstance(pvc, dict) and not pvc.get("claimName"):
            ctx.err(child(child(p, "persistentVolumeClaim"), "claimName"), required())
    seen_names: set = set()
    host_ports: set = set()
    host_network = spec.get("hostNetwork") is True
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(as_list(spec.get(field))):
            if not isinstance(c, dict):
                continue
            p = index(child(path, field), i)
            cname = c.get("name")
            if cname is None or cname == "":
                ctx.err(child(p, "name"), required())
            elif isinstance(cname, str):
                for msg in names.is_dns1123_label(cname):
                    ctx.err(child(p, "name"), invalid(cname, msg))
                if cname in seen_names:
                    ctx.err(child(p, "name"), duplicate(cname))
                seen_names.add(cname)
            image = c.get("image")
            if image is None or image == "":
                ctx.err(child(p, "image"), required())
            elif isinstance(image, str) and image != image.strip():
                ctx.err(child(p, "image"), invalid(image, "must not have leading or trailing whitespace"))
            rp = c.get("restartPolicy")
            if rp is not None:
                if field == "initContainers":
                    if rp != "Always":
                        ctx.err(child(p, "restartPolicy"), not_supported(rp, ("Always",)))
                elif field == "containers" and rp not in ("Always", "OnFailure", "Never"):
                    ctx.err(child(p, "restartPolicy"), not_supported(rp, ("Always", "OnFailure", "Never")))
            port_names: set = set()
            for j, port in enumerate(as_list(c.get("ports"))):
                if not isinstance(port, dict):
                    continue
                pp = index(child(p, "ports"), j)
                cp = port.get("containerPort")
                if cp is None or cp == 0:
                    ctx.err(child(pp, "containerPort"), required())
                elif is_int(cp) and not 1 <= cp <= 65535:
                    ctx.err(child(pp, "containerPort"), invalid(cp, "must be between 1 and 65535, inclusive"))
                hp = port.get("hostPort")
                if is_int(hp) and hp != 0:
                    if not 1 <= hp <= 65535:
                        ctx.err(child(pp, "hostPort"), invalid(hp, "must be between 1 and 65535, inclusive"))
                    if host_network and is_int(cp) and hp != cp:
                        ctx.err(child(pp, "hostPort"), invalid(hp, "must match `containerPort` when `hostNetwork` is true"))
                    if field != "ephemeralContainers":
                        key = hkey(port.get("hostIP") or "", port.get("protocol") or "TCP", hp)
                        if key in host_ports:
                            ctx.err(child(pp, "hostPort"), duplicate(f"{key[1]}/{hp}"))
                        host_ports.add(key)
                pn = port.get("name")
                if isinstance(pn, str) and pn:
                    for msg in names.is_valid_port_name(pn):
                        ctx.err(child(pp, "name"), invalid(pn, msg))
                    if pn in port_names:
                        ctx.err(child(pp, "name"), duplicate(pn))
                    port_names.add(pn)
            for j, m in enumerate(as_list(c.get("volumeMounts"))):
                if not isinstance(m, dict):
                    continue
                mp = index(child(p, "volumeMounts"), j)
                mname = m.get("name")
                if not mname:
                    ctx.err(child(mp, "name"), required())
                elif isinstance(mname, str) and mname not in volumes:
                    ctx.err(child(mp, "name"), not_found(mname))
                if not m.get("mountPath"):
                    ctx.err(child(mp, "mountPath"), required())


def _check_pod_spec_misc(spec: dict, path: str, ctx: Ctx) -> None:
    validate_labels(spec.get("nodeSelector"), child(path, "nodeSelector"), ctx)
    for field in ("priorityClassName", "runtimeClassName", "nodeName", "serviceAccountName"):
        v = spec.get(field)
        if isinstance(v, str) and v:
            for msg in names.is_dns1123_subdomain(v):
                ctx.err(child(path, field), invalid(v, msg))
    for field in ("hostname", "subdomain"):
        v = spec.get(field)
        if isinstance(v, str) and v:
            for msg in names.is_dns1123_label(v):
                ctx.err(child(path, field), invalid(v, msg))
    ads = spec.get("activeDeadlineSeconds")
    if is_int(ads) and ads < 1:
        ctx.err(child(path, "activeDeadlineSeconds"), invalid(ads, "must be between 1 and 2147483647, inclusive"))
    tgp = spec.get("terminationGracePeriodSeconds")
    if is_int(tgp) and tgp < 0:
        ctx.err(child(path, "terminationGracePeriodSeconds"), invalid(tgp, "must be greater than or equal to 0"))
    gates: set = set()
    for i, g in enumerate(as_list(spec.get("schedulingGates"))):
        if not isinstance(g, dict):
            continue
        p = child(index(child(path, "schedulingGates"), i), "name")
        gname = g.get("name")
        if not gname:
            ctx.err(p, required())
            continue
        validate_label_name(gname, p, ctx)
        if gname in gates:
            ctx.err(p, duplicate(gname))
        gates.add(gname)
    for name, raw in as_dict(spec.get("overhead")).items():
        q = _q(raw)
        if q is not None and q < 0:
            ctx.err(child(child(path, "overhead"), name), invalid(raw, "must be greater than or equal to 0"))


def _container_requests(c: Any) -> dict[str, int]:
    res = as_dict(as_dict(c).get("resources"))
    out = {str(k): to_units(str(k), v) for k, v in as_dict(res.get("requests")).items()}
    for k, v in as_dict(res.get("limits")).items():
        out.setdefault(str(k), to_units(str(k), v))
    return out


def pod_request_totals(spec: Any) -> dict[str, int]:
    """A pod's effective requests, added up as kube-scheduler (and karpy's scheduler) add them:
    containers and restartable init containers (sidecars) together, or each ordinary init
    container with the sidecars before it, whichever is more; pod-level resources where set;
    plus the overhead. Raises ValueError if a quantity is not one."""
    spec = as_dict(spec)
    app: dict[str, int] = {}
    for c in as_list(spec.get("containers")):
        for k, v in _container_requests(c).items():
            app[k] = app.get(k, 0) + v
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for c in as_list(spec.get("initContainers")):
        req = _container_requests(c)
        if as_dict(c).get("restartPolicy") == "Always":
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, 0) + v
            step = sidecars
        else:
            step = dict(req)
            for k, v in sidecars.items():
                step[k] = step.get(k, 0) + v
        for k, v in step.items():
            peak[k] = max(peak.get(k, 0), v)
    out = dict(app)
    for k, v in sidecars.items():
        out[k] = out.get(k, 0) + v
    for k, v in peak.items():
        out[k] = max(out.get(k, 0), v)
    level = _container_requests({"resources": spec.get("resources")})
    out.update(level)
    for k, v in as_dict(spec.get("overhead")).items():
        out[str(k)] = out.get(str(k), 0) + to_units(str(k), v)
    return out


def _check_pod_request_totals(spec: dict, path: str, ctx: Ctx) -> None:
    """Each quantity fits in an int64 (see karpy.resources); the pod's total requests must too."""
    try:
        totals = pod_request_totals(spec)
    except ValueError:
        return  # a quantity that is not one, or out of range on its own: reported at its field
    for name in sorted(totals):
        problem = quantity_range_error(name, Fraction(totals[name], 1000 if name == "cpu" else 1))
        if problem:
            ctx.err(
                path,
                f"Invalid value: {fmt_value(totals[name])}: the pod's requests of {name} (its containers, sidecars "
                f"and overhead, added up as kube-scheduler adds them) {problem}",
            )


def _check_tscs(tscs: list, path: str, ctx: Ctx, *, defaults: bool = False) -> None:
    """``defaults``: kube-scheduler's defaultConstraints (ValidatePodTopologySpreadArgs), which, unlike a pod's,
    may carry minDomains with ScheduleAnyway."""
    seen: set = set()
    for i, c in enumerate(tscs):
        if not isinstance(c, dict):
            continue
        p = index(path, i)
        skew = c.get("maxSkew", 0)
        if is_int(skew) and skew <= 0:
            ctx.err(child(p, "maxSkew"), invalid(skew, "must be greater than zero"))
        tk = c.get("topologyKey")
        if not tk:
            ctx.err(child(p, "topologyKey"), required("can not be empty"))
        else:
            validate_label_name(tk, child(p, "topologyKey"), ctx)
        wu = c.get("whenUnsatisfiable")
        if wu not in ("DoNotSchedule", "ScheduleAnyway"):
            ctx.err(child(p, "whenUnsatisfiable"), not_supported(wu if wu is not None else "", ("DoNotSchedule", "ScheduleAnyway")))
        md = c.get("minDomains")
        if is_int(md):
            if md <= 0:
                ctx.err(child(p, "minDomains"), invalid(md, "must be greater than zero"))
            elif wu != "DoNotSchedule" and not defaults:
                ctx.err(
                    child(p, "minDomains"),
                    invalid(md, f"can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {wu}"),
                )
        pair = hkey(tk, wu)
        if pair in seen:
            ctx.err(p, duplicate(f"{{{tk}, {wu}}}"))
        seen.add(pair)
        _check_match_label_keys(c, p, ctx, ("matchLabelKeys",))


def _check_default_tscs(tscs: list, path: str, ctx: Ctx) -> None:
    _check_tscs(tscs, path, ctx, defaults=True)


def topology_spread_constraints(defaults: bool = False) -> Node:
    policy = ("Honor", "Ignore")
    item = obj(
        {
            "maxSkew": int32(),
            "topologyKey": string(),
            "whenUnsatisfiable": string(),
            "labelSelector": label_selector(),
            "minDomains": int32(),
            "nodeAffinityPolicy": string(enum=policy),
            "nodeTaintsPolicy": string(enum=policy),
            "matchLabelKeys": arr(string(), list_type="set"),
        }
    )
    return arr(item, checks=[_check_default_tscs if defaults else _check_tscs])


def pod_spec() -> Node:
    volume = obj({"name": string(), "persistentVolumeClaim": obj({"claimName": string(), "readOnly": boolean()})}, preserve=True)
    return obj(
        {
            "volumes": arr(volume),
            "initContainers": arr(container()),
            "containers": arr(container()),
            "ephemeralContainers": arr(container(ephemeral=True)),
            "restartPolicy": string(enum=("Always", "OnFailure", "Never"), default="Always"),
            "terminationGracePeriodSeconds": int64(default=30),
            "activeDeadlineSeconds": int64(),
            "dnsPolicy": string(enum=("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"), default="ClusterFirst"),
            "nodeSelector": string_map(),
            "serviceAccountName": string(),
            "serviceAccount": string(),
            "automountServiceAccountToken": boolean(),
            "nodeName": string(),
            "hostNetwork": boolean(),
            "hostPID": boolean(),
            "hostIPC": boolean(),
            "shareProcessNamespace": boolean(),
            "securityContext": opaque(default={}),
            "imagePullSecrets": arr(opaque()),
            "hostname": string(),
            "hostnameOverride": string(),
            "subdomain": string(),
            "affinity": affinity(),
            "schedulerName": string(default="default-scheduler"),
            "tolerations": tolerations(),
            "hostAliases": arr(opaque()),
            "priorityClassName": string(),
            "priority": int32(),
            "dnsConfig": opaque(),
            "readinessGates": arr(opaque()),
            "runtimeClassName": string(),
            "enableServiceLinks": boolean(),
            "preemptionPolicy": string(enum=("PreemptLowerPriority", "Never")),
            "overhead": quantity_map(),
            "topologySpreadConstraints": topology_spread_constraints(),
            "setHostnameAsFQDN": boolean(),
            "os": obj({"name": string()}),
            "hostUsers": boolean(),
            "schedulingGates": arr(obj({"name": string()})),
            "resourceClaims": arr(opaque()),
            "resources": resource_requirements(),
            "workloadRef": opaque(),
        },
        defaulter=_default_pod_spec,
        checks=[_check_containers, _check_pod_spec_misc, _check_pod_request_totals],
        memo=True,  # its hooks read only the spec: pods sharing a spec have it validated once
    )


def _template() -> Node:
    # a pod template is a struct in Go: missing means empty, whose missing containers are then reported
    spec = pod_spec()
    spec.default = {}
    return obj({"metadata": template_meta(), "spec": spec}, default={})


# --- helpers for workload checks ----------------------------------------------


def _check_template_restart(spec: dict, path: str, ctx: Ctx, allowed: tuple[str, ...]) -> None:
    rp = get(spec, "template", "spec", "restartPolicy")
    if rp is not None and rp not in allowed:
        ctx.err(f"{path}.template.spec.restartPolicy", not_supported(rp, allowed))


def _check_selector(spec: dict, path: str, ctx: Ctx, what: str) -> None:
    sel = spec.get("selector")
    sp = child(path, "selector")
    if sel is None:
        ctx.err(sp, required())
        return
    if not isinstance(sel, dict):
        return
    if selector_is_empty(sel):
        ctx.err(sp, invalid(sel, f"empty selector is invalid for {what}"))
        return
    labels = get(spec, "template", "metadata", "labels", default={})
    if not selector_matches(sel, labels):
        # the API server checks this before the template's own fields, and shows the labels as a Go map
        shown = "map[string]string{" + ", ".join(f"{json.dumps(str(k))}:{json.dumps(str(v))}" for k, v in
                                                 sorted(labels.items())) + "}" if isinstance(labels, dict) else labels
        err = (f"{path}.template.metadata.labels", f"Invalid value: {shown}: `selector` does not match template `labels`")
        tp = f"{path}.template."
        at = next((i for i, (f, _) in enumerate(ctx.errors) if f.startswith(tp)), len(ctx.errors))
        ctx.errors.insert(at, err)


def validate_int_or_percent(v: Any, path: str, ctx: Ctx, *, max_100: bool = False) -> None:
    if v is None:
        return
    if isinstance(v, bool):
        return
    if isinstance(v, int):
        if v < 0:
            ctx.err(path, invalid(v, "must be greater than or equal to 0"))
        return
    if isinstance(v, str):
        if not names.is_percent(v):
            ctx.err(path, invalid(v, names.PERCENT_ERROR))
        elif max_100 and int(v[:-1]) > 100:
            ctx.err(path, invalid(v, "must not be greater than 100%"))


def _int_or_percent_value(v: Any) -> int | None:
    if is_int(v):
        return v
    if isinstance(v, str) and names.is_percent(v):
        return int(v[:-1])
    return None


def _check_rolling_update(ru: Any, path: str, ctx: Ctx) -> None:
    if not isinstance(ru, dict):
        return
    mu, ms = ru.get("maxUnavailable"), ru.get("maxSurge")
    validate_int_or_percent(mu, child(path, "maxUnavailable"), ctx, max_100=True)
    validate_int_or_percent(ms, child(path, "maxSurge"), ctx)
    if "maxSurge" in ru and _int_or_percent_value(mu) == 0 and _int_or_percent_value(ms) == 0:
        ctx.err(child(path, "maxUnavailable"), invalid(mu, "may not be 0 when `maxSurge` is 0"))


# --- Pod ----------------------------------------------------------------------


def _status() -> Node:
    return opaque_obj()


def _top(spec: Node, *, dns_label: bool = False, extra: dict[str, Node] | None = None) -> Node:
    props = {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(dns_label),
        "spec": spec,
        "status": _status(),
    }
    if extra:
        props.update(extra)
    return obj(props)


def _pod_spec_top() -> Node:
    s = pod_spec()
    s.default = {}
    return s


POD = _top(_pod_spec_top())


# --- Node ---------------------------------------------------------------------


def _default_node_status(status: dict, ctx: Ctx) -> None:
    if "allocatable" not in status and isinstance(status.get("capacity"), dict):
        status["allocatable"] = dict(status["capacity"])


def _check_nonnegative_quantities(m: dict, path: str, ctx: Ctx) -> None:
    for name, raw in m.items():
        q = _q(raw)
        if q is not None and q < 0:
            ctx.err(child(path, name), invalid(raw, "must be greater than or equal to 0"))


NODE = _top(
    obj(
        {
            "podCIDR": string(),
            "podCIDRs": arr(string()),
            "providerID": string(),
            "unschedulable": boolean(),
            "taints": node_taints(),
            "configSource": opaque(),
            "externalID": string(),
        }
    ),
    extra={
        "status": obj(
            {
                "capacity": quantity_map(checks=[_check_nonnegative_quantities]),
                "allocatable": quantity_map(checks=[_check_nonnegative_quantities]),
            },
            preserve=True,
            defaulter=_default_node_status,
        )
    },
)

NAMESPACE = _top(obj({"finalizers": arr(string())}), dns_label=True)


# --- volumes ------------------------------------------------------------------


def _check_pvc_spec(spec: dict, path: str, ctx: Ctx) -> None:
    modes = spec.get("accessModes")
    if not modes:
        ctx.err(child(path, "accessModes"), required("at least 1 access mode is required"))
    storage = get(spec, "resources", "requests", "storage")
    sp = f"{path}.resources.requests.storage"
    if storage is None:
        ctx.err(sp, required())
    else:
        q = _q(storage)
        if q is not None and q <= 0:
            ctx.err(sp, invalid(storage, "must be greater than zero"))


def pvc_spec() -> Node:
    return obj(
        {
            "accessModes": arr(string(enum=ACCESS_MODES)),
            "selector": label_selector(),
            "resources": obj({"limits": quantity_map(), "requests": quantity_map()}),
            "volumeName": string(),
            "storageClassName": string(),
            "volumeMode": string(enum=("Block", "Filesystem"), default="Filesystem"),
            "dataSource": opaque(),
            "dataSourceRef": opaque(),
            "volumeAttributesClassName": string(),
        },
        default={},
        checks=[_check_pvc_spec],
    )


PVC = _top(pvc_spec())

PV_SOURCES = (
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "hostPath",
    "glusterfs",
    "nfs",
    "rbd",
    "iscsi",
    "cinder",
    "cephfs",
    "fc",
    "flocker",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "local",
    "storageos",
    "csi",
)


def _check_pv_spec(spec: dict, path: str, ctx: Ctx) -> None:
    if not spec.get("accessModes"):
        ctx.err(child(path, "accessModes"), required())
    cap = spec.get("capacity")
    if not cap:
        ctx.err(child(path, "capacity"), required())
    elif isinstance(cap, dict):
        if "storage" not in cap:
            ctx.err(f"{path}.capacity.storage", required())
        for name in cap:
            if name != "storage":
                ctx.err(child(child(path, "capacity"), name), not_supported(name, ("storage",)))
    sources = [s for s in PV_SOURCES if s in spec]
    if not sources:
        ctx.err(path, required("must specify a volume type"))
    for s in sources[1:]:
        ctx.err(child(path, s), forbidden("may not specify more than 1 volume type"))
    if "local" in spec and get(spec, "nodeAffinity", "required") is None:
        ctx.err(child(path, "nodeAffinity"), required("Local volume requires node affinity"))


PV = _top(
    obj(
        {
            "capacity": quantity_map(),
            **{s: opaque() for s in PV_SOURCES},
            "accessModes": arr(string(enum=ACCESS_MODES)),
            "claimRef": opaque(),
            "persistentVolumeReclaimPolicy": string(enum=("Recycle", "Delete", "Retain"), default="Retain"),
            "storageClassName": string(),
            "mountOptions": arr(string()),
            "volumeMode": string(enum=("Block", "Filesystem"), default="Filesystem"),
            "nodeAffinity": obj({"required": node_selector()}),
            "volumeAttributesClassName": string(),
        },
        default={},
        checks=[_check_pv_spec],
    )
)


def _check_topology_terms(terms: list, path: str, ctx: Ctx) -> None:
    for i, term in enumerate(terms):
        if not isinstance(term, dict):
            continue
        p = child(index(path, i), "matchLabelExpressions")
        exprs = term.get("matchLabelExpressions")
        if not exprs:
            ctx.err(p, required("must contain at least one key-value pair"))
        for j, e in enumerate(as_list(exprs)):
            if not isinstance(e, dict):
                continue
            ep = index(p, j)
            validate_label_name(e.get("key", ""), child(ep, "key"), ctx)
            if not e.get("values"):
                ctx.err(child(ep, "values"), required("must specify as least one value"))


def _check_storage_class(sc: dict, path: str, ctx: Ctx) -> None:
    prov = sc.get("provisioner")
    if not prov:
        ctx.err("provisioner", required())
    elif isinstance(prov, str):
        for msg in names.is_qualified_name(prov.lower()):
            ctx.err("provisioner", invalid(prov, msg))


STORAGE_CLASS = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "provisioner": string(),
        "parameters": string_map(),
        "reclaimPolicy": string(enum=("Delete", "Retain"), default="Delete"),
        "mountOptions": arr(string()),
        "allowVolumeExpansion": boolean(),
        "volumeBindingMode": string(enum=("Immediate", "WaitForFirstConsumer"), default="Immediate"),
        "allowedTopologies": arr(
            obj({"matchLabelExpressions": arr(obj({"key": string(), "values": arr(string())}))}),
            checks=[_check_topology_terms],
        ),
    },
    checks=[_check_storage_class],
)


# --- workloads ----------------------------------------------------------------


def _check_deployment_spec(spec: dict, path: str, ctx: Ctx) -> None:
    _check_selector(spec, path, ctx, "deployment")
    _check_template_restart(spec, path, ctx, ("Always",))
    strategy = as_dict(spec.get("strategy"))
    st = strategy.get("type")
    sp = child(path, "strategy")
    if st == "Recreate" and strategy.get("rollingUpdate") is not None:
        ctx.err(child(sp, "rollingUpdate"), forbidden("may not be specified when strategy `type` is 'Recreate'"))
    elif st == "RollingUpdate":
        _check_rolling_update(strategy.get("rollingUpdate"), child(sp, "rollingUpdate"), ctx)
    pds, mrs = spec.get("progressDeadlineSeconds"), spec.get("minReadySeconds", 0)
    if is_int(pds) and is_int(mrs) and pds <= mrs:
        ctx.err(child(path, "progressDeadlineSeconds"), invalid(pds, "must be greater than minReadySeconds"))


def _default_deployment_strategy(strategy: dict, ctx: Ctx) -> None:
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        if isinstance(ru, dict):
            ru.setdefault("maxUnavailable", "25%")
            ru.setdefault("maxSurge", "25%")


def _replicas() -> Node:
    return int32(default=1, minimum=0)


DEPLOYMENT = _top(
    obj(
        {
            "replicas": _replicas(),
            "selector": label_selector(),
            "template": _template(),
            "strategy": obj(
                {
                    "type": string(enum=("Recreate", "RollingUpdate")),
                    "rollingUpdate": obj({"maxUnavailable": int_or_string(), "maxSurge": int_or_string()}),
                },
                default={},
                defaulter=_default_deployment_strategy,
            ),
            "minReadySeconds": int32(minimum=0),
            "revisionHistoryLimit": int32(default=10, minimum=0),
            "paused": boolean(),
            "progressDeadlineSeconds": int32(default=600),
        },
        default={},
        checks=[_check_deployment_spec],
    )
)


def _check_replicaset_spec(spec: dict, path: str, ctx: Ctx) -> None:
    _check_selector(spec, path, ctx, "deployment")  # sic: the API server says "deployment" here too
    _check_template_restart(spec, path, ctx, ("Always",))


REPLICASET = _top(
    obj(
        {
            "replicas": _replicas(),
            "minReadySeconds": int32(minimum=0),
            "selector": label_selector(),
            "template": _template(),
        },
        default={},
        checks=[_check_replicaset_spec],
    )
)


def _default_sts_update(strategy: dict, ctx: Ctx) -> None:
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        if isinstance(ru, dict):
            ru.setdefault("partition", 0)


def _check_statefulset_spec(spec: dict, path: str, ctx: Ctx) -> None:
    _check_selector(spec, path, ctx, "statefulset")
    _check_template_restart(spec, path, ctx, ("Always",))
    us = as_dict(spec.get("updateStrategy"))
    up = child(path, "updateStrategy")
    if us.get("type") == "OnDelete" and us.get("rollingUpdate") is not None:
        ctx.err(child(up, "rollingUpdate"), forbidden("only allowed for updateStrategy 'RollingUpdate'"))
    ru = as_dict(us.get("rollingUpdate"))
    if "maxUnavailable" in ru:
        validate_int_or_percent(ru["maxUnavailable"], f"{up}.rollingUpdate.maxUnavailable", ctx, max_100=True)
        if _int_or_percent_value(ru["maxUnavailable"]) == 0:
            ctx.err(f"{up}.rollingUpdate.maxUnavailable", invalid(ru["maxUnavailable"], "must be greater than 0"))
    names_seen: set = set()
    for i, t in enumerate(as_list(spec.get("volumeClaimTemplates"))):
        n = get(t, "metadata", "name")
        if isinstance(n, str):
            if n in names_seen:
                ctx.err(f"{path}.volumeClaimTemplates[{i}].metadata.name", duplicate(n))
            names_seen.add(n)


_PVC_TEMPLATE = obj({"apiVersion": string(), "kind": string(), "metadata": template_meta(), "spec": pvc_spec(), "status": _status()})

STATEFULSET = _top(
    obj(
        {
            "replicas": _replicas(),
            "selector": label_selector(),
            "template": _template(),
            "volumeClaimTemplates": arr(_PVC_TEMPLATE),
            "serviceName": string(),
            "podManagementPolicy": string(enum=("OrderedReady", "Parallel"), default="OrderedReady"),
            "updateStrategy": obj(
                {
                    "type": string(enum=("RollingUpdate", "OnDelete")),
                    "rollingUpdate": obj({"partition": int32(minimum=0), "maxUnavailable": int_or_string()}),
                },
                default={},
                defaulter=_default_sts_update,
            ),
            "revisionHistoryLimit": int32(default=10, minimum=0),
            "minReadySeconds": int32(minimum=0),
            "persistentVolumeClaimRetentionPolicy": obj(
                {
                    "whenDeleted": string(enum=("Retain", "Delete"), default="Retain"),
                    "whenScaled": string(enum=("Retain", "Delete"), default="Retain"),
                },
                default={},
            ),
            "ordinals": obj({"start": int32(minimum=0)}),
        },
        default={},
        checks=[_check_statefulset_spec],
    )
)


def _default_ds_update(strategy: dict, ctx: Ctx) -> None:
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        if isinstance(ru, dict):
            ru.setdefault("maxUnavailable", 1)
            ru.setdefault("maxSurge", 0)


def _check_daemonset_spec(spec: dict, path: str, ctx: Ctx) -> None:
    _check_selector(spec, path, ctx, "daemonset")
    _check_template_restart(spec, path, ctx, ("Always",))
    us = as_dict(spec.get("updateStrategy"))
    ru = us.get("rollingUpdate")
    if us.get("type") == "RollingUpdate" and isinstance(ru, dict):
        up = f"{path}.updateStrategy.rollingUpdate"
        mu, ms = ru.get("maxUnavailable"), ru.get("maxSurge")
        validate_int_or_percent(mu, child(up, "maxUnavailable"), ctx, max_100=True)
        validate_int_or_percent(ms, child(up, "maxSurge"), ctx, max_100=True)
        if _int_or_percent_value(mu) == 0 and _int_or_percent_value(ms) in (0, None):
            ctx.err(child(up, "maxUnavailable"), invalid(mu, "may not be 0 when `maxSurge` is 0"))


DAEMONSET = _top(
    obj(
        {
            "selector": label_selector(),
            "template": _template(),
            "updateStrategy": obj(
                {
                    "type": string(enum=("RollingUpdate", "OnDelete")),
                    "rollingUpdate": obj({"maxUnavailable": int_or_string(), "maxSurge": int_or_string()}),
                },
                default={},
                defaulter=_default_ds_update,
            ),
            "minReadySeconds": int32(minimum=0),
            "revisionHistoryLimit": int32(default=10, minimum=0),
        },
        default={},
        checks=[_check_daemonset_spec],
    )
)


# --- Job ----------------------------------------------------------------------

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_JOB_UID_LABEL = "controller-uid"


def _default_job_spec(spec: dict, ctx: Ctx) -> None:
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if "backoffLimit" not in spec:
        spec["backoffLimit"] = 2**31 - 1 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if "podReplacementPolicy" not in spec:
        spec["podReplacementPolicy"] = "Failed" if spec.get("podFailurePolicy") is not None else "TerminatingOrFailed"


def _check_job_spec(spec: dict, path: str, ctx: Ctx) -> None:
    _check_template_restart(spec, path, ctx, ("OnFailure", "Never"))
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        ctx.err(child(path, "completions"), required("when completion mode is Indexed"))
    ads = spec.get("activeDeadlineSeconds")
    if is_int(ads) and ads <= 0:
        ctx.err(child(path, "activeDeadlineSeconds"), invalid(ads, "must be greater than or equal to 1"))
    if spec.get("manualSelector") is True:
        _check_selector(spec, path, ctx, "job")


JOB = _top(
    obj(
        {
            "parallelism": int32(minimum=0),
            "completions": int32(minimum=0),
            "activeDeadlineSeconds": int64(),
            "podFailurePolicy": opaque(),
            "successPolicy": opaque(),
            "backoffLimit": int32(minimum=0),
            "backoffLimitPerIndex": int32(minimum=0),
            "maxFailedIndexes": int32(minimum=0),
            "selector": label_selector(),
            "manualSelector": boolean(),
            "template": _template(),
            "ttlSecondsAfterFinished": int32(minimum=0),
            "completionMode": string(enum=("NonIndexed", "Indexed")),
            "suspend": boolean(),
            "podReplacementPolicy": string(enum=("TerminatingOrFailed", "Failed")),
            "managedBy": string(),
        },
        default={},
        defaulter=_default_job_spec,
        checks=[_check_job_spec],
    )
)


def prepare_job(job: dict, ctx: Ctx) -> None:
    """What the API server does on Job creation: a uid, job-name labels and the generated selector."""
    meta = job.get("metadata")
    spec = job.get("spec")
    if not isinstance(meta, dict):
        return
    if spec is None:
        spec = job["spec"] = {}
    if not isinstance(spec, dict):
        return
    name = meta.get("name")
    ns = meta.get("namespace", "default")
    if not isinstance(name, str):
        return
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"karpy:Job/{ns}/{name}"))
        meta["uid"] = uid
    if spec.get("manualSelector") is True:
        return
    if spec.get("selector") is not None:
        ctx.err("spec.selector", invalid(spec["selector"], "`selector` not auto-generated"))
    template = spec.get("template")
    if template is None:
        template = spec["template"] = {}
    if not isinstance(template, dict):
        return
    tmeta = template.get("metadata")
    if tmeta is None:
        tmeta = template["metadata"] = {}
    if not isinstance(tmeta, dict):
        return
    labels = tmeta.get("labels")
    if labels is None:
        labels = tmeta["labels"] = {}
    if not isinstance(labels, dict):
        return
    labels.setdefault(JOB_UID_LABEL, uid)
    labels.setdefault(JOB_NAME_LABEL, name)
    labels.setdefault(LEGACY_JOB_UID_LABEL, uid)
    labels.setdefault(LEGACY_JOB_NAME_LABEL, name)
    spec["selector"] = {"matchLabels": {JOB_UID_LABEL: uid}}


# --- policy, scheduling, node -------------------------------------------------


def _check_pdb_spec(spec: dict, path: str, ctx: Ctx) -> None:
    if "minAvailable" in spec and "maxUnavailable" in spec:
        ctx.err(path, invalid(spec, "minAvailable and maxUnavailable cannot be both set"))
    validate_int_or_percent(spec.get("minAvailable"), child(path, "minAvailable"), ctx, max_100=True)
    validate_int_or_percent(spec.get("maxUnavailable"), child(path, "maxUnavailable"), ctx, max_100=True)


PDB = _top(
    obj(
        {
            "minAvailable": int_or_string(),
            "maxUnavailable": int_or_string(),
            "selector": label_selector(),
            "unhealthyPodEvictionPolicy": string(enum=("IfHealthyBudget", "AlwaysAllow")),
        },
        default={},
        checks=[_check_pdb_spec],
    )
)

HIGHEST_USER_PRIORITY = 1_000_000_000
SYSTEM_PRIORITY_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}


def _check_priority_class(pc: dict, path: str, ctx: Ctx) -> None:
    name = get(pc, "metadata", "name")
    value = pc.get("value", 0)
    if isinstance(name, str) and name in SYSTEM_PRIORITY_CLASSES:
        if is_int(value) and value != SYSTEM_PRIORITY_CLASSES[name]:
            ctx.err("value", invalid(value, f"the value of system priority class {name} must be {SYSTEM_PRIORITY_CLASSES[name]}"))
        return
    if isinstance(name, str) and name.startswith("system-"):
        ctx.err("metadata.name", invalid(name, "priority class names with 'system-' prefix are reserved"))
    if is_int(value) and value > HIGHEST_USER_PRIORITY:
        ctx.err("value", forbidden(f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"))


PRIORITY_CLASS = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "value": int32(),
        "globalDefault": boolean(),
        "description": string(),
        "preemptionPolicy": string(enum=("PreemptLowerPriority", "Never"), default="PreemptLowerPriority"),
    },
    checks=[_check_priority_class],
)


def _check_runtime_class(rc: dict, path: str, ctx: Ctx) -> None:
    handler = rc.get("handler")
    if not handler:
        ctx.err("handler", required())
    elif isinstance(handler, str):
        for msg in names.is_dns1123_label(handler):
            ctx.err("handler", invalid(handler, msg))
    pod_fixed = as_dict(get(rc, "overhead", "podFixed"))
    for name, raw in pod_fixed.items():
        q = _q(raw)
        p = f"overhead.podFixed.{name}" if "/" not in name else f"overhead.podFixed[{name}]"
        if q is not None and q < 0:
            ctx.err(p, invalid(raw, "must be greater than or equal to 0"))
    validate_labels(get(rc, "scheduling", "nodeSelector"), "scheduling.nodeSelector", ctx)


RUNTIME_CLASS = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "handler": string(),
        "overhead": obj({"podFixed": quantity_map()}),
        "scheduling": obj({"nodeSelector": string_map(), "tolerations": tolerations()}),
    },
    checks=[_check_runtime_class],
)


def _check_service(svc: dict, path: str, ctx: Ctx) -> None:
    name = get(svc, "metadata", "name")
    if isinstance(name, str) and name and not names.is_dns1123_subdomain(name):  # else the generic name error
        for msg in names.is_dns1035_label(name):  # a Service's name is a DNS-1035 label (kube-apiserver)
            ctx.err("metadata.name", invalid(name, msg))
    validate_labels(get(svc, "spec", "selector"), "spec.selector", ctx)


# A Service matters to Karpenter through its selector only: with default topology spread constraints configured,
# the pods it selects take their spread selector from it (karpy.scheduling.default_spread). The rest of the spec
# (ports, type, IPs) is kept as given.
SERVICE = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "spec": obj({"selector": string_map()}, preserve=True),
        "status": opaque_obj(),
    },
    checks=[_check_service],
)


def apply_pod_defaults(pod: dict) -> dict:
    """Default a pod stamped out of a template (as the API server would on create); returns the pod.

    Errors are ignored: the template was validated already.
    """
    ctx = Ctx()
    from .schema import walk

    walk(pod, POD, "", ctx)
    return pod


__all__ = [
    "POD",
    "NODE",
    "NAMESPACE",
    "PVC",
    "PV",
    "STORAGE_CLASS",
    "DEPLOYMENT",
    "REPLICASET",
    "STATEFULSET",
    "DAEMONSET",
    "JOB",
    "PDB",
    "PRIORITY_CLASS",
    "RUNTIME_CLASS",
    "prepare_job",
    "selector_matches",
    "apply_pod_defaults",
]
