"""Dates near the ends of the calendar karpy can print (years 1 to 9999): budget schedules, durations and
Scenario times there give a correct run or a clear error, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpy.cli import main
from karpy.disruption.budgets import UNLIMITED, allowed_by_budget, window_changes_at
from karpy.kube.times import MAX_TIME, fmt_time, parse_time

FRIDAY_9999_12_31 = parse_time("9999-12-31T00:00:00Z")


def _at(hhmm: str, day: str = "9999-12-31") -> float:
    return parse_time(f"{day}T{hhmm}:00Z")


def test_a_window_open_at_the_end_of_the_calendar_stays_open_and_never_changes_again():
    budget = {"nodes": "0", "schedule": "30 23 31 12 *", "duration": "1h"}
    assert allowed_by_budget(budget, 10, _at("23:45")) == 0
    assert window_changes_at(budget, _at("23:45")) is None  # it would close after 9999-12-31T23:59:59Z


def test_a_schedule_with_no_firing_left_is_closed_and_never_opens():
    budget = {"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}  # weekdays 09:00-17:00
    assert allowed_by_budget(budget, 10, _at("12:00")) == 0  # Friday 9999-12-31, inside the window
    assert window_changes_at(budget, _at("12:00")) == _at("17:00")
    assert allowed_by_budget(budget, 10, _at("20:00")) == UNLIMITED
    assert window_changes_at(budget, _at("20:00")) is None  # next Monday is in year 10000


def test_a_schedule_with_no_firing_before_the_start_of_the_calendar_is_closed():
    budget = {"nodes": "0", "schedule": "0 9 31 12 *", "duration": "8h"}  # once a year, 31 December
    assert allowed_by_budget(budget, 10, _at("00:10", "0001-01-01")) == UNLIMITED
    assert window_changes_at(budget, _at("00:10", "0001-01-01")) == _at("09:00", "0001-12-31")


def test_times_past_the_end_print_as_its_last_second():
    assert fmt_time(MAX_TIME + 10**9) == "9999-12-31T23:59:59Z"


NODECLASS = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}


def _nodepool(budgets: list[dict], expire: str = "720h") -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"disruption": {"consolidateAfter": "1m", "budgets": budgets},
                     "template": {"spec": {"requirements": [], "expireAfter": expire, "nodeClassRef": {
                         "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}


def _deployment(replicas: int) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                         {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]}}}}


def _run(tmp_path: Path, docs: list[dict], *args: str):
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    return CliRunner().invoke(main, ["simulate", str(f), "-o", "json", *args])


@pytest.mark.parametrize("start", ["9999-12-31T20:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"])
def test_a_scenario_at_either_end_of_the_calendar_with_a_budget_schedule_runs(tmp_path, start):
    scenario = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "s"},
                "spec": {"start": start, "steps": [{"advance": "2m"},
                                                   {"scale": {"kind": "Deployment", "namespace": "default",
                                                              "name": "web", "replicas": 1}},
                                                   {"advance": "2562047h"}]}}  # clamped by --until
    r = _run(tmp_path, [NODECLASS, _nodepool([{"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}],
                                             expire="30m"), _deployment(3), scenario], "--until", "3h")
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    summary = json.loads(r.stdout)["items"][-1]["status"]
    assert summary["start"] == start
    assert summary["end"] <= "9999-12-31T23:59:59Z"
    # from the calendar's last second the clock cannot move: nothing has time to launch
    assert bool(summary["nodeClaims"]) == (start != "9999-12-31T23:59:59Z")


def test_the_year_9999_budget_holds_consolidation_inside_its_window(tmp_path):
    # Friday 9999-12-31, 10:00: the weekday 0-node window is open until 17:00, so the emptied node stays
    scenario = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "s"},
                "spec": {"start": "9999-12-31T10:00:00Z",
                         "steps": [{"advance": "5m"},
                                   {"scale": {"kind": "Deployment", "namespace": "default", "name": "web",
                                              "replicas": 0}},
                                   {"advance": "1h"}]}}
    r = _run(tmp_path, [NODECLASS, _nodepool([{"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}]),
                        _deployment(1), scenario])
    assert r.exit_code == 0, r.output
    claims = json.loads(r.stdout)["items"][-1]["status"]["nodeClaims"]
    assert len(claims) == 1 and claims[0]["deletedAt"] is None


@pytest.mark.parametrize("field,value,message", [
    ("start", "10000-01-01T00:00:00Z", "date-time"),
    ("start", "9999-12-31T23:59:60Z", ""),
])
def test_a_start_past_the_calendar_is_a_clear_error(tmp_path, field, value, message):
    scenario = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "s"},
                "spec": {field: value}}
    r = _run(tmp_path, [NODECLASS, scenario])
    assert r.exit_code == 2, r.output
    assert f"spec.{field}" in r.stderr and "Scenario/s" in r.stderr and message in r.stderr
    assert "Traceback" not in r.output


@pytest.mark.parametrize("value", ["2562048h", "9" * 40 + "h"])
def test_a_duration_past_gos_range_is_a_clear_error(tmp_path, value):
    scenario = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "s"},
                "spec": {"steps": [{"advance": value}]}}
    r = _run(tmp_path, [NODECLASS, scenario])
    assert r.exit_code == 2, r.output
    assert "spec.steps[0].advance" in r.stderr and "out of range" in r.stderr
    assert "Traceback" not in r.output
