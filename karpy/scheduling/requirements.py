"""Node requirement algebra, as Karpenter reasons about label constraints.

A :class:`Requirement` is the set of values a label key may take. It is kept
either as a finite set (``In``), or as the complement of a finite set
(``NotIn``/``Exists``), optionally bounded by integer limits (``Gt``, ``Lt``,
``Gte``, ``Lte``; ``Gt N`` is kept as ``>= N+1`` and ``Lt N`` as ``<= N-1``).
``DoesNotExist`` is the empty finite set. Intersecting two requirements on the
same key gives the values both allow; a set of requirements on different keys
is a :class:`Requirements`.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

IN = "In"
NOT_IN = "NotIn"
EXISTS = "Exists"
DOES_NOT_EXIST = "DoesNotExist"
GT = "Gt"
LT = "Lt"
GTE = "Gte"
LTE = "Lte"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT, GTE, LTE)

# Aliases upstream normalises to the current well-known keys.
_NORMALIZED_KEYS = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "beta.kubernetes.io/arch": "kubernetes.io/arch",
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/os": "kubernetes.io/os",
    # the Azure Disk CSI driver's zone key, which upstream's Azure provider normalises too
    "topology.disk.csi.azure.com/zone": "topology.kubernetes.io/zone",
}


# Labels whose value follows the capacity type of the offering a node is launched into: upstream's Azure offerings
# carry them as requirements, so requiring one of them allows only the capacity types that give that value.
CAPACITY_TYPE_LABELS = {
    "kubernetes.azure.com/scalesetpriority": {"on-demand": "regular", "spot": "spot"},
    "kubernetes.azure.com/priority": {"on-demand": "regular", "spot": "spot"},
}
_CAPACITY_TYPE = "karpenter.sh/capacity-type"


def normalize_key(key: str) -> str:
    return _NORMALIZED_KEYS.get(key, key)


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class Requirement:
    __slots__ = ("key", "complement", "values", "gte", "lte", "min_values")

    def __init__(
        self,
        key: str,
        complement: bool,
        values: frozenset[str],
        gte: int | None = None,
        lte: int | None = None,
        min_values: int | None = None,
    ):
        self.key = key
        self.complement = complement
        self.values = values
        self.gte = gte
        self.lte = lte
        self.min_values = min_values

    # --- construction ------------------------------------------------------
    @classmethod
    def new(cls, key: str, operator: str, values: Iterable[str] = (), min_values: int | None = None) -> "Requirement":
        key = normalize_key(key)
        vals = [str(v) for v in values]
        if operator == IN:
            return cls(key, False, frozenset(vals), min_values=min_values)
        if operator == NOT_IN:
            return cls(key, True, frozenset(vals), min_values=min_values)
        if operator == EXISTS:
            return cls(key, True, frozenset(), min_values=min_values)
        if operator == DOES_NOT_EXIST:
            return cls(key, False, frozenset(), min_values=min_values)
        n = _as_int(vals[0]) if vals else None
        if n is None:
            raise ValueError(f"operator {operator} needs one integer value, got {vals}")
        if operator == GT:
            return cls(key, True, frozenset(), gte=n + 1, min_values=min_values)
        if operator == LT:
            return cls(key, True, frozenset(), lte=n - 1, min_values=min_values)
        if operator == GTE:
            return cls(key, True, frozenset(), gte=n, min_values=min_values)
        if operator == LTE:
            return cls(key, True, frozenset(), lte=n, min_values=min_values)
        raise ValueError(f"unknown operator {operator!r}")

    @classmethod
    def exists(cls, key: str) -> "Requirement":
        return cls(key, True, frozenset())

    # --- queries -------------------------------------------------------------
    def _in_bounds(self, value: str, gte: int | None, lte: int | None) -> bool:
        if gte is None and lte is None:
            return True
        n = _as_int(value)
        if n is None:
            return False
        if gte is not None and n < gte:
            return False
        if lte is not None and n > lte:
            return False
        return True

    def has(self, value: str) -> bool:
        """Does the requirement allow a node whose label has this value?"""
        if self.complement:
            return value not in self.values and self._in_bounds(value, self.gte, self.lte)
        return value in self.values and self._in_bounds(value, self.gte, self.lte)

    @property
    def operator(self) -> str:
        if self.complement:
            return NOT_IN if self.values else EXISTS
        return IN if self.values else DOES_NOT_EXIST

    def allows_absent(self) -> bool:
        """A node without the label satisfies NotIn and DoesNotExist, never In/Exists/bounds."""
        return self.operator in (NOT_IN, DOES_NOT_EXIST) and self.gte is None and self.lte is None

    def is_finite(self) -> bool:
        return not self.complement

    def __len__(self) -> int:  # finite sets only
        return len(self.values)

    def intersection(self, other: "Requirement") -> "Requirement":
        gte = _max_opt(self.gte, other.gte)
        lte = _min_opt(self.lte, other.lte)
        min_values = _max_opt(self.min_values, other.min_values)
        if gte is not None and lte is not None and gte > lte:
            return Requirement(self.key, False, frozenset(), min_values=min_values)
        if self.complement and other.complement:
            values = self.values | other.values
            complement = True
        elif self.complement:
            values = other.values - self.values
            complement = False
        elif other.complement:
            values = self.values - other.values
            complement = False
        else:
            values = self.values & other.values
            complement = False
        if (gte is not None or lte is not None) and not complement:
            values = frozenset(v for v in values if self._in_bounds(v, gte, lte))
            gte = lte = None
        return Requirement(self.key, complement, values, gte, lte, min_values)

    def intersects(self, other: "Requirement") -> bool:
        gte = _max_opt(self.gte, other.gte)
        lte = _min_opt(self.lte, other.lte)
        if gte is not None and lte is not None and gte > lte:
            return False
        if self.complement and other.complement:
            return True
        if self.complement:
            return any(v not in self.values and self._in_bounds(v, gte, lte) for v in other.values)
        if other.complement:
            return any(v not in other.values and self._in_bounds(v, gte, lte) for v in self.values)
        return any(v in other.values and self._in_bounds(v, gte, lte) for v in self.values)

    def to_node_selector(self) -> list[dict]:
        """As NodeSelectorRequirement(s) the way a NodeClaim spec writes them."""
        out: list[dict] = []

        def item(op: str, values: list[str] | None = None) -> dict:
            d: dict = {"key": self.key, "operator": op}
            if values is not None:
                d["values"] = values
            if self.min_values is not None:
                d["minValues"] = self.min_values
            return d

        if self.gte is not None:
            out.append(item(GTE, [str(self.gte)]))
        if self.lte is not None:
            out.append(item(LTE, [str(self.lte)]))
        if out:
            if self.values:
                out.append(item(NOT_IN, sorted(self.values)))
            return out
        op = self.operator
        if op in (IN, NOT_IN):
            return [item(op, sorted(self.values))]
        return [item(op)]

    def __str__(self) -> str:
        op = self.operator
        if op in (EXISTS, DOES_NOT_EXIST):
            s = f"{self.key} {op}"
        else:
            vals = sorted(self.values)
            if len(vals) > 5:
                vals = vals[:5] + [f"and {len(vals) - 5} others"]
            s = f"{self.key} {op} [{', '.join(vals)}]"
        if self.gte is not None:
            s += f" >={self.gte}"
        if self.lte is not None:
            s += f" <={self.lte}"
        if self.min_values is not None:
            s += f" minValues {self.min_values}"
        return s

    __repr__ = __str__

    def signature(self) -> tuple:
        return (self.key, self.complement, tuple(sorted(self.values)), self.gte, self.lte, self.min_values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Requirement) and self.signature() == other.signature()

    def __hash__(self) -> int:
        return hash(self.signature())


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a > b else b


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a < b else b


class Requirements:
    """Requirements on distinct keys, all of which must hold."""

    __slots__ = ("_reqs",)

    def __init__(self, reqs: Iterable[Requirement] = ()):
        self._reqs: dict[str, Requirement] = {}
        for r in reqs:
            self.add(r)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> "Requirements":
        out = cls()
        reqs = out._reqs
        for k, v in labels.items():
            key = _NORMALIZED_KEYS.get(k, k)
            r = Requirement(key, False, frozenset((str(v),)))  # Requirement.new(k, IN, [v]), built directly
            existing = reqs.get(key)
            reqs[key] = r if existing is None else r.intersection(existing)
        return out

    @classmethod
    def from_node_selector(cls, exprs: Iterable[Mapping]) -> "Requirements":
        out = cls()
        for e in exprs or ():
            out.add(Requirement.new(e["key"], e["operator"], e.get("values") or (), e.get("minValues")))
        return out

    def copy(self) -> "Requirements":
        out = Requirements()
        out._reqs = dict(self._reqs)
        return out

    def add(self, req: Requirement) -> None:
        existing = self._reqs.get(req.key)
        self._reqs[req.key] = req if existing is None else req.intersection(existing)

    def add_all(self, other: "Requirements") -> None:
        for r in other._reqs.values():
            self.add(r)

    def union(self, other: "Requirements") -> "Requirements":
        out = self.copy()
        out.add_all(other)
        return out

    def get(self, key: str) -> Requirement:
        r = self._reqs.get(key)
        if key == _CAPACITY_TYPE:  # narrowed by the labels that follow the capacity type
            for label, values in CAPACITY_TYPE_LABELS.items():
                lr = self._reqs.get(label)
                if lr is not None:
                    allowed = Requirement.new(key, IN, [ct for ct, v in values.items() if lr.has(v)])
                    r = allowed if r is None else r.intersection(allowed)
        return r if r is not None else Requirement.exists(key)

    def has(self, key: str) -> bool:
        return key in self._reqs

    def __contains__(self, key: str) -> bool:
        return key in self._reqs

    def keys(self):
        return self._reqs.keys()

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self._reqs.values())

    def __len__(self) -> int:
        return len(self._reqs)

    def intersects(self, other: "Requirements") -> str | None:
        """None when every shared key has a common value, else why not."""
        small, large = (self, other) if len(self) <= len(other) else (other, self)
        for key in small._reqs:
            if key not in large._reqs:
                continue
            mine = self._reqs[key]
            theirs = other._reqs[key]
            if not mine.intersects(theirs):
                # Two requirements that both allow the label to be absent are compatible.
                if theirs.allows_absent() and mine.allows_absent():
                    continue
                return f"key {key}, {theirs} not in {mine}"
        return None

    def compatible(self, other: "Requirements", allow_undefined: frozenset[str] | set[str] = frozenset()) -> str | None:
        """Can a node described by ``self`` satisfy ``other`` (e.g. a pod's requirements)?

        A key that ``other`` requires (In/Exists/bounds) but ``self`` does not
        define cannot be satisfied, unless the key is in ``allow_undefined``
        (labels such as the hostname that Karpenter fills in at launch).
        """
        for key, req in other._reqs.items():
            if key in self._reqs or key in allow_undefined or req.allows_absent():
                continue
            return f'label "{key}" does not have known values'
        return self.intersects(other)

    def satisfied_by_labels(self, labels: Mapping[str, str]) -> bool:
        """Do these requirements match a node carrying exactly these labels?"""
        for key, req in self._reqs.items():
            v = labels.get(key)
            if v is None:
                if not req.allows_absent():
                    return False
            elif not req.has(v):
                return False
        return True

    def labels(self) -> dict[str, str]:
        """Single-valued In requirements as node labels."""
        return {k: next(iter(r.values)) for k, r in self._reqs.items() if not r.complement and len(r.values) == 1}

    def to_node_selector(self) -> list[dict]:
        out: list[dict] = []
        for key in sorted(self._reqs):
            out.extend(self._reqs[key].to_node_selector())
        return out

    def signature(self) -> tuple:
        return tuple(sorted(r.signature() for r in self._reqs.values()))

    def __str__(self) -> str:
        return ", ".join(sorted(str(r) for r in self._reqs.values()))

    __repr__ = __str__
