"""VM prices from the Azure Retail Prices API, karpy's static Azure prices as the fallback (upstream's pricing
provider).

``GET <endpoint>?api-version=2023-01-01-preview&$filter=priceType eq 'Consumption' and currencyCode eq 'USD' and
serviceFamily eq 'Compute' and serviceName eq 'Virtual Machines' and armRegionName eq '<region>'``, following
``NextPageLink``, at start and every 12 hours (upstream's interval). The API is public and unauthenticated.
As upstream: items of a ``productName`` ending " Windows" and a ``meterName`` ending " Low Priority" are
dropped; a ``skuName`` ending " Spot" is the spot price of its ``armSkuName``, the rest the on-demand price.

Until a fetch succeeds, and for a size the API does not price, karpy's static prices of the region hold (spot
estimated as the offline catalog does). A failed fetch, or one without on-demand (or spot) prices, keeps the
prices already known and is logged. Upstream polls the public cloud only: so does karpy, unless
``AZURE_RETAIL_PRICES_ENDPOINT`` names an endpoint; ``none`` keeps the static prices.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

DEFAULT_ENDPOINT = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
REFRESH = 12 * 3600.0
MAX_PAGES = 1000  # a region has a few hundred pages at most; a looping NextPageLink ends here


def price_filter(region: str) -> str:
    return ("priceType eq 'Consumption' and currencyCode eq 'USD' and serviceFamily eq 'Compute' and "
            f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}'")


def categorize(items: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    """(on-demand, spot) prices by ARM SKU name from the API's items."""
    on_demand: dict[str, float] = {}
    spot: dict[str, float] = {}
    for it in items:
        if str(it.get("productName", "")).endswith(" Windows") or str(it.get("meterName", "")).endswith(" Low Priority"):
            continue
        sku, price = it.get("armSkuName"), it.get("retailPrice")
        if not sku or not isinstance(price, (int, float)) or isinstance(price, bool):
            continue
        (spot if str(it.get("skuName", "")).endswith(" Spot") else on_demand)[sku] = float(price)
    return on_demand, spot


def fetch_pages(endpoint: str, region: str, timeout: float = 30.0) -> list[dict]:
    """Every item of the region's VM prices, page after page."""
    import requests

    items: list[dict] = []
    url: str | None = endpoint
    params: dict[str, str] | None = {"api-version": API_VERSION, "$filter": price_filter(region)}
    for _ in range(MAX_PAGES):
        if not url:
            break
        r = requests.get(url, params=params, timeout=timeout)
        if r.status_code != 200:
            raise RuntimeError(f"retail prices API answered {r.status_code}: {r.text[:200]}")
        page = r.json()
        items.extend(page.get("Items") or ())
        url, params = page.get("NextPageLink") or None, None
    return items


class Prices:
    """The region's prices: ``get(sku)`` is ``{"on_demand": x, "spot": y}`` (None for what neither the API nor
    the static data prices); ``version`` changes when the prices do."""

    def __init__(self, region: str, endpoint: str | None, fetch: Callable[[str, str], list[dict]] = fetch_pages,
                 now: Callable[[], float] = time.time, log: Any = None):
        self.region, self.endpoint, self._fetch, self.now, self.log = region, endpoint, fetch, now, log
        self.on_demand: dict[str, float] = {}
        self.spot: dict[str, float] = {}
        self.fetched = 0.0  # when a refresh last ran (succeeded or not)
        self.updated = 0.0  # when the API's prices last replaced the known ones
        self.version = 0
        self.lock = threading.Lock()

    @property
    def source(self) -> str:
        return "retail-prices-api" if self.updated else "static"

    def get(self, sku: str, static: dict | None) -> dict | None:
        """The prices of ``sku``: the API's where it priced it, else ``static`` (karpy's static prices)."""
        with self.lock:
            od, sp = self.on_demand.get(sku), self.spot.get(sku)
        od = od if od is not None else (static or {}).get("on_demand")
        if od is None:  # no on-demand price anywhere
            return static
        return {**(static or {}), "on_demand": od, "spot": sp if sp is not None else (static or {}).get("spot")}

    def refresh(self, force: bool = False) -> bool:
        """Fetch when due (or ``force``); whether the prices changed."""
        if not self.endpoint or (not force and self.fetched and self.now() - self.fetched < REFRESH):
            return False
        self.fetched = self.now()
        try:
            on_demand, spot = categorize(self._fetch(self.endpoint, self.region))
        except Exception as e:  # noqa: BLE001 - the prices already known stay
            self._log("error", "failed to fetch updated pricing, using existing pricing data", error=str(e))
            return False
        changed = False
        with self.lock:
            if on_demand:
                changed |= on_demand != self.on_demand
                self.on_demand = on_demand
                self.updated = self.now()
            if spot:
                changed |= spot != self.spot
                self.spot = spot
            if changed:
                self.version += 1
        if not on_demand:
            self._log("error", "no on-demand pricing found, using existing on-demand pricing data")
        if not spot:
            self._log("error", "no spot pricing found, using existing spot pricing data")
        if changed:
            self._log("info", "updated pricing", **{"instance-type-count": len(on_demand), "spot-count": len(spot)})
        return changed

    def _log(self, level: str, msg: str, **kv: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(msg, controller="pricing", region=self.region, **kv)


class PriceRefresher:
    """The background worker of ``karpy controller``: the prices fetched at start, then every 12 hours, without
    holding up the start (until the first fetch, karpy's static prices hold)."""

    def __init__(self, types: Any, period: float = REFRESH):
        self.types, self.period = types, period
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.types.prices is None or not self.types.prices.endpoint:
            return
        self._thread = threading.Thread(target=self._run, name="azure-pricing", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.types.refresh_prices(force=True)
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
