"""A user's own prices: negotiated rates, savings plans and discounts (``karpy simulate --prices FILE``).

The file is CSV (``.csv``) or YAML (anything else; JSON is YAML). Each row or
entry has these fields (names are matched ignoring case, ``-`` and ``_``)::

    instanceType   an instance type / VM size name, or * for every type
    region         a region name, or * for every region
    capacityType   on-demand, spot or reserved, or * for all three
    price          USD per hour                         } exactly one of
    discount       percent off the catalog price: 30 or "30%" }  the two
    zone           optional: only this zone

CSV has a header row naming its columns. YAML is a list of mappings, or a
mapping whose ``prices`` key holds that list::

    instanceType,region,capacityType,price
    m5.large,us-east-1,on-demand,0.0672

    - {instanceType: "*", region: "*", capacityType: on-demand, discount: 28%}

For a launched node the most specific matching row wins (a named zone, type,
region or capacity type each count; among equals the later row). The row sets
what the node is billed: its price, or the catalog's price less the discount.
Karpenter's own choices keep following the public prices it sees, as upstream
Karpenter's do: a savings plan changes the bill, not which instances Karpenter
launches. A bad file is an error naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

import yaml

from .types import CAPACITY_ON_DEMAND, CAPACITY_RESERVED, CAPACITY_SPOT, PRICE_FROM_USER, Offering

ANY = "*"
CAPACITY_TYPES = (CAPACITY_ON_DEMAND, CAPACITY_SPOT, CAPACITY_RESERVED)
_FIELDS = {
    "instancetype": "instanceType",
    "region": "region",
    "capacitytype": "capacityType",
    "price": "price",
    "discount": "discount",
    "zone": "zone",
}
_REQUIRED = ("instanceType", "region", "capacityType")


class PriceFileError(ValueError):
    """A problem in a prices file; ``str()`` names the file, the line and the field."""


@dataclass(frozen=True)
class PriceRule:
    instance_type: str
    region: str
    capacity_type: str
    zone: str | None
    price: float | None  # USD per hour, or
    discount: float | None  # percent off the catalog price
    line: int

    def matches(self, instance_type: str, region: str, zone: str, capacity_type: str) -> bool:
        return (
            self.instance_type in (ANY, instance_type)
            and self.region in (ANY, region)
            and self.capacity_type in (ANY, capacity_type)
            and self.zone in (None, zone)
        )

    @property
    def specificity(self) -> int:
        return sum(v != ANY for v in (self.instance_type, self.region, self.capacity_type)) + (self.zone is not None)


class UserPrices:
    """The rules of one prices file, applied to the offerings nodes launch into."""

    def __init__(self, path: str, rules: list[PriceRule]):
        self.path = path
        self.rules = rules

    def rule_for(self, instance_type: str, region: str, zone: str, capacity_type: str) -> PriceRule | None:
        best = None
        for rule in self.rules:
            if rule.matches(instance_type, region, zone, capacity_type):
                if best is None or rule.specificity >= best.specificity:
                    best = rule
        return best

    def apply(self, instance_type: str, region: str, offering: Offering) -> Offering:
        """The offering as the user is billed for it (unchanged when no row matches)."""
        rule = self.rule_for(instance_type, region, offering.zone, offering.capacity_type)
        if rule is None:
            return offering
        bill = rule.price if rule.price is not None else round(offering.bill * (1 - rule.discount / 100), 6)
        return replace(offering, billed_price=bill, price_estimated=False, price_source=PRICE_FROM_USER)


# --------------------------------------------------------------------------
# reading


def load_user_prices(path: str | Path, known_types: Iterable[str] = (), known_regions: Iterable[str] = ()) -> UserPrices:
    """Read and check a prices file. ``known_types`` / ``known_regions``, when given, are the names a
    row may use besides ``*`` (a typo would otherwise silently match nothing)."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise PriceFileError(f"{name}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise PriceFileError(f"{name}: not UTF-8 text") from None
    rows = _csv_rows(name, text) if name.lower().endswith(".csv") else _yaml_rows(name, text)
    types, regions = frozenset(known_types), frozenset(known_regions)
    rules: list[PriceRule] = []
    seen: dict[tuple, int] = {}
    for line, row in rows:
        rule = _rule(name, line, row, types, regions)
        key = (rule.instance_type, rule.region, rule.capacity_type, rule.zone)
        if key in seen:
            raise PriceFileError(
                f"{name}: line {line}: Duplicate value: the same instanceType, region, capacityType and zone "
                f"as line {seen[key]}"
            )
        seen[key] = line
        rules.append(rule)
    if not rules:
        raise PriceFileError(f"{name}: Required value: no prices in the file")
    return UserPrices(name, rules)


def _field_name(name: str, line: int, key: Any) -> str:
    norm = re.sub(r"[-_\s]", "", str(key)).lower()
    if norm not in _FIELDS:
        raise PriceFileError(
            f"{name}: line {line}: {key}: Unsupported field: expected instanceType, region, capacityType, price, "
            "discount or zone"
        )
    return _FIELDS[norm]


def _csv_rows(name: str, text: str) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    out = []
    for row in reader:
        line = reader.line_num
        if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [_field_name(name, line, c.strip()) for c in row]
            for f in _REQUIRED:
                if f not in header:
                    raise PriceFileError(f"{name}: line {line}: {f}: Required value: the header has no {f} column")
            continue
        if len(row) != len(header):
            raise PriceFileError(f"{name}: line {line}: Invalid value: {len(row)} columns, the header has {len(header)}")
        out.append((line, {k: v.strip() for k, v in zip(header, row) if v.strip() != ""}))
    if header is None:
        raise PriceFileError(f"{name}: Required value: no header row (instanceType,region,capacityType,price)")
    return out


def _yaml_rows(name: str, text: str) -> list[tuple[int, dict[str, Any]]]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise PriceFileError(f"{name}: {where}not valid YAML: {getattr(e, 'problem', None) or e}") from None
    node = root
    if isinstance(data, dict):
        if set(data) != {"prices"}:
            raise PriceFileError(f"{name}: line 1: Invalid value: expected a list of prices, or a mapping with "
                                 "only the key prices")
        node = next(v for k, v in root.value if k.value == "prices")
        data = data["prices"]
    if not isinstance(data, list):
        raise PriceFileError(f"{name}: line 1: Invalid value: expected a list of prices")
    out = []
    for item, item_node in zip(data, node.value):
        line = item_node.start_mark.line + 1
        if not isinstance(item, dict):
            raise PriceFileError(f"{name}: line {line}: Invalid value: each price is a mapping of fields")
        out.append((line, {_field_name(name, line, k): v for k, v in item.items() if v is not None}))
    return out


def _rule(name: str, line: int, row: dict[str, Any], types: frozenset, regions: frozenset) -> PriceRule:
    def fail(field: str, msg: str) -> PriceFileError:
        return PriceFileError(f"{name}: line {line}: {field}: {msg}")

    def text(field: str) -> str | None:
        v = row.get(field)
        if v is None:
            return None
        if not isinstance(v, (str, int, float)) or isinstance(v, bool) or str(v).strip() == "":
            raise fail(field, f"Invalid value: {v!r}: must be a non-empty string")
        return str(v).strip()

    for f in _REQUIRED:
        if text(f) is None:
            raise fail(f, "Required value")
    itype, region, ct = text("instanceType"), text("region"), text("capacityType")
    if types and itype != ANY and itype not in types:
        raise fail("instanceType", f'Unsupported value: "{itype}": no catalog has this instance type (or use *)')
    if regions and region != ANY and region not in regions:
        raise fail("region", f'Unsupported value: "{region}": no catalog knows this region (or use *)')
    if ct != ANY and ct not in CAPACITY_TYPES:
        raise fail("capacityType", f'Unsupported value: "{ct}": expected on-demand, spot, reserved or *')
    has_price, has_discount = row.get("price") is not None, row.get("discount") is not None
    if has_price == has_discount:
        raise fail("price", "Required value: exactly one of price (USD per hour) and discount (percent)")
    price = discount = None
    if has_price:
        price = _number(row["price"])
        if price is None or price < 0:
            raise fail("price", f"Invalid value: {row['price']!r}: must be a non-negative number (USD per hour)")
    else:
        raw = row["discount"]
        discount = _number(raw[:-1] if isinstance(raw, str) and raw.strip().endswith("%") else raw)
        if discount is None or not 0 <= discount <= 100:
            raise fail("discount", f"Invalid value: {raw!r}: must be a percentage from 0 to 100")
    zone = text("zone")
    return PriceRule(itype, region, ct, zone, price, discount, line)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    try:
        f = float(str(v).strip())
    except ValueError:
        return None
    return f if math.isfinite(f) else None
