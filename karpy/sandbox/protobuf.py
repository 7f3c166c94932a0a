"""Kubernetes' protobuf encoding of request bodies, decoded into the JSON dicts the sandbox works with.

kubectl's generators (``create namespace|deployment|configmap|secret|job|...``,
``run``, ``expose``, the eviction of ``drain``) send the built-in kinds as
``application/vnd.kubernetes.protobuf``: the 4 bytes ``k8s\\x00``, then a
``runtime.Unknown`` message (``typeMeta`` with apiVersion and kind, ``raw`` the
object's own message, ``contentEncoding``, ``contentType``).

The schemas are Kubernetes' ``generated.proto`` files compiled into
``protos/kubernetes-<version>.binpb`` by ``scripts/gen_k8s_protos.py``, loaded
into a descriptor pool of Google's ``protobuf`` package; the wire format is
that package's. This module turns a decoded message into the dict a JSON body
of the same object gives, following Kubernetes' JSON:

* field names are the proto names, except where the Go JSON tag differs
  (``$ref``, ``x-kubernetes-*``); embedded structs that JSON inlines
  (``Volume.volumeSource``, ``SecretKeySelector.localObjectReference``,
  ``Probe.handler``...) are merged into their parent;
* ``Time`` is RFC 3339 in seconds (``2026-01-02T03:04:05Z``), ``MicroTime``
  with 6 fractional digits, and the zero time is left out; ``Duration`` is
  Go's ``1h2m3s``; ``Quantity`` its string; ``IntOrString`` an int or a
  string by its ``type``; ``RawExtension``, ``FieldsV1`` and the CRD schema's
  ``JSON`` the JSON of their raw bytes; ``bytes`` (Secret ``data``, ConfigMap
  ``binaryData``) base64;
* Go's protobuf marshaller writes every non-pointer field, set or not, where
  its JSON marshaller leaves out what ``omitempty`` says: an empty string, a
  zero number or false is dropped unless Go declares the field a pointer
  (``replicas: 0``, ``storageClassName: ""``, ``suspend: false`` mean
  something) or without ``omitempty``; empty lists and maps are dropped; nested
  messages are kept even when empty, as JSON writes struct fields
  (``resources: {}``, ``emptyDir: {}``), except the zero time and an empty
  ``RawExtension``, which JSON writes as null. Which fields are pointers comes
  from the Go struct tags, recorded next to the descriptors
  (``protos/kubernetes-<version>.gojson.json``). Items of lists and values of
  maps are kept as they are.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from importlib import resources
from typing import Any, Callable

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
VERSION = "v0.33.13"  # the k8s.io/api version the descriptors were generated from

_META = "k8s.io.apimachinery.pkg.apis.meta.v1"
_EXT = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1"
_UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"

# API group -> proto package prefix (the version is appended)
GROUP_PACKAGES = {
    "": "k8s.io.api.core", "apps": "k8s.io.api.apps", "batch": "k8s.io.api.batch", "policy": "k8s.io.api.policy",
    "rbac.authorization.k8s.io": "k8s.io.api.rbac", "coordination.k8s.io": "k8s.io.api.coordination",
    "scheduling.k8s.io": "k8s.io.api.scheduling", "storage.k8s.io": "k8s.io.api.storage",
    "networking.k8s.io": "k8s.io.api.networking", "discovery.k8s.io": "k8s.io.api.discovery",
    "events.k8s.io": "k8s.io.api.events", "autoscaling": "k8s.io.api.autoscaling", "node.k8s.io": "k8s.io.api.node",
    "authorization.k8s.io": "k8s.io.api.authorization", "authentication.k8s.io": "k8s.io.api.authentication",
    "apiextensions.k8s.io": "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions",
}

_TYPE_MESSAGE, _TYPE_BYTES = 11, 12  # FieldDescriptorProto.Type of descriptor.proto
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_GO_ZERO_TIME = -62135596800  # 0001-01-01T00:00:00Z, Go's zero time.Time
_OMIT = object()


class DecodeError(ValueError):
    """The body is not a protobuf object of the expected type; the message is kube-apiserver's."""


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == MEDIA_TYPE


# --- the schemas ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Hints:
    pointer: frozenset = frozenset()  # present means set, even when empty
    keep: frozenset = frozenset()  # scalars JSON writes even when zero (no omitempty)
    inline: frozenset = frozenset()  # embedded structs whose fields JSON writes in the parent
    names: dict = field(default_factory=dict)  # field number -> JSON name, where it is not the proto name


_NO_HINTS = _Hints()


class _Schemas:
    def __init__(self) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        base = resources.files(__package__) / "protos"
        fds = descriptor_pb2.FileDescriptorSet.FromString((base / f"kubernetes-{VERSION}.binpb").read_bytes())
        self.pool = descriptor_pool.DescriptorPool()
        for f in fds.file:  # protoc wrote each file after its imports
            self.pool.Add(f)
        self._factory = message_factory
        raw = json.loads((base / f"kubernetes-{VERSION}.gojson.json").read_text())["messages"]
        self.hints = {name: _Hints(frozenset(h.get("p", ())), frozenset(h.get("k", ())), frozenset(h.get("i", ())),
                                   {int(k): v for k, v in (h.get("n") or {}).items()})
                      for name, h in raw.items()}
        self._classes: dict[str, type] = {}

    def message_class(self, full_name: str) -> type | None:
        cls = self._classes.get(full_name)
        if cls is None:
            try:
                desc = self.pool.FindMessageTypeByName(full_name)
            except KeyError:
                return None
            cls = self._classes[full_name] = self._factory.GetMessageClass(desc)
        return cls


@lru_cache(maxsize=1)
def schemas() -> _Schemas:
    return _Schemas()


def message_name(api_version: str, kind: str) -> str | None:
    """The proto message of a kind (``apps/v1``, ``Deployment`` -> ``k8s.io.api.apps.v1.Deployment``)."""
    if kind in _META_KINDS:
        return f"{_META}.{kind}"
    group, _, version = api_version.rpartition("/")
    pkg = GROUP_PACKAGES.get(group)
    if pkg is None or not version or not kind:
        return None
    return f"{pkg}.{version}.{kind}"


def message_class(api_version: str, kind: str) -> type | None:
    name = message_name(api_version, kind)
    return schemas().message_class(name) if name else None


# --- the envelope ---------------------------------------------------------------------------------
# kinds of meta.k8s.io that every group version carries (a DeleteOptions body is sent as "v1", "apps/v1"...)
_META_KINDS = frozenset({"DeleteOptions", "CreateOptions", "UpdateOptions", "PatchOptions", "GetOptions",
                         "ListOptions", "Status", "WatchEvent"})


def decode(body: bytes, api_version: str, kind: str) -> dict:
    """The object of a protobuf body as its JSON dict, with ``apiVersion`` and ``kind`` from the envelope.

    ``api_version`` and ``kind`` are the type the endpoint takes: an envelope without them gets them, as
    kube-apiserver's decoder defaults them, and the errors name it. A body that is no envelope, an envelope
    of a kind without a message here, of another kind, or whose message does not parse raises
    :class:`DecodeError` with kube-apiserver's message (a 400)."""
    try:
        got_version, got_kind, raw = unwrap(body)
    except DecodeError as e:
        raise DecodeError(f"the object provided is unrecognized (must be of type {kind}): {e} ({_summary(body)})") \
            from None
    got_kind = got_kind or kind
    if not got_version:
        got_version = api_version
    version = got_version.rpartition("/")[2]
    prefix = f'{got_kind} in version "{version}" cannot be handled as a {kind}: '
    cls = message_class(got_version, got_kind)
    if cls is None:
        raise DecodeError(prefix + f'no kind "{got_kind}" is registered for version "{got_version}" in scheme '
                                   '"pkg/runtime/scheme.go:110"')
    if got_kind != kind:
        internal = (api_version.rpartition("/")[0].split(".")[0] or "core") if api_version else "core"
        raise DecodeError(prefix + f"converting ({version}.{got_kind}) to ({internal}.{kind}): unknown conversion")
    msg = cls()
    try:
        msg.ParseFromString(raw)
        out = to_json(msg)
    except DecodeError as e:
        raise DecodeError(prefix + str(e)) from None
    except Exception as e:  # noqa: BLE001 - the protobuf package's DecodeError and friends
        raise DecodeError(prefix + f"proto: {e}") from None
    return {"apiVersion": got_version, "kind": got_kind, **out}


def unwrap(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw message) of an envelope, the first two "" when it names none."""
    if not body:
        raise DecodeError("empty data")
    if not body.startswith(MAGIC):
        raise DecodeError(f"provided data does not appear to be a protobuf message, expected prefix "
                          f"[{' '.join(str(b) for b in MAGIC)}]")
    if len(body) == len(MAGIC):
        raise DecodeError("empty body")
    unk = schemas().message_class(_UNKNOWN)()
    try:
        unk.ParseFromString(body[len(MAGIC):])
    except Exception as e:  # noqa: BLE001
        raise DecodeError(f"proto: {e}") from None
    return unk.typeMeta.apiVersion, unk.typeMeta.kind, unk.raw


def _summary(body: bytes, limit: int = 30) -> str:
    """How kube-apiserver quotes a body it cannot read: JSON as text, anything else in hex, 30 bytes at most."""
    if not body:
        return "<empty>"
    more = " ..." if len(body) > limit else ""
    if body[:1] == b"{":
        return body[:limit].decode("utf-8", "replace") + more
    return body[:limit].hex() + more


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    """A protobuf body: the magic, then the ``runtime.Unknown`` holding ``raw`` (what clients send)."""
    unk = schemas().message_class(_UNKNOWN)()
    unk.typeMeta.apiVersion = api_version
    unk.typeMeta.kind = kind
    unk.raw = raw
    unk.contentEncoding = ""
    unk.contentType = ""
    return MAGIC + unk.SerializeToString()


def encode(msg: Any) -> bytes:
    """A message as a protobuf body, apiVersion and kind from its proto package and name."""
    full = msg.DESCRIPTOR.full_name
    for group, pkg in GROUP_PACKAGES.items():
        if full.startswith(pkg + "."):
            version, _, kind = full[len(pkg) + 1:].partition(".")
            return envelope(f"{group}/{version}" if group else version, kind, msg.SerializeToString())
    raise ValueError(f"{full} is not an object of a served group")


# --- messages to JSON -----------------------------------------------------------------------------
def to_json(msg: Any) -> Any:
    """A message as Kubernetes' JSON writes it (a dict, or a scalar for the types that marshal themselves)."""
    special = _SPECIAL.get(msg.DESCRIPTOR.full_name)
    if special is not None:
        return special(msg)
    h = schemas().hints.get(msg.DESCRIPTOR.full_name, _NO_HINTS)
    out: dict[str, Any] = {}
    for fd, value in msg.ListFields():
        num = fd.number
        if fd.is_repeated:
            mt = fd.message_type
            if mt is not None and mt.GetOptions().map_entry:
                vfd = mt.fields_by_name["value"]
                v: Any = {k: _item(vfd, x) for k, x in value.items()}
            else:
                v = [_item(fd, x) for x in value]
            if not v:
                continue
        elif fd.type == _TYPE_MESSAGE:
            v = to_json(value)
            if v is _OMIT:
                continue
            if num in h.inline:
                if isinstance(v, dict):
                    out.update(v)
                continue
            # kept even when empty: JSON writes a struct field whether or not it is a pointer
        else:
            v = _scalar(fd, value)
            if not v and num not in h.pointer and num not in h.keep:
                continue
        out[h.names.get(num, fd.name)] = v
    return out


def _item(fd: Any, value: Any) -> Any:
    """An item of a list or a value of a map: kept as it is, even when empty."""
    if fd.message_type is not None:
        v = to_json(value)
        return None if v is _OMIT else v
    return _scalar(fd, value)


def _scalar(fd: Any, value: Any) -> Any:
    if fd.type == _TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)  # Go's encoding/json writes 5, not 5.0
    return value


# --- the types that marshal themselves ------------------------------------------------------------
_INTSTR = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"


def _time(msg: Any, micro: bool) -> Any:
    if not msg.HasField("seconds") and not msg.HasField("nanos"):
        return _OMIT  # an empty message: Go's zero time, which JSON writes as null
    secs = msg.seconds
    if secs == _GO_ZERO_TIME and not msg.nanos:
        return _OMIT
    try:
        t = _EPOCH + timedelta(seconds=secs)
    except OverflowError:
        raise DecodeError(f"time out of range: {secs} seconds") from None
    text = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    if micro:
        # MicroTime keeps the nanoseconds and writes microseconds; Time reads only whole seconds
        text += f".{msg.nanos // 1000:06d}"
    return text + "Z"


def go_duration(ns: int) -> str:
    """Go's ``time.Duration.String()``: ``1h2m3.5s``, ``1.5ms``, ``0s``."""
    if ns == 0:
        return "0s"
    sign, u = ("-", -ns) if ns < 0 else ("", ns)
    if u < 1_000_000_000:
        for unit, digits, suffix in ((1, 0, "ns"), (1_000, 3, "µs"), (1_000_000, 6, "ms")):
            if u < unit * 1000:
                whole, frac = divmod(u, unit)
                return sign + str(whole) + (f".{frac:0{digits}d}".rstrip("0") if frac else "") + suffix
    secs, frac = divmod(u, 1_000_000_000)
    hours, rem = divmod(secs, 3600)
    minutes, seconds = divmod(rem, 60)
    text = str(seconds) + (f".{frac:09d}".rstrip("0") if frac else "") + "s"
    if hours:
        text = f"{hours}h{minutes}m" + text
    elif minutes:
        text = f"{minutes}m" + text
    return sign + text


def _raw_json(raw: bytes) -> Any:
    if not raw:
        return _OMIT
    if raw.startswith(MAGIC):  # an object a Go client embedded in its own protobuf encoding
        api_version, kind, inner = unwrap(raw)
        cls = message_class(api_version, kind)
        if cls is None:
            raise DecodeError(f'no kind "{kind}" is registered for version "{api_version}"')
        msg = cls()
        msg.ParseFromString(inner)
        return {"apiVersion": api_version, "kind": kind, **to_json(msg)}
    try:
        return json.loads(raw)
    except ValueError as e:
        raise DecodeError(f"an embedded object is not JSON: {e}") from None


def _intstr(m: Any) -> Any:
    return m.strVal if m.type == 1 else m.intVal


def _quantity(m: Any) -> str:
    return m.string or "0"


def _schema_or_array(m: Any) -> Any:
    if len(m.jSONSchemas):
        return [to_json(x) for x in m.jSONSchemas]
    return to_json(m.schema) if m.HasField("schema") else _OMIT


def _schema_or_bool(m: Any) -> Any:
    if m.HasField("schema"):
        return to_json(m.schema)
    return bool(m.allows)


def _schema_or_strings(m: Any) -> Any:
    if len(m.property):
        return list(m.property)
    return to_json(m.schema) if m.HasField("schema") else _OMIT


_SPECIAL: dict[str, Callable[[Any], Any]] = {
    f"{_META}.Time": lambda m: _time(m, False),
    f"{_META}.MicroTime": lambda m: _time(m, True),
    f"{_META}.Duration": lambda m: go_duration(m.duration),
    f"{_META}.FieldsV1": lambda m: _raw_json(m.Raw),
    "k8s.io.apimachinery.pkg.runtime.RawExtension": lambda m: _raw_json(m.raw),
    "k8s.io.apimachinery.pkg.api.resource.Quantity": _quantity,
    _INTSTR: _intstr,
    f"{_EXT}.JSON": lambda m: _raw_json(m.raw),
    f"{_EXT}.JSONSchemaPropsOrArray": _schema_or_array,
    f"{_EXT}.JSONSchemaPropsOrBool": _schema_or_bool,
    f"{_EXT}.JSONSchemaPropsOrStringArray": _schema_or_strings,
}


# --- unknown fields ---------------------------------------------------------------------------------------
def _json_fields(full_name: str) -> dict[str, Any]:
    """JSON name -> field descriptor of a message, the fields of structs JSON inlines included."""
    cached = _FIELDS.get(full_name)
    if cached is not None:
        return cached
    desc = schemas().pool.FindMessageTypeByName(full_name)
    h = schemas().hints.get(full_name, _NO_HINTS)
    out: dict[str, Any] = {}
    for fd in desc.fields:
        if fd.number in h.inline and fd.message_type is not None:
            out.update(_json_fields(fd.message_type.full_name))
        else:
            out[h.names.get(fd.number, fd.name)] = fd
    _FIELDS[full_name] = out
    return out


_FIELDS: dict[str, dict[str, Any]] = {}


def prune(obj: dict, api_version: str, kind: str) -> tuple[dict, list[str]]:
    """``obj`` without the fields its built-in kind does not have, and the paths of those fields (as
    kube-apiserver's decoder names them in its warnings: ``spec.bogus``, ``data``...). Types are not checked.
    An object of a kind without a schema here is returned as it is."""
    name = message_name(api_version, kind)
    if name is None or schemas().message_class(name) is None:
        return obj, []
    unknown: list[str] = []
    out = _prune(obj, name, "", unknown, top=True)
    return out, unknown


def _prune(obj: Any, message: str, path: str, unknown: list[str], top: bool = False) -> Any:
    if not isinstance(obj, dict) or message in _SPECIAL_NAMES:
        return obj
    fields = _json_fields(message)
    out: dict[str, Any] | None = None
    for k, v in obj.items():
        fd = fields.get(k)
        where = f"{path}.{k}" if path else k
        if fd is None and not (top and k in ("apiVersion", "kind")):
            unknown.append(where)
            if out is None:
                out = {kk: vv for kk, vv in obj.items()}
            out.pop(k, None)
            continue
        if fd is None or fd.message_type is None:
            continue
        mt = fd.message_type
        if fd.is_repeated and mt.GetOptions().map_entry:
            vt = mt.fields_by_name["value"].message_type
            if vt is None or not isinstance(v, dict):
                continue
            nv: Any = {mk: _prune(mv, vt.full_name, f"{where}.{mk}", unknown) for mk, mv in v.items()}
        elif fd.is_repeated:
            if not isinstance(v, list):
                continue
            nv = [_prune(x, mt.full_name, f"{where}[{i}]", unknown) for i, x in enumerate(v)]
        else:
            nv = _prune(v, mt.full_name, where, unknown)
        if nv != v:
            if out is None:
                out = {kk: vv for kk, vv in obj.items()}
            out[k] = nv
    return obj if out is None else out


_SPECIAL_NAMES = frozenset(_SPECIAL)
