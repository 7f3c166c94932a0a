"""Patches as the API server applies them: JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

Stored objects are shared and never mutated, so every function here returns a
new object that shares the subtrees the patch does not touch.

A JSON patch from a client is bounded as kube-apiserver bounds it: at most
:data:`MAX_OPERATIONS` operations (413), and its ``copy`` operations may add at
most :data:`MAX_COPY_BYTES` in all (kube-apiserver's ``JSONPatchMaxCopyBytes``),
so a short patch cannot double an object again and again.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from .errors import BadRequest, Invalid
from .limits import RequestEntityTooLarge

MAX_OPERATIONS = 10_000  # kube-apiserver's maxJSONPatchOperations
MAX_COPY_BYTES = 3 * 1024 * 1024  # kube-apiserver's JSONPatchMaxCopyBytes


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``null`` removes a key, objects merge recursively, anything else replaces."""
    if not isinstance(patch, dict):
        return patch  # patches are built for the call (or parsed from a request) and not touched again
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            cur = out.get(k)
            if cur is v and (type(v) is not dict or not _has_null(v)):
                continue  # the stored map itself sent back (a whole status re-sent): merged into itself, it is itself
            out[k] = merge_patch(cur, v)
    return out


def _has_null(v: dict) -> bool:
    """Whether merging the map ``v`` into itself would change it: a null in it or in a map it holds (lists are
    replaced whole, nulls and all)."""
    for x in v.values():
        if x is None or (type(x) is dict and _has_null(x)):
            return True
    return False


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise BadRequest(f"invalid JSON pointer {path!r}")
    return [_unescape(t) for t in path[1:].split("/")]


def _get(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for t in tokens:
        if isinstance(cur, dict):
            if t not in cur:
                raise Invalid(f"jsonpatch: path not found: /{'/'.join(tokens)}")
            cur = cur[t]
        elif isinstance(cur, list):
            try:
                cur = cur[int(t)]
            except (ValueError, IndexError):
                raise Invalid(f"jsonpatch: index out of range: /{'/'.join(tokens)}")
        else:
            raise Invalid(f"jsonpatch: path not found: /{'/'.join(tokens)}")
    return cur


def _with(doc: Any, tokens: list[str], op: str, value: Any = None) -> Any:
    """A copy of ``doc`` (shallow along the path) with ``op`` applied at ``tokens``."""
    if not tokens:
        if op == "remove":
            raise Invalid("jsonpatch: cannot remove the whole document")
        return copy.deepcopy(value)
    head, rest = tokens[0], tokens[1:]
    if isinstance(doc, dict):
        out = dict(doc)
        if rest:
            if head not in out:
                raise Invalid(f"jsonpatch: path not found: {head}")
            out[head] = _with(out[head], rest, op, value)
        elif op == "remove":
            if head not in out:
                raise Invalid(f"jsonpatch: remove of a missing key: {head}")
            del out[head]
        elif op == "replace":
            if head not in out:
                raise Invalid(f"jsonpatch: replace of a missing key: {head}")
            out[head] = copy.deepcopy(value)
        else:  # add
            out[head] = copy.deepcopy(value)
        return out
    if isinstance(doc, list):
        out_l = list(doc)
        if head == "-" and not rest and op == "add":
            out_l.append(copy.deepcopy(value))
            return out_l
        try:
            i = int(head)
        except ValueError:
            raise Invalid(f"jsonpatch: invalid array index {head!r}")
        if rest:
            if not 0 <= i < len(out_l):
                raise Invalid(f"jsonpatch: index out of range: {i}")
            out_l[i] = _with(out_l[i], rest, op, value)
        elif op == "add":
            if not 0 <= i <= len(out_l):
                raise Invalid(f"jsonpatch: index out of range: {i}")
            out_l.insert(i, copy.deepcopy(value))
        elif op == "remove":
            if not 0 <= i < len(out_l):
                raise Invalid(f"jsonpatch: index out of range: {i}")
            del out_l[i]
        else:
            if not 0 <= i < len(out_l):
                raise Invalid(f"jsonpatch: index out of range: {i}")
            out_l[i] = copy.deepcopy(value)
        return out_l
    raise Invalid("jsonpatch: path through a scalar")


def json_patch(doc: Any, ops: Any, max_operations: int | None = None, max_copy_bytes: int | None = None) -> Any:
    """RFC 6902 over a JSON document (add, remove, replace, move, copy, test); with the bounds given, a patch of
    more operations is a 413 and copies adding more bytes in all an Invalid, as kube-apiserver answers them."""
    if not isinstance(ops, list):
        raise BadRequest("json patch must be a list of operations")
    if max_operations is not None and len(ops) > max_operations:
        raise RequestEntityTooLarge(f"Request entity too large: The allowed maximum operations in a JSON patch is "
                                    f"{max_operations}, got "
                                    f"{len(ops)}")
    copied = 0
    for o in ops:
        if not isinstance(o, dict) or "op" not in o or "path" not in o:
            raise BadRequest(f"invalid json patch operation {o!r}")
        op, tokens = o["op"], _pointer(o["path"])
        if op in ("add", "replace"):
            if "value" not in o:
                raise BadRequest(f"json patch {op} needs a value")
            doc = _with(doc, tokens, op, o["value"])
        elif op == "remove":
            doc = _with(doc, tokens, "remove")
        elif op in ("move", "copy"):
            src = _pointer(o.get("from", ""))
            value = _get(doc, src)
            if op == "copy" and max_copy_bytes is not None:
                copied += _size(value)
                if copied > max_copy_bytes:
                    raise Invalid(f"Unable to complete the copy, the accumulated size increase of copy is {copied}, "
                                  f"exceeding the limit {max_copy_bytes}")
            if op == "move":
                doc = _with(doc, src, "remove")
            doc = _with(doc, tokens, "add", value)
        elif op == "test":
            if _get(doc, tokens) != o.get("value"):
                raise Invalid(f"jsonpatch: test failed at {o['path']}")
        else:
            raise BadRequest(f"unknown json patch operation {op!r}")
    return doc


def _size(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):  # too deep to write: as large as allowed at all
        return MAX_COPY_BYTES + 1
