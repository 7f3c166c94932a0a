"""YAML from clients, read within bounds: nesting depth and alias expansion are checked before anything is built.

A few hundred bytes of YAML can stand for gigabytes once its aliases are
expanded ("billion laughs"), and a run of ``[`` nests as deep as the text is
long. :func:`load` walks the parser's events first -- libyaml produces them as
it reads, so the walk stops at the first event past a limit -- counting what
the document expands to, and only then builds it:

* nesting deeper than ``max_depth`` mappings and sequences is refused;
* aliases are refused as the YAML library of kube-apiserver (go-yaml, through
  sigs.k8s.io/yaml) refuses them: once more than 100 aliases have been expanded
  and the document has grown past 400,000 values, the share of values that
  came from aliases may be at most 99 % (falling linearly to 10 % at 4,000,000
  values): ``yaml: document contains excessive aliasing``;
* and at most ``max_values`` values in all, aliases expanded.

Used for the bodies ``karpy sandbox`` is sent (server-side apply, YAML
requests); any other reader of untrusted YAML can use it the same way.
"""

from __future__ import annotations

from typing import Any

import yaml

from .limits import MAX_DEPTH

MAX_VALUES = 2_000_000  # values in one document, aliases expanded
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YAMLLimitError(ValueError):
    """A document past a limit (the message is what to tell the client)."""


def _allowed_alias_ratio(decoded: int) -> float:
    # go-yaml v2's allowedAliasRatio
    if decoded <= 400_000:
        return 0.99
    if decoded >= 4_000_000:
        return 0.10
    return 0.99 - 0.89 * (decoded - 400_000) / 3_600_000


def check(text: str | bytes, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> None:
    """Raise :class:`YAMLLimitError` if the (multi-document) YAML nests too deep or expands too much; a syntax
    error is raised as the parser raises it (``yaml.YAMLError``)."""
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (values, aliases) it expands to
    # one frame per open collection: [values, aliases, anchor]
    stack: list[list[Any]] = []
    values = aliases = 0

    def add(v: int, a: int) -> None:
        nonlocal values, aliases
        values += v
        aliases += a
        if stack:
            stack[-1][0] += v
            stack[-1][1] += a
        if values > max_values:
            raise YAMLLimitError(f"yaml: document expands to more than {max_values} values")
        if aliases > 100 and values > 400_000 and aliases / values > _allowed_alias_ratio(values):
            raise YAMLLimitError("yaml: document contains excessive aliasing")

    for ev in yaml.parse(text, Loader=_Loader):
        cls = ev.__class__
        if cls is yaml.ScalarEvent:
            add(1, 0)
            if ev.anchor:
                anchors[ev.anchor] = (1, 0)
        elif cls is yaml.AliasEvent:
            v, a = anchors.get(ev.anchor, (1, 0))
            add(v, a + 1)
        elif cls is yaml.SequenceStartEvent or cls is yaml.MappingStartEvent:
            if len(stack) >= max_depth:
                raise YAMLLimitError(f"yaml: exceeded max depth of {max_depth}")
            stack.append([0, 0, ev.anchor])
        elif cls is yaml.SequenceEndEvent or cls is yaml.MappingEndEvent:
            v, a, anchor = stack.pop()
            v += 1  # the collection itself (its contents were counted as they came)
            values += 1
            if anchor:
                anchors[anchor] = (v, a)
            if stack:
                stack[-1][0] += v
                stack[-1][1] += a
        elif cls is yaml.DocumentEndEvent:
            anchors.clear()  # anchors do not reach past their document


def load(text: str | bytes, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> Any:
    """The first YAML document of ``text`` as ``yaml.safe_load`` builds it, once :func:`check` has passed."""
    check(text, max_depth=max_depth, max_values=max_values)
    return yaml.load(text, Loader=_Loader)
