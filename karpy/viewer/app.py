"""The interactive screen (Textual): the same renderables as ``--once``, redrawn four times a second, with keys.

Keys: ``q``/Esc/Ctrl-C quit; ←/→, h/l, PgUp/PgDn page; ``g`` groups by NodePool or not; ``p`` and ``d`` show or
hide the pending pods and the disruptions. Replaying: space plays or pauses, ``.``/``,`` step to the next or
previous change, ``+``/``-`` double or halve the speed, ``]``/``[`` jump to the next or previous disruption,
Home/End go to the start or the end.
"""

from __future__ import annotations

import time
from typing import Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from .model import Frame, build
from .options import Options
from .prices import PriceBook
from .render import View, replay_line, screen

COST_SAMPLES = 240


class ViewerApp(App):
    CSS = "Screen { overflow: hidden hidden; } #body { width: 100%; height: 100%; }"
    TITLE = "karpy viewer"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("escape", "quit", show=False),
        Binding("ctrl+c", "quit", show=False, priority=True),
        Binding("left,h,pageup", "page(-1)", "page", show=False),
        Binding("right,l,pagedown", "page(1)", show=False),
        Binding("g", "toggle('grouped')", "group"),
        Binding("p", "toggle('show_pending')", "pending"),
        Binding("d", "toggle('show_disruptions')", "disruptions"),
    ]

    def __init__(self, get_frame: Callable[[], Frame], opts: Options, view: View, tick: float = 0.25):
        super().__init__()
        self.get_frame = get_frame
        self.opts = opts
        self.view = view
        self.view.footer = True
        self.tick = tick
        self.pages = 1
        self.frame: Frame | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="body")

    def on_mount(self) -> None:
        self.redraw()
        self.set_interval(self.tick, self.redraw)

    def before_frame(self) -> None:
        """Replay advances its clock here."""

    def per_page(self, frame: Frame) -> int:
        fixed = 1 + (1 if self.view.replay else 0) + len(frame.resources) + 3 + 2
        if self.view.show_pending and frame.pending:
            fixed += 2 + min(8, len({p.reason for p in frame.pending}))
        if self.view.show_disruptions and frame.disruptions:
            fixed += 2 + min(8, len(frame.disruptions))
        if self.view.grouped:
            fixed += len(frame.nodepools)
        return max(1, (self.size.height - fixed) // max(1, len(frame.resources)))

    def redraw(self) -> None:
        self.before_frame()
        frame = self.frame = self.get_frame()
        self.view.per_page = self.per_page(frame)
        renderable, self.pages = screen(frame, self.opts, self.view)
        if self.view.page >= self.pages:
            self.view.page = self.pages - 1
        self.query_one("#body", Static).update(renderable)

    def action_page(self, delta: int) -> None:
        self.view.page = max(0, min(self.pages - 1, self.view.page + delta))
        self.redraw()

    def action_toggle(self, attr: str) -> None:
        setattr(self.view, attr, not getattr(self.view, attr))
        self.redraw()


class ReplayApp(ViewerApp):
    BINDINGS = ViewerApp.BINDINGS + [
        Binding("space", "play", "play/pause"),
        Binding("full_stop", "step(1)", "step"),
        Binding("comma", "step(-1)", show=False),
        Binding("plus,equals_sign", "speed(2)", "speed"),
        Binding("minus", "speed(0.5)", show=False),
        Binding("right_square_bracket", "jump(1)", "next disruption"),
        Binding("left_square_bracket", "jump(-1)", show=False),
        Binding("home", "goto('start')", show=False),
        Binding("end", "goto('end')", show=False),
    ]

    def __init__(self, replay, opts: Options, prices: PriceBook, at: float, speed: float, tick: float = 0.25,
                 playing: bool = True):
        self.replay = replay
        self.t = at
        self.speed = speed
        self.playing = playing
        self.prices = prices
        self._last = time.monotonic()
        view = View(title=f"karpy viewer — replay {replay.path}",
                    keys="space play/pause • ./, step • +/- speed • ]/[ disruption • ←/→ page • g p d • q quit")
        super().__init__(self._frame, opts, view, tick)

    def _frame(self) -> Frame:
        self.view.replay = replay_line(self.replay, self.t, self.playing, self.speed)
        return build(self.replay.snapshot(self.t, self.opts.node_selector), self.opts.resources, self.prices)

    def before_frame(self) -> None:
        now = time.monotonic()
        if self.playing:
            self.t = min(self.replay.end, self.t + (now - self._last) * self.speed)
            if self.t >= self.replay.end:
                self.playing = False
        self._last = now

    def action_play(self) -> None:
        if not self.playing and self.t >= self.replay.end:
            self.t = self.replay.start
        self.playing = not self.playing
        self._last = time.monotonic()
        self.redraw()

    def _times(self) -> list[float]:
        return sorted({self.replay.start, self.replay.end, *self.replay.event_times})

    def action_step(self, direction: int) -> None:
        self.playing = False
        times = self._times()
        if direction > 0:
            self.t = next((x for x in times if x > self.t + 1e-6), self.replay.end)
        else:
            self.t = next((x for x in reversed(times) if x < self.t - 1e-6), self.replay.start)
        self.redraw()

    def action_speed(self, factor: float) -> None:
        self.speed = min(86400.0, max(0.25, self.speed * factor))
        self.redraw()

    def action_jump(self, direction: int) -> None:
        self.playing = False
        starts = sorted({m for m, label in self.replay.marks})
        if direction > 0:
            self.t = next((x for x in starts if x > self.t + 1e-6), self.t)
        else:
            self.t = next((x for x in reversed(starts) if x < self.t - 1e-6), self.t)
        self.redraw()

    def action_goto(self, where: str) -> None:
        self.playing = False
        self.t = self.replay.start if where == "start" else self.replay.end
        self.redraw()


class LiveApp(ViewerApp):
    def __init__(self, source, opts: Options, prices: PriceBook, tick: float = 0.25):
        self.source = source
        self.prices = prices
        self.costs: list[tuple[float, float]] = []
        self._cache: tuple[int, int, Frame] | None = None
        super().__init__(self._frame, opts, View(title=f"karpy viewer — {source.context or source.server}"), tick)

    def _frame(self) -> Frame:
        second = int(time.time())
        version = self.source.version
        if self._cache is not None and self._cache[0] == version and self._cache[1] == second:
            return self._cache[2]
        snap = self.source.snapshot()
        frame = build(snap, self.opts.resources, self.prices)
        cost = frame.price_per_hour
        if not self.costs or abs(self.costs[-1][1] - cost) > 1e-9:
            self.costs.append((snap.now, cost))
            del self.costs[:-COST_SAMPLES]
        frame.cost_history = self.costs + [(snap.now, cost)]
        self._cache = (version, second, frame)
        return frame


def run_live(source, opts: Options, prices: PriceBook) -> None:
    try:
        LiveApp(source, opts, prices).run()
    finally:
        source.close()


def run_replay(replay, opts: Options, prices: PriceBook, at: float, speed: float) -> None:
    ReplayApp(replay, opts, prices, at, speed).run()
