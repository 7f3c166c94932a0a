"""Load manifests from files, directories and standard input, validate and default them.

``load_documents(paths)`` never raises for bad input: every problem becomes a
:class:`karpy.errors.FieldError` naming the file, the document (index and
``kind/name``) and the field, and the documents that are fine are returned.

What it reads, which kinds it skips or refuses, how HorizontalPodAutoscalers act and the
input limits (bytes, nesting, values per document) are described in docs/inputs.md.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import gc
import math
import operator
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

import yaml

from ..errors import FieldError, InputError
from ..kube.limits import MAX_DEPTH
from . import autoscaling, nodeoverlay
from .kinds import (
    BY_KIND,
    Validated,
    _prefixed,
    duplicate_object_message,
    generated_suffix,
    is_namespaced,
    validate_manifest,
)
from .schema import not_supported
from .unmodelled import SKIP, group_of, not_modelled, skipped_summary

STDIN_NAME = "<stdin>"
YAML_SUFFIXES = (".yaml", ".yml")

# Fewer values than this per document, after YAML aliases are expanded (guards against "billion laughs").
MAX_VALUES_PER_DOCUMENT = 2_000_000
# The most bytes of manifests one run reads, over every file, standard input and rendered kustomization:
# 16 MiB of YAML take about 1.4 GiB and half a minute to load, so past 64 MiB a run would not fit a laptop.
MAX_INPUT_BYTES = 64 * 1024 * 1024
# How deep a document may nest (MAX_DEPTH, 200 levels: karpy sandbox's bound too, below what karpy's JSON
# encoder writes). The YAML library composes a document recursively on the C stack and crashes the process
# past about 20,000 levels; Kubernetes objects nest about 20, the deepest CRDs about 100.


@dataclass
class Document:
    """One validated object, with upstream defaults applied (as the API server would return it)."""

    file: str
    index: int  # position of the document in its file, from 0
    kind: str
    api_version: str
    name: str
    namespace: str | None  # "default" when a namespaced object names none; None for cluster-scoped kinds
    obj: dict
    prefix: str = ""  # where in its document the object is: "" or, for an item of a List, "items[j]"

    @property
    def key(self) -> tuple[str, str | None, str]:
        return (self.kind, self.namespace, self.name)

    def __repr__(self) -> str:  # keep test output readable
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"Document({self.file}#{self.index} {self.api_version} {self.kind} {ns}{self.name})"


@dataclass
class LoadResult:
    documents: list[Document] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)
    skipped: list[Document] = field(default_factory=list)  # of kinds that do not affect node provisioning
    autoscalers: list[Document] = field(default_factory=list)  # HorizontalPodAutoscalers, applied to their targets
    notes: list[str] = field(default_factory=list)  # what a user should know that is not an error

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> None:
        if self.errors:
            raise InputError(self.errors)

    def of_kind(self, kind: str) -> list[Document]:
        return [d for d in self.documents if d.kind == kind]

    @property
    def scenario(self) -> Document | None:
        s = self.of_kind("Scenario")
        return s[0] if s else None

    def messages(self) -> list[str]:
        """The notes for the user, and one line for every document skipped."""
        out = list(self.notes)
        if self.skipped:
            out.append(skipped_summary([d.kind for d in self.skipped]))
        return out


# --- YAML ---------------------------------------------------------------------

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """SafeLoader that keeps timestamps as strings and rejects duplicate keys (as kubectl does)."""

    # The composer calls these two around every node to follow path resolvers, which this loader has none
    # of (asserted below): C callables that ignore their arguments save a Python call each.
    descend_resolver = staticmethod(operator.is_)
    ascend_resolver = staticmethod(tuple)

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """The tag of a node; that of a plain scalar is remembered (manifests repeat their words)."""
        if kind is yaml.ScalarNode and implicit[0]:
            tag = _PLAIN_TAGS.get(value)
            if tag is None:
                if value and value[0] not in _RESOLVED_FIRST:
                    return _STR  # no implicit resolver starts with that character: a string (names, images)
                tag = super().resolve(kind, value, implicit)
                if len(value) <= 64 and len(_PLAIN_TAGS) < 65536:
                    _PLAIN_TAGS[value] = tag
            return tag
        # without path resolvers, every other node has its kind's default tag
        if kind is yaml.ScalarNode:
            return _STR
        return _MAP if kind is yaml.MappingNode else _SEQ

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                k = key_node.value
                if k in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f'mapping key "{k}" already defined at line {seen[k] + 1}',
                        key_node.start_mark,
                    )
                seen[k] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)

    def construct_document(self, node: Any) -> Any:
        """Plain documents (maps, lists, strings, numbers, booleans, nulls, anchors) are built by a tight
        walk of the node tree; anything else (tags, merge keys, sets, binary) by PyYAML's constructor."""
        self._budget = MAX_VALUES_PER_DOCUMENT
        try:
            if node.__class__ is yaml.ScalarNode:
                self._budget -= 1
                if self._budget < 0:
                    raise _TooBig()
                return _CleanDocument(self._scalar(node))
            return _CleanDocument(self._collection(node, set()))
        except _Fallback:
            return super().construct_document(node)

    # The fast constructor counts every node (keys too) in document order against the value budget, and
    # gives way to PyYAML's constructor at the first alias of a map or list, tag, merge key or non-finite
    # number. Its result is already what _to_json makes of a document: a fresh JSON-shaped tree.

    def _scalar(self, node: Any) -> Any:
        tag = node.tag
        if tag == _STR:
            return node.value
        if tag == _INT:
            return self.construct_yaml_int(node)
        if tag == _BOOL:
            return self.construct_yaml_bool(node)
        if tag == _NULL:
            return None
        if tag == _FLOAT:
            f = self.construct_yaml_float(node)
            if not math.isfinite(f):
                raise _Fallback()
            return f
        raise _Fallback()

    def _collection(self, node: Any, seen: set[int]) -> Any:
        """A map or list, and what it holds."""
        if id(node) in seen:
            raise _Fallback()  # an alias: the slow path expands it within the value budget
        self._budget -= 1
        if self._budget < 0:
            raise _TooBig()  # no alias met so far: the document itself is that large
        cls = node.__class__
        if cls is yaml.MappingNode:
            if node.tag != _MAP:
                raise _Fallback()
            seen.add(id(node))
            return self._mapping(node, seen)
        if cls is yaml.SequenceNode:
            if node.tag != _SEQ:
                raise _Fallback()
            seen.add(id(node))
            return self._sequence(node, seen)
        raise _Fallback()

    def _mapping(self, node: Any, seen: set[int]) -> dict:
        budget = self._budget
        out: dict = {}
        scalar = yaml.ScalarNode
        for key_node, value_node in node.value:
            if key_node.__class__ is not scalar or key_node.tag == _MERGE:
                raise _Fallback()
            budget -= 1
            if budget < 0:
                raise _TooBig()
            if key_node.tag == _STR:
                k = key_node.value
            else:
                k = self._scalar(key_node)
                if not isinstance(k, str):
                    k = _key_str(k)
            if k in out:
                self._duplicate_key(node, key_node, k)
            if value_node.__class__ is scalar:
                budget -= 1
                if budget < 0:
                    raise _TooBig()
                out[k] = value_node.value if value_node.tag == _STR else self._scalar(value_node)
            else:
                self._budget = budget
                out[k] = self._collection(value_node, seen)
                budget = self._budget
        self._budget = budget
        return out

    def _sequence(self, node: Any, seen: set[int]) -> list:
        budget = self._budget
        out: list = []
        scalar = yaml.ScalarNode
        for item in node.value:
            if item.__class__ is scalar:
                budget -= 1
                if budget < 0:
                    raise _TooBig()
                out.append(item.value if item.tag == _STR else self._scalar(item))
            else:
                self._budget = budget
                out.append(self._collection(item, seen))
                budget = self._budget
        self._budget = budget
        return out

    def _duplicate_key(self, node: Any, key_node: Any, k: str) -> None:
        """The error for a key given twice in a map (as strings: 1 and "1" are the same key), at its first line."""
        for first, _ in node.value:
            fk = first.value if first.tag == _STR else _key_str(self._scalar(first))
            if fk == k:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f'mapping key "{key_node.value}" already defined at line {first.start_mark.line + 1}',
                    key_node.start_mark)


_PLAIN_TAGS: dict[str, str] = {}  # plain scalar -> its tag under _Loader's implicit resolvers


class _Fallback(Exception):
    pass


class _CleanDocument:
    """A document the fast constructor built: already JSON-shaped, nothing to copy."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_FLOAT = "tag:yaml.org,2002:float"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"


assert not _Loader.yaml_path_resolvers
assert None not in _BaseLoader.yaml_implicit_resolvers  # no resolver that may match whatever the first character
_RESOLVED_FIRST = frozenset(_BaseLoader.yaml_implicit_resolvers)
_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


class _TooBig(Exception):
    pass


TOO_MANY_VALUES = (f"the document is too large: more than {MAX_VALUES_PER_DOCUMENT:,} values (maps, lists and "
                   "scalars, YAML aliases expanded); karpy reads at most that many in one document")


class _BadValue(Exception):
    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message


def _key_str(k: Any) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, bool):
        return "true" if k else "false"
    if k is None:
        return "null"
    return str(k)


def _to_json(v: Any, budget: list[int]) -> Any:
    """A fresh JSON-shaped copy of a YAML value (aliases expanded, keys as strings)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig()
    if isinstance(v, dict):
        return {k if isinstance(k, str) else _key_str(k): _to_json(x, budget) for k, x in v.items()}
    if isinstance(v, list):
        return [_to_json(x, budget) for x in v]
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _BadValue("", f"Invalid value: {v!r}: NaN and infinite numbers are not supported")
        return v
    if isinstance(v, (_dt.datetime, _dt.date)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, (set, frozenset)):
        return {_key_str(k): None for k in v}
    return str(v)


def _non_finite_path(v: Any, path: str = "") -> str | None:
    """Where a NaN or infinity hides in a YAML value (only called after one was found)."""
    if isinstance(v, float) and not math.isfinite(v):
        return path
    if isinstance(v, dict):
        for k, x in v.items():
            ks = _key_str(k)
            found = _non_finite_path(x, f"{path}.{ks}" if path else ks)
            if found is not None:
                return found
    elif isinstance(v, list):
        for i, x in enumerate(v):
            found = _non_finite_path(x, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _yaml_error(file: str, index: int, e: Exception) -> FieldError:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(e, "problem", None) or str(e)
    context = getattr(e, "context", None)
    msg = f"invalid YAML{where}: {problem}"
    if context and context not in problem:
        msg += f" ({context})"
    return FieldError(file, index, None, None, "", msg)


def _parse(text: str, file: str, errors: list[FieldError]) -> Iterator[tuple[int, Any]]:
    """Yield (index, value) for each YAML document; a syntax error, or a document nested too deeply
    or holding too many values, ends the file."""
    too_deep = _too_deep(text)
    if too_deep is not None:
        text = text[:too_deep[0]]  # the documents before the deep one are read as usual
    i = 0
    try:
        for data in yaml.load_all(text, Loader=_Loader):
            yield i, data
            i += 1
    except yaml.YAMLError as e:
        errors.append(_yaml_error(file, i, e))
        return
    except _TooBig:
        errors.append(FieldError(file, i, None, None, "", TOO_MANY_VALUES))
        return
    except RecursionError:
        errors.append(FieldError(file, i, None, None, "", "invalid YAML: the document is nested too deeply"))
        return
    except Exception as e:  # noqa: BLE001 - the YAML library must not crash karpy either
        errors.append(FieldError(file, i, None, None, "", f"invalid YAML: {e}"))
        return
    if too_deep is not None:
        errors.append(FieldError(file, i, None, None, "",
                                 f"invalid YAML at line {too_deep[1]}: the document is nested too deeply: more "
                                 f"than {MAX_DEPTH} levels of maps and lists (karpy reads at most {MAX_DEPTH})"))


_COLLECTION_START = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_COLLECTION_END = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _too_deep(text: str) -> tuple[int, int] | None:
    """Where the first document nested more than MAX_DEPTH deep starts (offset in ``text``) and the line
    where it goes past, or None. Checked before the YAML library composes documents, which it does
    recursively on the C stack (a file of 30,000 "[" would crash the process).

    A document cannot nest deeper than its flow brackets plus twice its longest line (each block level
    indents, or takes two columns as "- " or "? " on its line), so most files are let through by that
    bound; the others are walked as a stream of parser events, which is not recursive."""
    flow = text.count("[") + text.count("{")
    room = (MAX_DEPTH - 2 - flow) // 2
    if room > 0 and re.search(r"(?m)^[^\n]{%d}" % room, text) is None:  # tried at line starts only
        return None
    depth = 0
    doc_line = 0
    try:
        for ev in yaml.parse(text, Loader=_BaseLoader):
            cls = ev.__class__
            if cls in _COLLECTION_START:
                depth += 1
                if depth > MAX_DEPTH:
                    return _line_offset(text, doc_line), ev.start_mark.line + 1
            elif cls in _COLLECTION_END:
                depth -= 1
            elif cls is yaml.DocumentStartEvent:
                doc_line = ev.start_mark.line
    except Exception:  # noqa: BLE001 - a syntax error: the parse that follows reports it
        return None
    return None


def _line_offset(text: str, line: int) -> int:
    """Where line ``line`` (from 0) of ``text`` starts."""
    pos = 0
    for _ in range(line):
        pos = text.index("\n", pos) + 1
    return pos


# --- files ----------------------------------------------------------------------

NOT_UTF8 = "not a UTF-8 text file"
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


class _Budget:
    """The bytes still to be read in this run (MAX_INPUT_BYTES over every input)."""

    def __init__(self, total: int | None = None):
        self.left = MAX_INPUT_BYTES if total is None else total

    def read(self, stream: Any) -> bytes | str:
        """All of ``stream`` (bytes, or text where there is no byte stream); _TooLarge past the budget."""
        chunks: list = []
        while True:
            chunk = stream.read(min(1 << 20, self.left + 1))
            if not chunk:
                break
            chunks.append(chunk)
            self.left -= len(chunk)
            if self.left < 0:
                raise _TooLarge()
        return (b"" if not chunks or isinstance(chunks[0], bytes) else "").join(chunks)

    def take(self, data: bytes | str) -> None:
        self.left -= len(data)
        if self.left < 0:
            raise _TooLarge()


class _TooLarge(Exception):
    pass


TOO_LARGE = (f"the input is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB; karpy simulate reads at most "
             f"{MAX_INPUT_BYTES // (1024 * 1024)} MiB of manifests in all (files, standard input and kustomizations)")


def _read_stdin(budget: _Budget) -> bytes | str:
    """Standard input as bytes (decoded like a file's), or as text where there is no byte stream."""
    if sys.stdin is None:
        raise OSError("standard input is closed")
    return budget.read(getattr(sys.stdin, "buffer", None) or sys.stdin)


def _decode(data: bytes | str) -> str:
    """Raises UnicodeError when ``data`` is not UTF-8 (or, as text, holds undecodable bytes)."""
    if isinstance(data, (bytes, bytearray)):
        return bytes(data).decode("utf-8-sig")
    data.encode("utf-8")  # text read with surrogateescape still carries the bytes that were not UTF-8
    return data[1:] if data.startswith("\ufeff") else data


def _sources(paths: list[str], stdin_data: str | bytes | None, errors: list[FieldError], notes: list[str],
             budget: _Budget) -> Iterator[tuple[str, str]]:
    """(name, text) of every input, each file once: a file named twice (or given both by itself
    and in its directory), or "-" given twice, is read the first time only; it holds the same
    objects, which would otherwise all be duplicates of themselves."""
    seen: set[str] = set()
    for path in paths:
        if path == "-":
            if "-" in seen:
                continue
            seen.add("-")
            try:
                if stdin_data is None:
                    stdin_data = _read_stdin(budget)
                else:
                    budget.take(stdin_data)
                stdin_text = _decode(stdin_data)
            except _TooLarge:
                errors.append(FieldError(STDIN_NAME, None, None, None, "", TOO_LARGE))
                return
            except UnicodeError:
                errors.append(FieldError(STDIN_NAME, None, None, None, "", NOT_UTF8))
                continue
            except (OSError, ValueError) as e:
                errors.append(FieldError(STDIN_NAME, None, None, None, "", f"cannot read standard input: {e}"))
                continue
            yield STDIN_NAME, stdin_text
            continue
        if os.path.isdir(path):
            try:
                entries = sorted(os.listdir(path))
            except OSError as e:
                errors.append(FieldError(path, None, None, None, "", f"cannot read directory: {e.strerror or e}"))
                continue
            files = [
                os.path.join(path, n)
                for n in entries
                if n.endswith(YAML_SUFFIXES) and os.path.isfile(os.path.join(path, n))
            ]
            kustomizations = [n for n in entries if n in KUSTOMIZATION_NAMES and os.path.isfile(os.path.join(path, n))]
            if kustomizations:
                notes.append(f"{os.path.join(path, kustomizations[0])}: skipped: a kustomization is not a manifest "
                             f"(karpy simulate -k {path} renders the directory as kubectl apply -k does)")
                files = [f for f in files if os.path.basename(f) not in KUSTOMIZATION_NAMES]
            if not files and not kustomizations:
                errors.append(FieldError(path, None, None, None, "", "no *.yaml or *.yml files in this directory"))
            for f in files:
                if _first_time(f, seen):
                    yield from _read_file(f, errors, budget)
            if budget.left < 0:
                return
            continue
        if os.path.basename(path) in KUSTOMIZATION_NAMES:
            where = os.path.dirname(path) or "."
            errors.append(FieldError(path, None, None, None, "", "a kustomization is not a manifest: "
                                     f"karpy simulate -k {where} renders it as kubectl apply -k does"))
            continue
        if _first_time(path, seen):
            yield from _read_file(path, errors, budget)
            if budget.left < 0:
                return


def _first_time(path: str, seen: set[str]) -> bool:
    try:
        key = os.path.realpath(path)
    except (OSError, ValueError):
        key = path
    if key in seen:
        return False
    seen.add(key)
    return True


def _read_file(path: str, errors: list[FieldError], budget: _Budget) -> Iterator[tuple[str, str]]:
    """A regular file, or a pipe (``<(helm template ...)``), within the budget; never a device."""
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
                errors.append(FieldError(path, None, None, None, "", "not a regular file: karpy simulate reads "
                                         "files, directories, pipes and standard input (-)"))
                return
            text = _decode(budget.read(f))
    except _TooLarge:
        errors.append(FieldError(path, None, None, None, "", TOO_LARGE))
        return
    except FileNotFoundError:
        errors.append(FieldError(path, None, None, None, "", "no such file or directory"))
        return
    except UnicodeDecodeError:
        errors.append(FieldError(path, None, None, None, "", NOT_UTF8))
        return
    except OSError as e:
        errors.append(FieldError(path, None, None, None, "", f"cannot read file: {e.strerror or e}"))
        return
    yield path, text


# --- documents ------------------------------------------------------------------


NOT_CHECKED_FIELD = "<nil>"  # where kube-apiserver says a custom resource's CEL rules were not checked


def _field_errors(file: str, index: int, v: Validated) -> list[FieldError]:
    return [FieldError(file, index, v.kind, v.name, f, m) for f, m in v.errors]


def _document(file: str, index: int, v: Validated, prefix: str = "") -> Document:
    return Document(
        file=file,
        index=index,
        kind=v.kind or "",
        api_version=v.api_version or "",
        name=v.name or "",
        namespace=v.namespace,
        obj=v.obj,
        prefix=prefix,
    )


def _is_list(raw: Any) -> bool:
    return (
        isinstance(raw, dict)
        and isinstance(raw.get("kind"), str)
        and raw["kind"].endswith("List")
        and raw["kind"] not in BY_KIND
        and "items" in raw
    )


def _kind_name(raw: Any) -> tuple[str | None, str | None]:
    if not isinstance(raw, dict):
        return None, None
    kind = raw.get("kind") if isinstance(raw.get("kind"), str) else None
    meta = raw.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else None
    return kind, name


def _scenario_name(raw: Any) -> str | None:
    """The name of a raw Scenario document ("" when unnamed), or None if it is not one."""
    if isinstance(raw, dict) and raw.get("kind") == "Scenario":
        meta = raw.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else ""
    return None


def _load_one(file: str, index: int, raw: Any, result: LoadResult, clean: bool = False) -> None:
    """``clean``: ``raw`` came from the fast YAML constructor, already JSON-shaped and fresh."""
    budget = [MAX_VALUES_PER_DOCUMENT]
    try:
        data = raw if clean else _to_json(raw, budget)
    except _TooBig:
        result.errors.append(FieldError(file, index, None, None, "", TOO_MANY_VALUES))
        return
    except _BadValue as e:
        kind, name = _kind_name(raw)
        try:
            where = _non_finite_path(raw) or ""
        except RecursionError:
            where = ""
        result.errors.append(FieldError(file, index, kind, name, where, e.message))
        return
    except RecursionError:
        result.errors.append(FieldError(file, index, None, None, "", "the document is nested too deeply"))
        return
    if _is_list(data):
        items = data["items"]
        if not isinstance(items, list):
            result.errors.append(FieldError(file, index, data["kind"], None, "items", "Invalid value: must be a list"))
            return
        for j, item in enumerate(items):
            if item is not None:  # an empty item, as an empty document, holds nothing
                _load_manifest(file, index, item, result, prefix=f"items[{j}]", seed=f"{file}#{index}[{j}]")
        return
    _load_manifest(file, index, data, result, prefix="", seed=f"{file}#{index}")


def _load_manifest(file: str, index: int, data: Any, result: LoadResult, *, prefix: str, seed: str) -> None:
    """One manifest of the input: validated if karpy models its kind, skipped if the kind does not
    affect node provisioning, refused (one line naming it) if it does and karpy does not model it."""
    kind, name = _kind_name(data)
    api_version = data.get("apiVersion") if isinstance(data, dict) else None
    if not kind or not isinstance(api_version, str) or not api_version or kind in BY_KIND:
        _validate_into(file, index, data, result, prefix=prefix, seed=seed)
        return
    meta = data.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) and isinstance(meta.get("namespace"), str) else None
    if kind == autoscaling.KIND and group_of(api_version) == "autoscaling":
        _load_autoscaler(file, index, data, result, prefix=prefix, seed=seed)
        return
    what, message = not_modelled(api_version, kind, data, BY_KIND) or (SKIP, "")
    if what == SKIP:
        result.skipped.append(Document(file, index, kind, api_version, name or "", namespace, data, prefix))
        return
    result.errors.append(FieldError(file, index, kind, name, _prefixed(prefix, "kind"), message))


def _load_autoscaler(file: str, index: int, data: dict, result: LoadResult, *, prefix: str, seed: str) -> None:
    """A HorizontalPodAutoscaler: validated, then kept in ``result.autoscalers`` (applied by ``_finish``)."""
    kind, name = _kind_name(data)
    api_version = data["apiVersion"]
    if api_version not in autoscaling.API_VERSIONS:
        result.errors.append(FieldError(file, index, kind, name, _prefixed(prefix, "apiVersion"),
                                        not_supported(api_version, autoscaling.API_VERSIONS) + f" (for kind {kind})"))
        return
    meta = data.get("metadata")
    if isinstance(meta, dict) and not meta.get("name") and isinstance(meta.get("generateName"), str):
        meta["name"] = name = meta["generateName"] + generated_suffix(f"{seed}|{prefix}|{kind}|{meta['generateName']}")
    try:
        problems = autoscaling.validate(data)
    except RecursionError:
        problems = [("", "the document is nested too deeply")]
    except Exception as e:  # noqa: BLE001 - a validator bug must not become a traceback
        problems = [("", f"internal error while validating this document: {type(e).__name__}: {e}")]
    if problems:
        result.errors.extend(FieldError(file, index, kind, name, _prefixed(prefix, f), m) for f, m in problems)
        return
    namespace = data["metadata"].get("namespace") or "default"
    result.autoscalers.append(Document(file, index, kind, api_version, name or "", namespace, data, prefix))


def _validate_into(file: str, index: int, data: Any, result: LoadResult, *, prefix: str, seed: str,
                   api_notes: bool = False) -> None:
    """Validate one manifest into ``result``. ``api_notes``: keep kube-apiserver's note that a custom resource's
    CEL rules were not checked (its error at ``<nil>``), which only an API server's client wants to see."""
    try:
        v = validate_manifest(data, prefix=prefix, seed=seed)
    except RecursionError:
        result.errors.append(FieldError(file, index, None, None, prefix, "the document is nested too deeply"))
        return
    except Exception as e:  # noqa: BLE001 - a validator bug must not become a traceback
        kind, name = _kind_name(data)
        result.errors.append(
            FieldError(file, index, kind, name, prefix, f"internal error while validating this document: {type(e).__name__}: {e}")
        )
        return
    if v.errors:
        errors = _field_errors(file, index, v)
        if not api_notes:
            errors = [e for e in errors if e.field != NOT_CHECKED_FIELD] or errors
        result.errors.extend(errors)
        return
    result.documents.append(_document(file, index, v, prefix))


def _cross_document_checks(result: LoadResult, scenarios_seen: list[tuple[str, int, str]]) -> None:
    first = scenarios_seen[0] if scenarios_seen else None
    for file, index, name in scenarios_seen[1:]:
        assert first is not None
        result.errors.append(
            FieldError(
                file,
                index,
                "Scenario",
                name,
                "kind",
                f"Forbidden: at most one Scenario is allowed; Scenario/{first[2]} is defined in {first[0]} "
                f"document {first[1]}",
            )
        )
    scenarios = result.of_kind("Scenario")
    defaults = [d for d in result.of_kind("PriorityClass") if d.obj.get("globalDefault") is True]
    for d in defaults[1:]:
        result.errors.append(
            FieldError(
                d.file,
                d.index,
                d.kind,
                d.name,
                "globalDefault",
                f"Forbidden: PriorityClass {defaults[0].name} is already marked as default. Only one default can exist",
            )
        )
    extra_scenarios = [d for d in scenarios if first is not None and (d.file, d.index) != first[:2]]
    duplicates = _duplicates(result)
    if extra_scenarios or len(defaults) > 1 or duplicates:
        bad = {id(d.obj) for d in extra_scenarios + defaults[1:] + duplicates}
        result.documents = [d for d in result.documents if id(d.obj) not in bad]


def _where(d: Document) -> str:
    return f"{d.file} document {d.index}" + (f" {d.prefix}" if d.prefix else "")


def _duplicates(result: LoadResult) -> list[Document]:
    """Objects that name an object given before them (same kind, namespace and name): errors, as
    ``kubectl create`` would report AlreadyExists; the first one stays. Returns the duplicates."""
    first: dict[tuple[str, str | None, str], Document] = {}
    out: list[Document] = []
    for d in result.documents:
        if d.kind == "Scenario" or not d.name:
            continue  # at most one Scenario is checked above
        key = (d.kind, d.namespace if is_namespaced(d.kind) else None, d.name)
        seen = first.get(key)
        if seen is None:
            first[key] = d
            continue
        out.append(d)
        result.errors.append(
            FieldError(
                d.file,
                d.index,
                d.kind,
                d.name,
                _prefixed(d.prefix, "metadata.name"),
                duplicate_object_message(d.kind, d.namespace, d.name, _where(seen)),
            )
        )
    return out


def load_documents(paths: list[str], stdin_text: str | bytes | None = None,
                   kustomizations: list[str] | tuple[str, ...] = ()) -> LoadResult:
    """Load, validate and default every manifest in ``paths`` (files, directories, or "-" for stdin)
    and in the ``kustomizations`` (directories rendered as ``kubectl apply -k`` renders them, first).

    ``stdin_text`` stands in for standard input (bytes are decoded as a file's
    are); without it, "-" reads ``sys.stdin`` as bytes. Collects every error
    across every document; documents without errors are returned in input
    order (files in the given order, a directory's files sorted by name,
    documents in file order). Documents of kinds that do not affect node
    provisioning are in ``skipped``; HorizontalPodAutoscalers are applied to
    their targets (``karpy.api.autoscaling``) and kept in ``autoscalers``.
    """
    result = LoadResult()
    scenarios: list[tuple[str, int, str]] = []
    budget = _Budget()
    with _no_cycle_collection():
        for file, text in _rendered(list(kustomizations), result.errors, budget):
            _load_text_into(text, file, result, scenarios)
        for file, text in _sources(list(paths), stdin_text, result.errors, result.notes, budget):
            _load_text_into(text, file, result, scenarios)
        _finish(result, scenarios)
    return result


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Loading builds millions of maps and lists that all stay alive and hold no cycles: the cyclic garbage
    collector, left on, would go over the growing heap again and again for nothing (about an eighth of the
    time of 20,000 pods). It runs again afterwards, if it ran before, with what was loaded frozen out of its
    reach (``gc.freeze``): otherwise its first young collection would go over all of it at once."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()


def _rendered(directories: list[str], errors: list[FieldError], budget: _Budget) -> Iterator[tuple[str, str]]:
    from .kustomize import RenderError, render

    for d in directories:
        name = f"{d} (kustomize)"
        try:
            text = _decode(render(d, budget.read))
        except _TooLarge:
            errors.append(FieldError(name, None, None, None, "", TOO_LARGE))
            return
        except RenderError as e:
            errors.append(FieldError(f"-k {d}", None, None, None, "", str(e)))
            continue
        except UnicodeError:
            errors.append(FieldError(name, None, None, None, "", NOT_UTF8))
            continue
        yield name, text


def _finish(result: LoadResult, scenarios: list[tuple[str, int, str]]) -> None:
    _cross_document_checks(result, scenarios)
    first: dict[tuple, Document] = {}
    for d in list(result.autoscalers):
        seen = first.setdefault((d.namespace, d.name), d)
        if seen is not d:
            result.autoscalers.remove(d)
            result.errors.append(FieldError(d.file, d.index, d.kind, d.name, _prefixed(d.prefix, "metadata.name"),
                                            duplicate_object_message(d.kind, d.namespace, d.name, _where(seen))))
    _skip_in_apply_steps(result)
    autoscaling.apply_autoscalers(result.documents, result.autoscalers, result.errors, result.notes)
    _share_pod_subtrees(result.documents)
    scenario = result.scenario
    note = nodeoverlay.gate_off_note([d.obj for d in result.documents], scenario.obj if scenario else None)
    if note:
        result.notes.append(note)


def _share_pod_subtrees(documents: list[Document]) -> None:
    """Make the equal specs and labels of Pods one object each, and equal parts of their specs too.

    Pods written out one by one (a generated manifest of thousands) repeat the same containers, requests and
    affinities in objects of their own; shared, they take their memory once, and karpy's pod compiler, which
    knows pods stamped from one template by the identity of their specs' parts, compiles each shape once
    (as it does for a Deployment's pods). Manifests are never mutated once loaded, so sharing is safe. Only
    maps and lists are shared, each only with an equal one with its keys in the same order."""
    table: dict[tuple, Any] = {}
    for d in documents:
        obj = d.obj
        if d.kind != "Pod" or not isinstance(obj, dict):
            continue
        spec = obj.get("spec")
        if type(spec) is dict:
            obj["spec"] = _shared(spec, table)
        meta = obj.get("metadata")
        labels = meta.get("labels") if type(meta) is dict else None
        if type(labels) is dict:
            meta["labels"] = _shared(labels, table)


def _shared(v: Any, table: dict[tuple, Any]) -> Any:
    """The one object in ``table`` equal to the map or list ``v`` (``v`` itself, its parts shared, when it is the
    first). Its key holds the keys, each value's type and each scalar value (True, 1 and 1.0 are not the same
    JSON), and the identity of each map or list in it, already shared."""
    key: list[Any] = []
    if type(v) is dict:
        key.append(dict)
        for k, x in v.items():
            t = type(x)
            if t is dict or t is list:
                y = _shared(x, table)
                if y is not x:
                    v[k] = y
                key.append(k)
                key.append(t)
                key.append(id(y))
            else:
                key.append(k)
                key.append(t)
                key.append(repr(x) if t is float else x)  # (-0.0 == 0.0)
    else:
        key.append(list)
        for i, x in enumerate(v):
            t = type(x)
            if t is dict or t is list:
                y = _shared(x, table)
                if y is not x:
                    v[i] = y
                key.append(t)
                key.append(id(y))
            else:
                key.append(t)
                key.append(repr(x) if t is float else x)
    return table.setdefault(tuple(key), v)


def _skip_in_apply_steps(result: LoadResult) -> None:
    """Take the manifests that do not affect node provisioning out of the Scenario's ``apply`` steps (the
    Scenario's validation refused the kinds that do), counting them with the other skipped documents."""
    sc = result.scenario
    for i, step in enumerate(((sc.obj.get("spec") or {}).get("steps") or ()) if sc is not None else ()):
        items = step.get("apply") if isinstance(step, dict) else None
        if not isinstance(items, list):
            continue
        keep = []
        for j, item in enumerate(items):
            if isinstance(item, dict) and not_modelled(item.get("apiVersion"), item.get("kind"), item, BY_KIND):
                kind, name = _kind_name(item)
                result.skipped.append(Document(sc.file, sc.index, kind or "", item["apiVersion"], name or "", None,
                                               item, f"spec.steps[{i}].apply[{j}]"))
            else:
                keep.append(item)
        step["apply"] = keep  # an apply step left empty applies nothing


def _load_text_into(text: str, file: str, result: LoadResult, scenarios: list[tuple[str, int, str]]) -> None:
    for index, raw in _parse(text, file, result.errors):
        clean = isinstance(raw, _CleanDocument)
        if clean:
            raw = raw.value
        if raw is None:
            continue
        sname = _scenario_name(raw)
        if sname is not None:
            scenarios.append((file, index, sname))
        _load_one(file, index, raw, result, clean=clean)


def load_text(text: str, file: str = STDIN_NAME) -> LoadResult:
    """Load manifests from a string (tests, the Scenario ``apply`` of a patch, ...)."""
    result = LoadResult()
    scenarios: list[tuple[str, int, str]] = []
    _load_text_into(text, file, result, scenarios)
    _finish(result, scenarios)
    return result


def validate_object(
    obj: Any, *, file: str = "<object>", index: int = 0, old: Any = None, api_notes: bool = False
) -> tuple[Document | None, list[FieldError]]:
    """Validate and default one in-memory manifest (e.g. after a Scenario ``patch``).

    Works on a JSON-shaped copy; returns the Document, or None and the errors.
    Never raises: whatever ``obj`` is, the answer is a Document or errors.
    With ``old`` (the object being replaced), the rules of an update apply too:
    kind, name and namespace are immutable (as the API server's
    ValidateObjectMetaUpdate says), and so are the CRDs' transition rules
    (static/dynamic NodePool, immutable nodeClassRef group and kind, immutable
    NodeClaim spec).
    """
    result = LoadResult()
    try:
        data = _to_json(obj, [MAX_VALUES_PER_DOCUMENT])
    except (_TooBig, _BadValue, RecursionError):
        _load_one(file, index, obj, result)  # reports it
        return None, result.errors or [FieldError(file, index, None, None, "", "invalid object")]
    except Exception as e:  # noqa: BLE001 - not JSON-shaped at all
        return None, [FieldError(file, index, None, None, "", f"Invalid value: not a manifest: {type(e).__name__}")]
    _validate_into(file, index, data, result, prefix="", seed=f"{file}#{index}", api_notes=api_notes)
    if not result.errors and result.documents and old is not None:
        d = result.documents[0]
        try:
            problems = _update_errors(d, old)
        except Exception as e:  # noqa: BLE001 - a malformed ``old`` must not crash the caller
            problems = [("", f"internal error while validating this update: {type(e).__name__}: {e}")]
        result.errors.extend(FieldError(file, index, d.kind, d.name, f, m) for f, m in problems)
    if result.errors:
        return None, result.errors
    return (result.documents[0] if result.documents else None), []


def _update_errors(new: Document, old: Any) -> list[tuple[str, str]]:
    from .nodepool import transition_errors
    from .schema import invalid

    if not isinstance(old, dict):
        return []
    out: list[tuple[str, str]] = []
    if old.get("kind") != new.kind:
        out.append(("kind", invalid(new.kind, "field is immutable")))
        return out
    meta = old.get("metadata") if isinstance(old.get("metadata"), dict) else {}
    if isinstance(meta.get("name"), str) and meta["name"] != new.name:
        out.append(("metadata.name", invalid(new.name, "field is immutable")))
    if is_namespaced(new.kind):
        old_ns = meta.get("namespace") or "default"
        if old_ns != new.namespace:
            out.append(("metadata.namespace", invalid(new.namespace, "field is immutable")))
    out.extend(transition_errors(new.kind, old, new.obj))
    return out
