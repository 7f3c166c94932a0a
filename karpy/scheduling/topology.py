"""Topology groups: indexed pod counts per domain for spread and (anti-)affinity.

Every distinct topology constraint in a solve (a spread constraint, a pod
affinity term or a pod anti-affinity term with the same key, namespaces and
selector) is one :class:`TopologyGroup` whose ``counts`` map each domain (a
zone, a hostname, ...) to the number of matching pods there. Pods are recorded
once, when they are placed, into every group that selects them, so checking a
constraint is a dictionary look-up rather than a scan of the cluster.
"""

from __future__ import annotations

from typing import Mapping

from .pods import AffinityTerm, LabelSelector, SpreadConstraint

SPREAD = "spread"
AFFINITY = "affinity"
ANTI_AFFINITY = "anti-affinity"


class TopologyGroup:
    __slots__ = ("kind", "key", "namespaces", "selector", "max_skew", "min_domains", "counts", "owners", "total", "ident",
                 "_reached", "_shared_counts", "_shared_owners")

    def __init__(self, kind: str, key: str, namespaces: frozenset[str] | None, selector: LabelSelector,
                 max_skew: int = 0, min_domains: int | None = None):
        self.kind = kind
        self.key = key
        self.namespaces = namespaces
        self.selector = selector
        self.max_skew = max_skew
        self.min_domains = min_domains
        self.counts: dict[str, int] = {}
        # For anti-affinity: domains holding pods that carry this term (they repel pods the selector matches).
        self.owners: dict[str, int] = {}
        self.total = 0
        self.ident = (kind, key, namespaces, selector.sig, max_skew, min_domains)
        # (owners?, threshold) -> domains whose count reached the threshold, in the order they did (see reached)
        self._reached: dict[tuple[bool, int], list[str]] = {}
        # a clone reads its original's counts and owners until it first records into them (see clone)
        self._shared_counts = False
        self._shared_owners = False

    def clone(self) -> "TopologyGroup":
        """The same group with the same counts, for another solve. The counts and owners are shared with this
        group until the clone records into them (it copies them then), so this group must not record any more."""
        c = object.__new__(TopologyGroup)
        c.kind, c.key, c.namespaces, c.selector = self.kind, self.key, self.namespaces, self.selector
        c.max_skew, c.min_domains, c.ident = self.max_skew, self.min_domains, self.ident
        c.counts, c.owners, c.total = self.counts, self.owners, self.total
        c._reached = {}
        c._shared_counts = c._shared_owners = True
        return c

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)

    def record(self, domain: str, n: int = 1) -> None:
        if self._shared_counts:
            self.counts = dict(self.counts)
            self._shared_counts = False
        old = self.counts.get(domain, 0)
        self.counts[domain] = old + n
        self.total += n
        if self._reached:
            self._track(False, domain, old, old + n)

    def record_owner(self, domain: str, n: int = 1) -> None:
        if self._shared_owners:
            self.owners = dict(self.owners)
            self._shared_owners = False
        old = self.owners.get(domain, 0)
        self.owners[domain] = old + n
        if self._reached:
            self._track(True, domain, old, old + n)

    def reached(self, threshold: int, owners: bool = False) -> list[str]:
        """The domains whose pod count (or, with ``owners``, owner count) is at least ``threshold``, in the
        order they got there. The list is kept up to date as pods are recorded and only grows while counts
        grow, so a reader may remember how far it read; a count that drops replaces the list (compare it by
        identity)."""
        k = (owners, threshold)
        out = self._reached.get(k)
        if out is None:
            src = self.owners if owners else self.counts
            out = self._reached[k] = [d for d, c in src.items() if c >= threshold]
        return out

    def _track(self, owners: bool, domain: str, old: int, new: int) -> None:
        for (o, t), lst in list(self._reached.items()):
            if o is not owners:
                continue
            if old < t <= new:
                lst.append(domain)
            elif new < t <= old:
                del self._reached[(o, t)]  # rebuilt on the next question

    def describe(self) -> str:
        if self.kind == SPREAD:
            return f"topology spread on {self.key} (maxSkew {self.max_skew}, selector {self.selector})"
        return f"pod {self.kind} on {self.key} (selector {self.selector})"


class _ClonedGroups(dict):
    """The groups of a cloned registry, by ident: each holds its original until first read, and is cloned
    then (see TopologyGroup.clone), so a solve pays for the groups it reads, not for every group."""

    __slots__ = ("_originals",)

    def __init__(self, originals: dict[tuple, TopologyGroup]):
        super().__init__(originals)
        self._originals = set(originals)  # idents whose value is still the original

    def _own(self, ident: tuple, g: TopologyGroup) -> TopologyGroup:
        if ident in self._originals:
            self._originals.discard(ident)
            g = g.clone()
            dict.__setitem__(self, ident, g)
        return g

    def __getitem__(self, ident: tuple) -> TopologyGroup:
        return self._own(ident, dict.__getitem__(self, ident))

    def get(self, ident, default=None):
        g = dict.get(self, ident)
        return default if g is None else self._own(ident, g)

    def raw_items(self):
        """(ident, group) pairs without cloning: a group's kind, key, namespaces and selector are its original's."""
        return dict.items(self)

    def values(self):
        return [self._own(i, g) for i, g in dict.items(self)]

    def items(self):
        return [(i, self._own(i, g)) for i, g in dict.items(self)]


class Topology:
    """The registry of topology groups for one solve."""

    def __init__(self) -> None:
        self.groups: dict[tuple, TopologyGroup] = {}
        self._selecting_cache: dict[tuple, list[TopologyGroup]] = {}
        # a clone's original answers of which groups select a pod: they hold for the clone (the same groups in
        # the same order), translated to its own groups when first asked
        self._origin_cache: dict[tuple, list[TopologyGroup]] | None = None

    def clone(self) -> "Topology":
        """The same groups with the same counts, for one solve; this registry must not record any more."""
        t = Topology()
        t.groups = _ClonedGroups(self.groups)
        t._origin_cache = self._selecting_cache
        return t

    def keys(self) -> set[str]:
        """The topology keys of the groups (without cloning any)."""
        groups = self.groups
        return {g.key for _, g in (groups.raw_items() if isinstance(groups, _ClonedGroups) else groups.items())}

    def _get(self, group: TopologyGroup) -> TopologyGroup:
        existing = self.groups.get(group.ident)
        if existing is None:
            self.groups[group.ident] = group
            self._selecting_cache.clear()
            self._origin_cache = None
            return group
        return existing

    def _lookup(self, kind: str, key: str, namespaces, selector: LabelSelector, max_skew: int = 0,
                min_domains: int | None = None) -> TopologyGroup:
        ident = (kind, key, namespaces, selector.sig, max_skew, min_domains)
        g = self.groups.get(ident)
        if g is None:
            g = self._get(TopologyGroup(kind, key, namespaces, selector, max_skew, min_domains))
        return g

    def spread_group(self, namespace: str, c: SpreadConstraint) -> TopologyGroup:
        return self._lookup(SPREAD, c.topology_key, frozenset((namespace,)), c.selector, c.max_skew, c.min_domains)

    def affinity_group(self, term: AffinityTerm) -> TopologyGroup:
        return self._lookup(AFFINITY, term.topology_key, term.namespaces, term.selector)

    def anti_group(self, term: AffinityTerm) -> TopologyGroup:
        return self._lookup(ANTI_AFFINITY, term.topology_key, term.namespaces, term.selector)

    def selecting(self, namespace: str, labels: Mapping[str, str], cache_key: tuple | None = None) -> list[TopologyGroup]:
        """Every group whose selector matches a pod with these labels."""
        if cache_key is not None:
            hit = self._selecting_cache.get(cache_key)
            if hit is not None:
                return hit
            if self._origin_cache is not None:
                hit = self._origin_cache.get(cache_key)
                if hit is not None:
                    groups = self.groups
                    hit = self._selecting_cache[cache_key] = [groups[g.ident] for g in hit]
                    return hit
        groups = self.groups
        if isinstance(groups, _ClonedGroups):
            out = [groups[i] for i, g in groups.raw_items() if g.selects(namespace, labels)]
        else:
            out = [g for g in groups.values() if g.selects(namespace, labels)]
        if cache_key is not None:
            self._selecting_cache[cache_key] = out
        return out
