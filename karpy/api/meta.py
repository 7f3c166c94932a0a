"""ObjectMeta: names, labels and annotations, validated as the API server does."""

from __future__ import annotations

from typing import Any

from ..resources import DurationRangeError, parse_duration
from . import names
from .schema import (
    Ctx,
    Node,
    arr,
    as_dict,
    check_time_range,
    child,
    int64,
    invalid,
    obj,
    opaque,
    required,
    string,
    string_map,
)

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024

# karpy's own annotation: a pod (or every pod of a template) succeeds this long after it starts running
ANNOTATION_RUN_FOR = "karpy.dev/run-for"


def validate_labels(labels: Any, path: str, ctx: Ctx) -> None:
    """ValidateLabels: keys are qualified names, values are label values (errors at the map's path)."""
    if not isinstance(labels, dict):
        return
    for k, v in labels.items():
        for msg in names.is_qualified_name(k):
            ctx.err(path, invalid(k, msg))
        if isinstance(v, str):
            for msg in names.is_valid_label_value(v):
                ctx.err(path, invalid(v, msg))


def validate_annotations(annotations: Any, path: str, ctx: Ctx) -> None:
    if not isinstance(annotations, dict):
        return
    size = 0
    for k, v in annotations.items():
        for msg in names.is_qualified_name(k.lower()):
            ctx.err(path, invalid(k, msg))
        size += len(k) + (len(v) if isinstance(v, str) else 0)
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        ctx.err(path, f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes")
    run_for = annotations.get(ANNOTATION_RUN_FOR)
    if isinstance(run_for, str):
        detail = 'must be a non-negative duration such as "30s", "10m" or "1h30m"'
        try:
            ok = parse_duration(run_for) >= 0
        except DurationRangeError as e:
            ok, detail = False, str(e).split(": ", 1)[-1]
        except ValueError:
            ok = False
        if not ok:
            ctx.err(child(path, ANNOTATION_RUN_FOR), invalid(run_for, detail))


def validate_label_name(key: Any, path: str, ctx: Ctx) -> None:
    """ValidateLabelName: the key of a selector requirement, toleration or topology key."""
    if not isinstance(key, str):
        return
    for msg in names.is_qualified_name(key):
        ctx.err(path, invalid(key, msg))


def _check_meta_common(meta: dict, path: str, ctx: Ctx) -> None:
    validate_labels(meta.get("labels"), child(path, "labels"), ctx)
    validate_annotations(meta.get("annotations"), child(path, "annotations"), ctx)
    fins = meta.get("finalizers")
    if isinstance(fins, list):
        for i, f in enumerate(fins):
            if isinstance(f, str):
                for msg in names.is_qualified_name(f):
                    ctx.err(f"{child(path, 'finalizers')}[{i}]", invalid(f, msg))


def _name_checker(dns_label: bool):
    validate = names.is_dns1123_label if dns_label else names.is_dns1123_subdomain

    def check(meta: dict, path: str, ctx: Ctx) -> None:
        name = meta.get("name")
        gen = meta.get("generateName")
        if not isinstance(name, str) or name == "":
            if isinstance(name, str) or name is None:
                ctx.err(child(path, "name"), required("name or generateName is required"))
        else:
            for msg in validate(name):
                ctx.err(child(path, "name"), invalid(name, msg))
        if isinstance(gen, str) and gen:
            # generateName is validated without its random suffix, and may end in '-'
            base = gen[:-1] if gen.endswith("-") else gen
            for msg in validate(base or "a"):
                ctx.err(child(path, "generateName"), invalid(gen, msg))
        ns = meta.get("namespace")
        if isinstance(ns, str) and ns:
            for msg in names.is_dns1123_label(ns):
                ctx.err(child(path, "namespace"), invalid(ns, msg))
        _check_meta_common(meta, path, ctx)

    return check


def _meta_props() -> dict[str, Node]:
    return {
        "name": string(),
        "generateName": string(),
        "namespace": string(),
        "selfLink": string(),
        "uid": string(),
        "resourceVersion": string(),
        "generation": int64(),
        # metav1.Time: the API server cannot decode anything but an RFC 3339 date-time
        "creationTimestamp": string(fmt="date-time", checks=[check_time_range]),
        "deletionTimestamp": string(fmt="date-time", checks=[check_time_range]),
        "deletionGracePeriodSeconds": int64(),
        "labels": string_map(),
        "annotations": string_map(),
        "ownerReferences": arr(opaque()),
        "finalizers": arr(string()),
        "managedFields": opaque(),
    }


def object_meta(dns_label: bool = False) -> Node:
    """metadata of a top-level object."""
    return obj(_meta_props(), checks=[_name_checker(dns_label)])


def template_meta() -> Node:
    """metadata of a pod template (or a NodePool's NodeClaim template in core style)."""
    return obj(_meta_props(), checks=[_check_meta_common])


def labels_of(meta: Any) -> dict:
    return as_dict(as_dict(meta).get("labels"))
