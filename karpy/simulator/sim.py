"""``karpy simulate``: Karpenter's controllers on an in-memory API server, in a simulated world.

One :class:`~karpy.runtime.manager.Manager` runs, over a
:class:`~karpy.kube.memory.MemoryAPI` and a :class:`~karpy.runtime.clock.SimClock`:

* Karpenter's controllers (:mod:`karpy.controllers`), with the
  :class:`~karpy.cloudprovider.simulated.SimulatedCloudProvider` as their cloud;
* the world a cluster supplies (:mod:`karpy.simulator`): workload controllers,
  the kube-scheduler stand-in, kubelets and the pod garbage collector, the
  PodDisruptionBudget status, and the simulated cloud, which turns launched
  instances into Nodes after the NodeClass's registration delay.

The loop runs everything due at the current instant until nothing is left to
do, then moves the clock to the next timer. Without a Scenario (and after its
last step) it runs until settled -- nothing in flight (a node still to
register, a pod still running towards its end, a disruption being validated or
carried out, a node draining) and no change to the cluster for 15 simulated
minutes -- or until ``--until``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from .. import resources as res
from ..cloudprovider.simulated import SimulatedCloud, SimulatedCloudProvider
from ..controllers.env import DEFAULT_FEATURE_GATES, KARPY_GATES, Settings
from ..controllers.operator import Karpenter, build
from ..disruption.methods import POLL_PERIOD
from ..kube import errors as E
from ..kube.memory import MemoryAPI
from ..kube.registry import is_namespaced
from ..kube.times import MAX_TIME, fmt_time, parse_time
from ..runtime.clock import SimClock
from ..runtime.events import Recorder, ref
from ..runtime.log import Logger
from ..runtime.manager import Manager
from ..scheduling.default_spread import DefaultSpread
from ..scheduling.pods import LabelSelector
from ..state.pods import PodCompiler
from .disruption_budgets import DisruptionBudgets
from .history import History
from .kube_scheduler import KubeScheduler
from .kubelet import Kubelets
from .volumes import VolumeBinder
from .workloads import Workloads

DEFAULT_START = "2026-01-01T00:00:00Z"
SETTLE_QUIET = 15 * 60.0  # the simulation is settled after 15 quiet minutes
MAX_STEPS_PER_INSTANT = 5_000_000
# A simulation stops early after this many disruption commands: past it, a run is a steady cycle (an
# expireAfter of minutes over --until of months) whose output no one reads, and it would take minutes
# and gigabytes. Large clusters stay far below it (1,000 nodes consolidating: about 1,000 commands).
MAX_DISRUPTIONS = 5_000
# With a horizon (--until given), quiet stretches are skipped (Simulation._skip_quiet): the cluster must
# have been unchanged this long (every periodic pass, garbage collection's 2 minutes included, has seen it),
# and the clock stops this far before the next thing due, so the polls run on their usual period into it.
QUIET_BEFORE_JUMP = 300.0
JUMP_MARGIN = 20.0


def default_spread_from_api(constraints: list, api: Any) -> DefaultSpread:
    """The cluster's default topology spread constraints, deducing each pod's selector from its owner and the Services
    read from ``api`` (the world's API server, so the order in which objects reach an informer cache cannot decide
    whether a pod is defaulted)."""
    return DefaultSpread(constraints, lambda kind, ns, name: api.try_get(kind, name, ns),
                         lambda ns: api.list("Service", ns)[0])


class World:
    """The simulated cluster around Karpenter: workloads, kube-scheduler, kubelets, PDB status, cloud."""

    def __init__(self, mgr: Manager, api: MemoryAPI, clock: Any, cloud: SimulatedCloud, compiler: PodCompiler):
        self.recorder = Recorder(api, clock, component="kube-controller-manager")
        self.workloads = Workloads(mgr, api, self.recorder)
        self.scheduler = KubeScheduler(mgr, api, clock, self.recorder, compiler)
        self.kubelets = Kubelets(mgr, api, clock, self.recorder, self.workloads, cloud)
        self.budgets = DisruptionBudgets(mgr, api, clock)
        self.volumes = VolumeBinder(mgr, api)
        self.history = History(mgr, clock, exact_price=self._price)
        self.cloud = cloud
        for c in (self.history, self.workloads, self.volumes, self.scheduler, self.kubelets, self.budgets):
            mgr.add(c)

    def _price(self, provider_id: str) -> float | None:
        inst = self.cloud.find(provider_id)
        return inst.offering.price if inst is not None else None


class Simulation:
    """The simulated cluster and Karpenter on one manager.

    ``jump_quiet`` (on) lets :meth:`run_until` skip quiet stretches; off, the loop fires every poll
    (tests compare the two).

    ``karpy sandbox`` builds the same wiring with a real-time ``clock`` (then
    ``start`` is the clock's now), ``history=True`` (watches resume from a
    resourceVersion), ``strict=False`` (a failing reconcile is logged and retried, not
    raised) and optionally ``karpenter=False`` (the world without Karpenter's
    controllers, for an outside ``karpy controller``)."""

    jump_quiet = True

    def __init__(self, documents: Iterable[Any], region: str | None = None, until: float = 3600.0, *,
                 clock: Any = None, history: bool = False, karpenter: bool = True, strict: bool = True,
                 log: Logger | None = None, horizon: bool = False):
        self.scenario: dict | None = None
        self.initial: list[dict] = []
        for d in documents:
            obj = d.obj if hasattr(d, "obj") else d
            if obj.get("kind") == "Scenario":
                self.scenario = obj
            else:
                self.initial.append(obj)
        spec = (self.scenario or {}).get("spec") or {}
        settings = spec.get("settings") or {}
        self.start = clock.now() if clock is not None else (parse_time(spec.get("start") or DEFAULT_START) or 0.0)
        self.until = min(self.start + until, MAX_TIME)
        gates = dict(DEFAULT_FEATURE_GATES)
        gates.update(settings.get("featureGates") or {})
        self.settings = Settings(
            batch_idle=res.parse_duration(settings.get("batchIdleDuration") or "1s"),
            batch_max=res.parse_duration(settings.get("batchMaxDuration") or "10s"),
            feature_gates=gates,
            min_values_policy=settings.get("minValuesPolicy") or "Strict",
            preference_policy=settings.get("preferencePolicy") or "Respect",
            ignore_dra_requests=settings.get("ignoreDRARequests", True) is not False,
        )
        self.clock = clock if clock is not None else SimClock(self.start)
        self.api = MemoryAPI(self.clock, history=history)
        self.mgr = Manager(self.api, self.clock, strict=strict)
        self.cloud = SimulatedCloud(self.api, self.clock, region=region or spec.get("region"))
        self.log = log if log is not None else Logger(self.clock, level="error")
        self.recorder = Recorder(self.api, self.clock)
        self.provider = SimulatedCloudProvider(self.cloud, self._nodeclass, self.clock, self.recorder)
        self.provider.reserved_capacity = self.settings.gate("ReservedCapacity")
        self.provider.gates = dict(self.settings.feature_gates)
        self.cloud.set_reservations(spec.get("reservations"))
        self.karpenter: Karpenter | None = None
        if karpenter:
            self.karpenter = build(self.mgr, self.api, self.clock, self.provider, self.settings,
                                   log=self.log, recorder=self.recorder)
        compiler = self.karpenter.cluster.compiler if self.karpenter is not None else PodCompiler()
        # schedulerConfig.podTopologySpread.defaultConstraints: Karpenter and kube-scheduler share the compiler, so
        # both apply the same defaults with the same selector deduced from each pod's owner
        defaults = ((settings.get("schedulerConfig") or {}).get("podTopologySpread") or {}).get("defaultConstraints")
        if defaults:
            # (the owner is read from the API rather than the informer cache, so the order in which pods and their
            # owners reach the cache cannot decide whether a pod is defaulted)
            compiler.default_spread = default_spread_from_api(defaults, self.api)
        self.world = World(self.mgr, self.api, self.clock, self.cloud, compiler)
        self.log.listeners.append(self.world.history.on_log)
        self.log.listen_for = set(History.LOG_MESSAGES)
        self.stopped: str | None = None  # why the simulation stopped before --until, when it did
        self._args = (region, until, horizon)
        self.baseline: Simulation | None = None  # the same input with karpy's gates off, see run_baseline()
        self.seeded: list[dict] = []  # a live cluster's objects it started from (--from-cluster)
        self.horizon = horizon  # run to ``until`` (through quiet stretches) rather than stop once settled
        self._periodic: frozenset[str] | None = None
        self.on_progress: Callable[["Simulation"], None] | None = None  # called as simulated time advances
        self.mgr.start()

    @property
    def karpy_gates(self) -> list[str]:
        """karpy's own feature gates this simulation turns on."""
        return [g for g in KARPY_GATES if self.settings.feature_gates.get(g)]

    def run_baseline(self) -> "Simulation | None":
        """With karpy's gates on, simulate the same input once more with them off: upstream's decisions,
        for the cost side by side."""
        if not self.karpy_gates:
            return None
        scenario = dict(self.scenario or {})
        spec = dict(scenario.get("spec") or {})
        settings = dict(spec.get("settings") or {})
        settings["featureGates"] = {**(settings.get("featureGates") or {}), **{g: False for g in KARPY_GATES}}
        spec["settings"] = settings
        scenario["spec"] = spec
        region, until, horizon = self._args
        self.baseline = Simulation([*self.initial, scenario], region=region, until=until, horizon=horizon)
        self.baseline.cloud.prices = self.cloud.prices  # the user's prices (--prices) bill its nodes too
        if self.seeded:
            from .from_cluster import seed

            seed(self.baseline, self.seeded)
        self.baseline.run()
        return self.baseline

    def _nodeclass(self, kind: str, name: str) -> dict | None:
        return self.mgr.get(kind, name)

    @property
    def now(self) -> float:
        return self.clock.now()

    @property
    def history(self) -> History:
        return self.world.history

    # --- running -------------------------------------------------------------------------------
    def run(self) -> None:
        initial = self.initial
        if not self.karpy_gates:
            # only run_baseline reads the manifests again: without karpy's gates nothing does, so the parsed
            # originals (the API server keeps its own copies) are not held for the whole run
            self.initial = []
        for obj in initial:
            self.apply(obj)
        del initial
        from ..api.scenario import steps

        for action, arg in steps(self.scenario or {}):
            if self.now >= self.until or self.stopped:
                break
            self.step(action, arg)
        if self.horizon:
            self.run_until(self.until)
        else:
            self.run_until_settled()

    def drain(self) -> None:
        self.mgr.drain(MAX_STEPS_PER_INSTANT)

    def step(self, action: str, arg: Any) -> None:
        self.drain()
        if action == "apply":
            for obj in arg:
                self.apply(obj)
        elif action == "advance":
            self.run_until(min(self.until, self.now + res.parse_duration(arg)))
            return
        elif action == "scale":
            ns = (arg.get("namespace") or "default") if is_namespaced(arg["kind"]) else ""
            try:
                if arg["kind"] == "NodePool":
                    self.api.patch("NodePool", arg["name"], {"spec": {"replicas": int(arg["replicas"])}})
                else:
                    self.api.scale(arg["kind"], arg["name"], ns, int(arg["replicas"]))
            except E.NotFound:
                pass
        elif action == "patch":
            self._patch(arg)
        elif action == "delete":
            ns = (arg.get("namespace") or "default") if is_namespaced(arg["kind"]) else ""
            try:
                self.api.delete(arg["kind"], arg["name"], ns)
            except E.NotFound:
                pass
        elif action in ("unavailable", "available"):
            self.cloud.set_availability(arg.get("instanceTypes"), arg.get("zones"), arg.get("capacityType"),
                                        action == "available")
        elif action == "interrupt":
            self._interrupt(arg)
        elif action == "condition":
            self._condition(arg)
        elif action == "reservations":
            self.cloud.set_reservations(arg)
        self.drain()

    def _patch(self, p: dict) -> None:
        from ..api.loader import validate_object
        from ..kube.patch import merge_patch

        kind = p["kind"]
        ns = (p.get("namespace") or "default") if is_namespaced(kind) else ""
        obj = self.api.try_get(kind, p["name"], ns)
        if obj is None:
            return
        patched = merge_patch(obj, p.get("merge") or {})
        patched.pop("status", None)
        doc, errors = validate_object(_clean(patched), file="Scenario patch", old=_clean(obj))
        if errors:
            # the API server would refuse the patch; the cluster carries on unchanged
            self.recorder.publish(ref(obj), "PatchRejected", "; ".join(str(e) for e in errors), "Warning")
            return
        new = dict(doc.obj if doc is not None else patched)
        meta = dict(new.get("metadata") or {})
        meta["resourceVersion"] = obj["metadata"].get("resourceVersion")
        new["metadata"] = meta
        self.api.update(new)

    def _nodes(self, spec: dict, count: int | None) -> list[dict]:
        """The Node a step names (``node``), or the first ``count`` (all, when None) matching its
        ``selector``, by name."""
        if spec.get("node"):
            n = self.api.try_get("Node", spec["node"])
            return [n] if n is not None else []
        sel = LabelSelector(spec.get("selector") or {})
        nodes, _ = self.api.list("Node")
        matching = sorted((n for n in nodes if sel.matches(n["metadata"].get("labels") or {})),
                          key=lambda n: n["metadata"]["name"])
        return matching if count is None else matching[:count]

    def _condition(self, spec: dict) -> None:
        count = spec.get("count")
        for n in self._nodes(spec, None if count is None else int(count)):
            self.world.kubelets.report_condition(n["metadata"]["name"], spec["type"], spec["status"],
                                                 spec.get("reason"), spec.get("message"))

    def _interrupt(self, spec: dict) -> None:
        targets = self._nodes(spec, int(spec.get("count", 1)))
        for n in targets:
            inst = self.cloud.find((n.get("spec") or {}).get("providerID") or "")
            if inst is not None:
                self.cloud.interrupt(inst)

    def run_until(self, t_end: float) -> None:
        while True:
            self.drain()
            nt = self.clock.next_time()
            if nt is None or nt > t_end or self._over_limit():
                if not self.stopped:
                    self.clock.set(t_end)
                    self.drain()
                return
            if self._skip_quiet(nt, t_end):
                continue
            self._fire_next()

    def _skip_quiet(self, next_timer: float, t_end: float) -> bool:
        """Jump over a quiet stretch: when nothing is in flight, the cluster has not changed for
        QUIET_BEFORE_JUMP, Karpenter's periodic passes have seen the present state and found nothing, and
        the next timer is one of those polls, move the clock to just before the next instant anything can
        happen (a timer of the world or of a controller, a time-driven change the disruption methods would
        see, ``t_end``). The polls then fire once, late, and carry on as usual. Decisions are those of a
        loop that ran every poll; a month of quiet takes milliseconds, not a minute."""
        if (not self.jump_quiet or self.karpenter is None or not self.settled()
                or self.now < self.mgr.last_activity + QUIET_BEFORE_JUMP):
            return False
        periodic = self._periodic_labels()
        if _label_head(self.clock.peek()) not in periodic:
            return False
        target = min(t_end, self.karpenter.quiet_until(), self.clock.earliest(lambda t: _label_head(t) not in periodic))
        target -= JUMP_MARGIN
        # land on the disruption poll's own period, so that its passes after the jump fall on the instants
        # they would have fallen on without it (and the decisions carry the same times)
        poll = self.clock.earliest(lambda t: _label_head(t) == "disruption")
        if poll < target:
            target = poll + ((target - poll) // POLL_PERIOD) * POLL_PERIOD
        if target <= self.now + JUMP_MARGIN:
            return False
        self.clock.set(target)
        return True

    def _periodic_labels(self) -> frozenset[str]:
        if self._periodic is None:
            self._periodic = frozenset(c.name for c in self.mgr.controllers if getattr(c, "periodic", False))
        return self._periodic

    def _fire_next(self) -> None:
        batch = self.clock.pop_next_batch()
        if batch:
            self.clock.set(batch[0].when)
        for t in batch:
            t.fn()
        self.drain()
        if self.on_progress is not None:
            self.on_progress(self)

    def _over_limit(self) -> bool:
        if self.stopped:
            return True
        if len(self.history.disruptions) >= MAX_DISRUPTIONS:
            self.stopped = (f"stopped at {fmt_time(self.now)}, before --until: {MAX_DISRUPTIONS} disruption commands "
                            "is the most one simulation carries out; simulate a shorter time")
            return True
        return False

    def settled(self) -> bool:
        return not self.clock.has_keepalive() and not (self.karpenter is not None and self.karpenter.busy())

    def run_until_settled(self) -> None:
        """Run until nothing is in flight and nothing has changed for 15 minutes, or until ``--until``."""
        while True:
            self.drain()
            nt = self.clock.next_time()
            quiet = self.mgr.last_activity + SETTLE_QUIET
            if nt is None:
                break
            if nt > self.until:
                if not self.settled():
                    self.clock.set(self.until)  # cut short: something was still due
                    return
                break
            if self.settled() and nt >= quiet:
                break
            if self._over_limit():
                return
            self._fire_next()
        self.clock.set(min(self.until, max(self.now, self.mgr.last_activity + SETTLE_QUIET)))

    # --- objects -------------------------------------------------------------------------------
    def apply(self, obj: dict) -> None:
        """Create, or replace an object that exists (as ``kubectl apply`` would leave it)."""
        obj = _clean(obj)
        kind = obj.get("kind")
        meta = dict(obj.get("metadata") or {})
        if kind == "Node":
            labels = dict(meta.get("labels") or {})
            labels.setdefault("kubernetes.io/hostname", meta.get("name", ""))
            meta["labels"] = labels
        obj = dict(obj)
        obj["metadata"] = meta
        ns = (meta.get("namespace") or "default") if is_namespaced(kind) else ""
        cur = self.api.try_get(kind, meta.get("name", ""), ns)
        if cur is None:
            self.api.create(obj)
            return
        if kind == "Pod":
            self.api.delete("Pod", meta["name"], ns)
            self.api.create(obj)
            return
        meta["resourceVersion"] = cur["metadata"].get("resourceVersion")
        self.api.update(obj)
        if "status" in obj and kind not in ("NodePool", "NodeClaim"):
            self.api.update({**obj, "metadata": {**meta, "resourceVersion": None}}, subresource="status")


def _label_head(timer: Any) -> str | None:
    """The controller (or world agent) a timer belongs to, from its label ``name/key``."""
    return None if timer is None else timer.label.split("/", 1)[0]


def _clean(obj: dict) -> dict:
    """A manifest as a client sends it: no server-set metadata."""
    out = dict(obj)
    meta = {k: v for k, v in (obj.get("metadata") or {}).items()
            if k not in ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                         "managedFields")}
    out["metadata"] = meta
    return out


__all__ = ["Simulation", "World", "fmt_time"]
