"""The screens, headless: the ``--once`` text against a golden file, and the interactive app driven by Textual's
pilot (paging, grouping, quitting, the replay's play, step and jump keys).

Regenerate the golden with ``KARPY_UPDATE_GOLDEN=1`` and read the diff before committing it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from karpy.viewer.app import ReplayApp, ViewerApp
from karpy.viewer.model import Snapshot, build
from karpy.viewer.options import Options
from karpy.viewer.prices import PriceBook
from karpy.viewer.render import View, render_text

from .objects import T0, claim, event, node, nodepool, pod

GOLDEN = Path(__file__).parent / "golden"


def cluster(n_nodes: int = 3) -> Snapshot:
    labels = {"karpenter.sh/nodepool": "default-demo", "kubernetes.io/arch": "arm64",
              "node.kubernetes.io/instance-type": "Standard_D4pls_v6", "karpenter.sh/capacity-type": "on-demand",
              "topology.kubernetes.io/zone": "eastus-1", "aks-karpenter": "demo"}
    price = {"karpy.dev/price-per-hour": "0.1240"}
    nodes = [node(f"aks-default-demo-{i:03d}", labels=labels, annotations=price, created=i) for i in range(n_nodes)]
    nodes[-1]["spec"]["taints"] = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    claims = [claim("default-demo-new", labels=labels, annotations=price, created=590,
                    conditions=[{"type": "Launched", "status": "True"}])]
    pods = [pod(f"inflate-{i}", "aks-default-demo-000", ns="workshop") for i in range(3)]
    pods += [pod("cilium-a", "aks-default-demo-000", daemon=True, cpu="100m"), pod("big", ns="workshop", cpu="64")]
    events = [event("FailedScheduling", "big", 'Failed to schedule pod, incompatible with nodepool "default-demo", '
                    "no instance type satisfied resources {\"cpu\":\"64\"}", 500, ns="workshop")]
    return Snapshot(now=T0 + 600, nodes=nodes, nodeclaims=claims, pods=pods,
                    nodepools=[nodepool("default-demo", budgets=[{"nodes": "100%"}], limits={"cpu": "100"})],
                    events=events)


def test_once_table_matches_the_golden():
    opts = Options(node_selector="aks-karpenter=demo", resources=["cpu", "memory"], extra_labels=["karpy/node-age"])
    frame = build(cluster(), opts.resources, PriceBook())
    text = render_text(frame, opts, View(title="karpy viewer — golden"), terminal=False, width=160)
    path = GOLDEN / "once-table.txt"
    if os.environ.get("KARPY_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()
    assert "\x1b[" not in text  # a pipe gets plain text


def run(coro):
    return asyncio.run(coro)


def live_app(n_nodes: int) -> ViewerApp:
    """The interactive screen over a fixed cluster of ``n_nodes`` nodes (no redraw timer within a test)."""
    opts, snap = Options(), cluster(n_nodes)
    return ViewerApp(lambda: build(snap, opts.resources, PriceBook()), opts, View(title="t"), tick=10)


def test_pages_through_many_nodes_and_quits():
    async def go():
        app = live_app(60)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            first = app.view.page
            pages = app.pages
            await pilot.press("right")
            second = app.view.page
            for _ in range(pages + 3):
                await pilot.press("pagedown")
            last = app.view.page
            await pilot.press("left")
            back = app.view.page
            await pilot.press("g")
            grouped = app.view.grouped
            await pilot.press("q")
        return first, second, pages, last, back, grouped, app.return_code

    first, second, pages, last, back, grouped, code = run(go())
    assert pages > 2  # 61 rows do not fit 30 lines
    assert (first, second, last, back) == (0, 1, pages - 1, pages - 2)  # paging stops at the last page
    assert grouped is False
    assert code == 0


def test_the_screen_shows_rows_of_the_current_page_only():
    async def go():
        app = live_app(60)
        async with app.run_test(size=(150, 30)) as pilot:
            await pilot.pause()
            page1 = app.export_screenshot()
            await pilot.press("right")
            await pilot.pause()
            page2 = app.export_screenshot()
        return page1, page2

    page1, page2 = run(go())
    assert "aks-default-demo-000" in page1 and "aks-default-demo-000" not in page2
    assert "○" in page1 and "●" in page1  # the page dots


def test_replay_keys_jump_to_a_disruption_step_and_play(tmp_path):
    from click.testing import CliRunner

    from karpy.cli import main
    from karpy.kube.times import parse_time
    from karpy.viewer.replay import load

    from .objects import ROOT

    r = CliRunner().invoke(main, ["simulate", str(ROOT / "examples" / "consolidation-policies"), "-o", "json"])
    path = tmp_path / "result.json"
    path.write_text(r.stdout)
    rp = load(str(path))
    first = parse_time(rp.summary["disruptions"][0]["startedAt"])

    async def go():
        app = ReplayApp(rp, Options(), PriceBook(), rp.start, speed=60, tick=10, playing=False)
        async with app.run_test(size=(150, 40)) as pilot:
            await pilot.pause()
            await pilot.press("right_square_bracket")
            jumped = app.t
            shown = app.export_screenshot().replace("&#160;", " ")
            await pilot.press("full_stop")
            stepped = app.t
            await pilot.press("comma")
            back = app.t
            await pilot.press("plus")
            speed = app.speed
            await pilot.press("end")
            at_end = app.t
            await pilot.press("space")  # at the end, play starts over
            playing, restarted = app.playing, app.t
            await pilot.press("q")
        return jumped, shown, stepped, back, speed, at_end, playing, restarted

    jumped, shown, stepped, back, speed, at_end, playing, restarted = run(go())
    assert jumped == first
    assert "Disruptions in progress (1)" in shown
    assert stepped > jumped and back == jumped
    assert speed == 120
    assert at_end == rp.end and playing and rp.start <= restarted < rp.start + 60  # playing from the start


@pytest.mark.parametrize("key", ["q", "escape", "ctrl+c"])
def test_quit_keys(key):
    async def go():
        app = live_app(3)
        async with app.run_test(size=(100, 20)) as pilot:
            await pilot.press(key)
            await pilot.pause()
            return app.is_running

    assert run(go()) is False
