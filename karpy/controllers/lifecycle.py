"""NodeClaim lifecycle (upstream ``pkg/controllers/nodeclaim/lifecycle``).

For each NodeClaim: add the ``karpenter.sh/termination`` finalizer, then

* **launch**: ask the cloud provider to create the instance; on insufficient
  capacity the NodeClaim is deleted (its pods go back to the provisioner), on
  success it takes the resolved labels, annotations, provider ID, capacity and
  allocatable, and ``Launched=True``;
* **registration**: once a Node with its provider ID appears, sync the
  NodeClaim's labels, annotations, taints, owner and finalizer onto it, remove
  the ``karpenter.sh/unregistered`` taint, and set ``Registered=True`` and
  ``status.nodeName``;
* **initialization**: when the Node is Ready, its startup taints and the known
  ephemeral taints (not-ready, unreachable, ...) are gone and its resources
  are registered, label it ``karpenter.sh/initialized`` and set
  ``Initialized=True`` (and ``Ready``);
* **liveness**: a NodeClaim whose Node has not registered 15 minutes after
  launch is deleted.

A deleted NodeClaim is finalized: the ``terminationGracePeriod`` deadline is
stamped as an annotation, its Nodes are deleted (their own finalizer drains
them) and, once they are gone, the instance is terminated and the finalizer
removed.
"""

from __future__ import annotations

from typing import Any

from .. import resources as res
from ..cloudprovider.provider import InsufficientCapacityError, NodeClaimNotFoundError, NodeClassNotReadyError
from ..kube import errors as E
from ..kube.port import DELETED
from ..kube.times import fmt_time, parse_time
from ..runtime.events import ref
from ..runtime.manager import condition, deleting, is_true, newer
from ..state.cluster import is_known_ephemeral_taint
from .env import Env

FINALIZER = "karpenter.sh/termination"
UNREGISTERED_TAINT_KEY = "karpenter.sh/unregistered"
REGISTERED_LABEL = "karpenter.sh/registered"
INITIALIZED_LABEL = "karpenter.sh/initialized"
TERMINATION_TIMESTAMP = "karpenter.sh/nodeclaim-termination-timestamp"
REGISTRATION_TTL = 15 * 60.0
NODECLAIM_CONDITIONS = ("Launched", "Registered", "Initialized")


def set_condition(status: dict, ctype: str, value: str, now: float, reason: str | None = None,
                  message: str | None = None) -> bool:
    """Set one status condition in place (status is a private copy); True when it changed."""
    conds = list(status.get("conditions") or ())
    for i, c in enumerate(conds):
        if c.get("type") == ctype:
            if c.get("status") == value and (reason is None or c.get("reason") == reason) and \
                    (c.get("message") == message if message is not None
                     else value != "True" or not c.get("message")):
                return False
            new = dict(c)
            if c.get("status") != value:
                new["lastTransitionTime"] = fmt_time(now)
            new["status"] = value
            new["reason"] = reason or ctype if value == "True" else (reason or new.get("reason") or ctype)
            if message is not None:
                new["message"] = message
            elif value == "True":
                new.pop("message", None)  # a condition turning True drops the message of its old state
            conds[i] = new
            status["conditions"] = conds
            return True
    c = {"type": ctype, "status": value, "lastTransitionTime": fmt_time(now), "reason": reason or ctype}
    if message is not None:
        c["message"] = message
    conds.append(c)
    status["conditions"] = conds
    return True


def clear_condition(status: dict, ctype: str) -> bool:
    conds = [c for c in status.get("conditions") or () if c.get("type") != ctype]
    if len(conds) == len(status.get("conditions") or ()):
        return False
    status["conditions"] = conds
    return True


def set_ready(status: dict, now: float) -> None:
    """The root ``Ready`` condition: True once every lifecycle condition is."""
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
    ok = all(conds.get(t) == "True" for t in NODECLAIM_CONDITIONS)
    set_condition(status, "Ready", "True" if ok else "Unknown", now,
                  reason=None if ok else "NotReady", message=None if ok else "not all conditions are ready")


LAUNCH_CACHE_TTL = 60.0  # seconds a launch result is reused for a NodeClaim whose Launched status is not seen yet


class Lifecycle:
    """Launch, registration, initialization and liveness of NodeClaims, and their finalizer.

    Against a real API server the informer's copy of a NodeClaim lags this controller's own writes by a
    moment, and another event (its Node appearing) can run the reconcile again in between. So the controller
    reads its own writes (the newer of the cached copy and what its last write returned) and, as upstream's
    launch does, remembers each launch by NodeClaim UID for a minute: a NodeClaim is never launched twice
    because its status was not seen yet."""

    name = "nodeclaim.lifecycle"

    def __init__(self, env: Env):
        self.env = env
        self._written: dict[str, dict] = {}  # NodeClaim name -> what our last write of it returned
        self._launched: dict[str, tuple[float, dict]] = {}  # NodeClaim UID -> (when, the cloud's answer)

    def _current(self, name: str) -> dict | None:
        """The NodeClaim as this controller last knows it: its own last write if the cache has not caught up."""
        cached = self.env.mgr.get("NodeClaim", name)
        mine = self._written.get(name)
        if mine is not None:
            if newer(mine, cached):
                return mine
            del self._written[name]
        return cached

    def _wrote(self, obj: Any) -> Any:
        if isinstance(obj, dict) and (obj.get("metadata") or {}).get("name"):
            self._written[obj["metadata"]["name"]] = obj
        return obj

    def setup(self, mgr) -> None:
        mgr.watch("NodeClaim", self._on_claim)
        mgr.watch("Node", self._on_node)

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        meta = obj["metadata"]
        mine = self._written.get(meta["name"])
        if mine is not None and (etype == DELETED or not newer(mine, obj)):
            del self._written[meta["name"]]  # the cache has caught up with our own write
        if etype == DELETED:
            self._launched.pop(meta.get("uid") or meta["name"], None)
            return
        if self._launched and is_true(obj, "Launched"):
            # the cache shows the launch: its result is no longer needed to guard against launching twice
            self._launched.pop(meta.get("uid") or meta["name"], None)
        if not meta.get("deletionTimestamp") and FINALIZER in (meta.get("finalizers") or ()) and is_true(obj, "Ready"):
            return  # launched, registered and initialized: nothing left to do until it is deleted
        self.env.mgr.enqueue(self, meta["name"])

    def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        pid = (obj.get("spec") or {}).get("providerID")
        sn = self.env.cluster.by_provider.get(pid) if pid else None
        if sn is not None and sn.claim_name:
            self.env.mgr.enqueue(self, sn.claim_name)

    # --- reconcile --------------------------------------------------------------------------
    def reconcile(self, name: str) -> float | None:
        env = self.env
        claim = self._current(name)
        if claim is None:
            self._written.pop(name, None)
            return None
        if not env.cloud.serves((claim.get("spec") or {}).get("nodeClassRef")) if hasattr(env.cloud, "serves") else False:
            return None
        if deleting(claim):
            return self.finalize(claim)
        if FINALIZER not in (claim["metadata"].get("finalizers") or ()):
            claim = self._wrote(env.api.patch("NodeClaim", name, {"metadata": {
                "finalizers": list(claim["metadata"].get("finalizers") or ()) + [FINALIZER],
                "resourceVersion": claim["metadata"]["resourceVersion"]}}))
            env.mgr.pump()
        now = env.now()
        meta_patch: dict[str, Any] = {}
        status = dict(claim.get("status") or {})
        requeue: list[float] = []
        # launch
        if not is_true(claim, "Launched"):
            created = self._launch(claim)
            if created is None:
                return None  # deleted for lack of capacity
            labels = {**(created["metadata"].get("labels") or {}), **(claim["metadata"].get("labels") or {})}
            annotations = {**(claim["metadata"].get("annotations") or {}), **(created["metadata"].get("annotations") or {})}
            meta_patch = {"labels": labels, "annotations": annotations}
            for k in ("providerID", "imageID", "capacity", "allocatable"):
                if created["status"].get(k) is not None:
                    status[k] = created["status"][k]
            set_condition(status, "Launched", "True", now)
            self._launched_event(claim, created)
        # registration
        node = self._node_for(status.get("providerID"))
        if not _status_true(status, "Registered"):
            if node is None:
                set_condition(status, "Registered", "Unknown", now, reason="NodeNotFound", message="Node not registered with cluster")
            else:
                self._sync_node(claim, node, labels=meta_patch.get("labels"), annotations=meta_patch.get("annotations"))
                set_condition(status, "Registered", "True", now)
                status["nodeName"] = node["metadata"]["name"]
                env.log.info("registered nodeclaim", controller=self.name, NodeClaim={"name": name},
                             Node={"name": node["metadata"]["name"]})
                env.recorder.publish(ref(claim), "Registered",
                                     f"Status condition transitioned, Type: Registered, Status: True (node {node['metadata']['name']})")
                node = env.mgr.get("Node", node["metadata"]["name"])
        # initialization
        if _status_true(status, "Registered") and not _status_true(status, "Initialized"):
            why = self._not_initialized(claim, node)
            if why is None:
                set_condition(status, "Initialized", "True", now)
                self._label_node(node, {INITIALIZED_LABEL: "true"})
                env.log.info("initialized nodeclaim", controller=self.name, NodeClaim={"name": name},
                             Node={"name": node["metadata"]["name"]},
                             allocatable=(node.get("status") or {}).get("allocatable"))
                env.recorder.publish(ref(claim), "Initialized", "Status condition transitioned, Type: Initialized, Status: True")
            else:
                set_condition(status, "Initialized", "Unknown", now, reason=why[0], message=why[1])
        # liveness
        if not _status_true(status, "Registered"):
            launched_at = parse_time((_cond(status, "Launched") or {}).get("lastTransitionTime")) or now
            left = launched_at + REGISTRATION_TTL - now
            if left <= 0:
                env.log.info("deleting nodeclaim, registration timed out", controller=self.name, NodeClaim={"name": name},
                             ttl="15m0s")
                env.recorder.publish(ref(claim), "RegistrationTimeout", "Node did not register within 15m0s", "Warning")
                env.api.delete("NodeClaim", name)
                env.metrics.disrupted(claim, "registration_timeout", None)
                return None
            requeue.append(left)
        set_ready(status, now)
        if meta_patch:
            self._wrote(env.api.patch("NodeClaim", name, {"metadata": meta_patch}))
        old_status = claim.get("status") or {}
        if status != old_status:
            self._wrote(env.api.patch("NodeClaim", name, {"status": _status_patch(old_status, status)},
                                      subresource="status"))
        return min(requeue) if requeue else None

    def _launch(self, claim: dict) -> dict | None:
        env = self.env
        name = claim["metadata"]["name"]
        uid = claim["metadata"].get("uid") or name
        now = env.now()
        # entries are kept in launch order (the clock never goes back): expire from the oldest until a fresh
        # one, rather than scanning every launch of the last minute on each launch
        launched = self._launched
        while launched:
            first = next(iter(launched))
            if now - launched[first][0] <= LAUNCH_CACHE_TTL:
                break
            del launched[first]
        hit = launched.get(uid)
        if hit is not None:
            return hit[1]
        try:
            created = env.cloud.create(claim)
            self._launched[uid] = (now, created)
            return created
        except (InsufficientCapacityError, NodeClassNotReadyError) as e:
            env.recorder.publish(ref(claim), "LaunchFailed" if isinstance(e, InsufficientCapacityError) else "NodeClassNotReady",
                                 f"InsufficientCapacityError: {e}" if isinstance(e, InsufficientCapacityError) else str(e),
                                 "Warning")
            env.log.error("failed launching nodeclaim", controller=self.name, NodeClaim={"name": name}, error=str(e))
            env.api.delete("NodeClaim", name)
            env.metrics.disrupted(claim, "insufficient_capacity" if isinstance(e, InsufficientCapacityError)
                                  else "nodeclass_not_ready", None)
            return None

    def _launched_event(self, claim: dict, created: dict) -> None:
        env = self.env
        labels = created["metadata"].get("labels") or {}
        it = labels.get("node.kubernetes.io/instance-type", "")
        ct = labels.get("karpenter.sh/capacity-type", "")
        zone = labels.get("topology.kubernetes.io/zone", "")
        price = (created["metadata"].get("annotations") or {}).get("karpy.dev/price-per-hour", "")
        est = (created["metadata"].get("annotations") or {}).get("karpy.dev/price-estimated") == "true"
        options = [v for r in (claim.get("spec") or {}).get("requirements") or ()
                   if r.get("key") == "node.kubernetes.io/instance-type" for v in r.get("values") or ()]
        requests = ((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}
        env.log.info("launched nodeclaim", controller=self.name, NodeClaim={"name": claim["metadata"]["name"]},
                     **{"provider-id": created["status"].get("providerID"), "instance-type": it, "zone": zone,
                        "capacity-type": ct, "allocatable": created["status"].get("allocatable")})
        env.recorder.publish(ref(claim), "Launched",
                             f"launched {it} ({ct}, {zone}) at ${price}/h{' (spot price estimated)' if est else ''}: "
                             f"the cheapest {ct} offering of {len(options)} compatible instance type(s) for requests "
                             + "{" + ",".join(f'"{k}":"{v}"' for k, v in requests.items()) + "}")

    def _node_for(self, provider_id: str | None) -> dict | None:
        if not provider_id:
            return None
        sn = self.env.cluster.by_provider.get(provider_id)
        return sn.node if sn is not None else None

    def _sync_node(self, claim: dict, node: dict, labels: dict | None, annotations: dict | None) -> None:
        """Registration: the NodeClaim's labels, annotations, taints, owner and finalizer onto the Node."""
        env = self.env
        meta = node["metadata"]
        new_labels = {**(meta.get("labels") or {}), **(labels or claim["metadata"].get("labels") or {}),
                      REGISTERED_LABEL: "true"}
        new_ann = {**(meta.get("annotations") or {}), **(annotations or claim["metadata"].get("annotations") or {})}
        spec = claim.get("spec") or {}
        taints = [t for t in (node.get("spec") or {}).get("taints") or () if t.get("key") != UNREGISTERED_TAINT_KEY]
        for t in list(spec.get("taints") or ()) + ([] if meta.get("labels", {}).get(REGISTERED_LABEL) else list(spec.get("startupTaints") or ())):
            if not any(_same_taint(t, x) for x in taints):
                taints.append(dict(t))
        finalizers = list(meta.get("finalizers") or ())
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
        owners = [r for r in meta.get("ownerReferences") or () if r.get("kind") != "NodeClaim"]
        owners.append({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim["metadata"]["name"],
                       "uid": claim["metadata"].get("uid", ""), "blockOwnerDeletion": True})
        env.api.patch("Node", meta["name"], {
            "metadata": {"labels": new_labels, "annotations": new_ann, "finalizers": finalizers,
                         "ownerReferences": owners, "resourceVersion": meta.get("resourceVersion")},
            "spec": {"taints": taints},
        })
        env.mgr.pump()

    def _label_node(self, node: dict, labels: dict) -> None:
        if all((node["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items()):
            return
        self.env.api.patch("Node", node["metadata"]["name"], {"metadata": {"labels": labels}})

    def _not_initialized(self, claim: dict, node: dict | None) -> tuple[str, str] | None:
        if node is None:
            return ("NodeNotFound", "Node not registered with cluster")
        if not is_true(node, "Ready"):
            return ("NodeNotReady", "Node status is NotReady")
        taints = (node.get("spec") or {}).get("taints") or ()
        for t in (claim.get("spec") or {}).get("startupTaints") or ():
            if any(_same_taint(t, x) for x in taints):
                return ("StartupTaintsExist", f'StartupTaint "{_fmt_taint(t)}" still exists')
        for t in taints:
            # as upstream: not initialized while a known ephemeral taint is on the Node -- not-ready and unreachable
            # (kube-controller-manager takes them off a few seconds after Ready), the external cloud provider's,
            # karpenter.sh/unregistered; the scheduler holds an initialized node's taints against pods
            if is_known_ephemeral_taint(t):
                return ("KnownEphemeralTaintsExist", f'KnownEphemeralTaint "{_fmt_taint(t)}" still exists')
        alloc = res.parse_resource_list((node.get("status") or {}).get("allocatable"))
        requested = res.parse_resource_list(((claim.get("spec") or {}).get("resources") or {}).get("requests"))
        for k, v in requested.items():
            if v and k not in alloc:
                return ("ResourceNotRegistered", f'Resource "{k}" was requested but not registered')
        return None

    # --- finalization -------------------------------------------------------------------------
    def finalize(self, claim: dict) -> float | None:
        env = self.env
        meta = claim["metadata"]
        name = meta["name"]
        if FINALIZER not in (meta.get("finalizers") or ()):
            return None
        tgp = (claim.get("spec") or {}).get("terminationGracePeriod")
        if tgp not in (None, "Never") and TERMINATION_TIMESTAMP not in (meta.get("annotations") or {}):
            deadline = (parse_time(meta.get("deletionTimestamp")) or env.now()) + res.parse_duration(tgp)
            self._wrote(env.api.patch("NodeClaim", name, {"metadata": {"annotations": {TERMINATION_TIMESTAMP: fmt_time(deadline)}}}))
            env.log.info("annotated nodeclaim", controller=self.name, NodeClaim={"name": name},
                         **{TERMINATION_TIMESTAMP: fmt_time(deadline)})
            env.recorder.publish(ref(claim), "TerminationGracePeriodExpiring",
                                 f"All pods will be deleted by {fmt_time(deadline)}", "Warning")
            claim = self._current(name) or claim
        status = claim.get("status") or {}
        pid = status.get("providerID")
        if is_true(claim, "Registered") or pid:
            node = self._node_for(pid)
            if node is None and status.get("nodeName"):
                # as upstream, a Node is the NodeClaim's only by provider ID: a later Node reusing the name is not
                node = env.mgr.get("Node", status["nodeName"])
                if node is not None and ((node.get("spec") or {}).get("providerID") or "") != (pid or ""):
                    node = None
            if node is not None:
                if not deleting(node):
                    env.api.delete("Node", node["metadata"]["name"])
                return None  # the Node's own finalizer drains it; its deletion requeues us
        if pid:
            try:
                env.cloud.delete(claim)
            except NodeClaimNotFoundError:
                pass
            else:
                st = dict(status)
                if set_condition(st, "InstanceTerminating", "True", env.now()):
                    env.api.patch("NodeClaim", name, {"status": st}, subresource="status")
                return 5.0
        try:
            env.api.patch("NodeClaim", name, {"metadata": {
                "finalizers": [f for f in meta.get("finalizers") or () if f != FINALIZER],
                "resourceVersion": claim["metadata"]["resourceVersion"]}})
        except E.NotFound:
            return None
        env.log.info("deleted nodeclaim", controller=self.name, NodeClaim={"name": name})
        return None


def _status_patch(old: dict, new: dict) -> dict:
    """The merge patch that writes ``new`` over ``old`` as sending all of ``new`` would, less the fields ``new``
    shares with ``old`` unchanged (the same object, with no null a merge would drop), such as capacity."""
    return {k: v for k, v in new.items() if k not in old or old[k] is not v or v is None or _has_null(v)}


def _has_null(v: Any) -> bool:
    """Whether merging ``v`` into itself would change it: a null anywhere in its objects (lists are replaced
    whole, not merged)."""
    return isinstance(v, dict) and any(x is None or _has_null(x) for x in v.values())


def _cond(status: dict, ctype: str) -> dict | None:
    for c in status.get("conditions") or ():
        if c.get("type") == ctype:
            return c
    return None


def _status_true(status: dict, ctype: str) -> bool:
    c = _cond(status, ctype)
    return c is not None and c.get("status") == "True"


def _same_taint(a: dict, b: dict) -> bool:
    return a.get("key") == b.get("key") and (a.get("value") or "") == (b.get("value") or "") and a.get("effect") == b.get("effect")


def _fmt_taint(t: dict) -> str:
    v = f"={t['value']}" if t.get("value") else ""
    return f"{t.get('key')}{v}:{t.get('effect')}"
