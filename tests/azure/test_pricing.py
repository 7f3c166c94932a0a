"""VM prices from the Azure Retail Prices API (the fake serves it, unauthenticated as Azure does), karpy's static
prices until a fetch succeeds and when one fails, refreshed every 12 hours; the endpoint setting."""

from __future__ import annotations

import time

import pytest

from karpy.cloudprovider.catalog import load_catalog
from karpy.cloudprovider.types import CAPACITY_ON_DEMAND, CAPACITY_SPOT

from .conftest import Clock

UPSTREAM_FILTER = ("priceType eq 'Consumption' and currencyCode eq 'USD' and serviceFamily eq 'Compute' and "
                   "serviceName eq 'Virtual Machines' and armRegionName eq 'eastus'")


class Log:
    def __init__(self):
        self.lines: list[tuple[str, str, dict]] = []

    def info(self, msg, **kv):
        self.lines.append(("info", msg, kv))

    def error(self, msg, **kv):
        self.lines.append(("error", msg, kv))

    def messages(self, level):
        return [m for lv, m, _ in self.lines if lv == level]


def static_on_demand(name):
    return next(s for s in load_catalog("azure")["sizes"] if s["name"] == name)["prices"]["eastus"]["on_demand"]


def priced(types, name):
    """{capacity type: the price of its offerings} of instance type ``name``."""
    it = next(t for t in types.list(None) if t.name == name)
    out: dict[str, set] = {}
    for o in it.offerings:
        out.setdefault(o.capacity_type, set()).add(round(o.price, 6))
    return {k: v.pop() for k, v in out.items() if len(v) == 1}


def make_types(clock, log):
    from karpy.cloudprovider.arm.clients import make_clients
    from karpy.cloudprovider.arm.pricing import Prices
    from karpy.cloudprovider.arm.skus import InstanceTypes, list_skus_via
    from karpy.controller.settings import resolve

    s = resolve({"cloud_provider": "azure"}).azure
    prices = Prices(s.location, s.retail_prices_endpoint or None, now=clock, log=log)
    types = InstanceTypes(list_skus_via(make_clients(s).compute, s.location), s.location, now=clock, prices=prices)
    types.refresh()
    return types, prices


def test_instance_types_priced_by_the_retail_prices_api(fake, env):
    fake.retail_prices["Standard_D2pls_v6"] = {"on_demand": 0.0421, "spot": 0.0093}
    fake.retail_prices["Standard_D4pls_v6"] = {"on_demand": 0.0777, "spot": None}
    log = Log()
    types, prices = make_types(Clock(), log)
    # before the first fetch: karpy's static prices
    assert priced(types, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] == static_on_demand("Standard_D2pls_v6")
    assert prices.source == "static"
    assert types.refresh_prices(force=True)
    assert prices.source == "retail-prices-api"
    d2 = priced(types, "Standard_D2pls_v6")
    assert d2 == {CAPACITY_ON_DEMAND: 0.0421, CAPACITY_SPOT: 0.0093}
    # no spot item: the spot price is estimated from the on-demand price, never the Low Priority or Windows items
    d4 = priced(types, "Standard_D4pls_v6")
    assert d4[CAPACITY_ON_DEMAND] == 0.0777
    assert d4[CAPACITY_SPOT] not in (round(0.0777 * 0.2, 6), round(0.0777 * 1.9, 6)) and 0 < d4[CAPACITY_SPOT] < 0.0777
    # upstream's query, every page followed
    gets = fake.calls("GET", r"^/api/retail/prices$")
    assert gets[0]["query"]["$filter"] == UPSTREAM_FILTER and gets[0]["query"]["api-version"] == "2023-01-01-preview"
    items = sum(3 + (p.get("spot") is not None) for p in fake.retail_prices.values())
    assert len(gets) == -(-items // fake.prices_page_size) > 1
    assert any(m == "updated pricing" for m in log.messages("info"))


def test_a_failed_fetch_keeps_the_prices_known_and_prices_refresh_every_12_hours(fake, env):
    clock, log = Clock(), Log()
    fake.price_failures = 1
    types, prices = make_types(clock, log)
    assert not types.refresh_prices(force=True)
    assert priced(types, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] == static_on_demand("Standard_D2pls_v6")
    assert "failed to fetch updated pricing, using existing pricing data" in log.messages("error")
    fake.retail_prices["Standard_D2pls_v6"]["on_demand"] = 0.05
    clock.t += 3600
    assert not types.refresh_prices()  # not due: the next fetch is 12 hours after the last one
    clock.t += 11 * 3600
    assert types.refresh_prices()
    assert priced(types, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] == 0.05
    # the API fails, then answers without a single price: the prices fetched last stay
    fake.price_failures = 1
    clock.t += 12 * 3600
    assert not types.refresh_prices()
    fake.retail_prices.clear()
    clock.t += 12 * 3600
    assert not types.refresh_prices()
    assert "no on-demand pricing found, using existing on-demand pricing data" in log.messages("error")
    assert priced(types, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] == 0.05


def test_the_controller_fetches_prices_in_the_background(fake, env):
    from karpy.cloudprovider.arm.pricing import PriceRefresher

    fake.retail_prices["Standard_D2pls_v6"]["on_demand"] = 0.031
    types, _ = make_types(time.time, Log())
    worker = PriceRefresher(types)
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while priced(types, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] != 0.031 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert priced(types, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] == 0.031
    finally:
        worker.stop()


@pytest.mark.parametrize("extra,want", [
    ({}, "https://prices.azure.com/api/retail/prices"),
    ({"ARM_CLOUD": "AzureChinaCloud"}, ""),  # upstream reads prices in the public cloud only
    ({"AZURE_RETAIL_PRICES_ENDPOINT": "none"}, ""),
    ({"ARM_CLOUD": "AzureUSGovernmentCloud", "AZURE_RETAIL_PRICES_ENDPOINT": "https://prices.example.net/api"},
     "https://prices.example.net/api"),
])
def test_the_prices_endpoint_setting(env, monkeypatch, extra, want):
    from karpy.controller.settings import resolve

    monkeypatch.delenv("AZURE_ENVIRONMENT_FILEPATH")
    monkeypatch.delenv("AZURE_RETAIL_PRICES_ENDPOINT")
    for k, v in extra.items():
        monkeypatch.setenv(k, v)
    assert resolve({"cloud_provider": "azure"}).azure.retail_prices_endpoint == want


def test_an_invalid_prices_endpoint_is_named(env, monkeypatch):
    from karpy.controller.settings import SettingsError, resolve

    monkeypatch.setenv("AZURE_RETAIL_PRICES_ENDPOINT", "prices.azure.com")
    with pytest.raises(SettingsError, match='AZURE_RETAIL_PRICES_ENDPOINT .*invalid value "prices.azure.com"'):
        resolve({"cloud_provider": "azure"})
