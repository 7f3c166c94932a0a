"""The AWS provider's controllers in ``karpy controller``, and how the provider is put together.

* :class:`NodeClassController`: EC2NodeClass status and conditions (every minute), the hash annotations,
  Events and log lines for what failed; a ``spec.kubelet`` that cannot be decoded, or holds a CEL expression
  while the gate NodeClassCEL is off, leaves it not Ready (ValidationSucceeded False), as upstream;
* :class:`InstanceGC`: instances tagged for this cluster that no NodeClaim holds, launched over 30 s ago,
  are terminated (every 10 s for the first passes, then every 2 minutes);
* :class:`InterruptionQueue`: a thread long-polling ``INTERRUPTION_QUEUE`` (SQS); spot interruption
  warnings, AWS Health scheduled changes and instance state changes (stopping, stopped, shutting-down,
  terminated) become interruption messages (the NodeClaim is deleted and replaced before the instance goes;
  a spot interruption also marks its offering unavailable); a rebalance recommendation is an Event
  (SpotRebalanceRecommendation) on the NodeClaim and its Node, and nothing else. Every message is deleted
  once handed over (unparseable ones too); each is counted on /metrics with upstream's
  ``karpenter_interruption_*`` names;
* :class:`LaunchTemplateGC`, :class:`InstanceProfileGC`: launch templates unused for a minute, and instance
  profiles of EC2NodeClasses that are gone, are deleted; the NodeClass's finalizer
  (``karpenter.k8s.aws/termination``) deletes its own once no NodeClaim uses it;
* :class:`TaggingController`: ``Name`` and ``karpenter.sh/nodeclaim`` on the instance once its Node registers;
* :class:`CapacityBlockExpiration`: NodeClaims in a capacity block that ends within 40 minutes are deleted
  (drained and replaced) before EC2 reclaims the instances, every minute;
* :class:`CapacityTypeSync`: a reserved NodeClaim whose instance EC2 reports in no reservation any more is
  relabelled on-demand (and its Node), every minute.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from ...api.nodeclass import ec2_kubelet_parse_error
from ...controllers.lifecycle import set_condition
from ...kube import errors as E
from ...runtime.events import ref
from ..provider import NodeClaimNotFoundError
from .. import aws as static
from .. import kubelet_cel
from .clients import error_message, is_not_found
from .nodeclass import CONDITIONS, FINALIZER, NodeClassResolver, capacity_block_expiring, hash_annotations
from .provider import TAG_CLUSTER_NAME, TAG_NODECLAIM, EC2CloudProvider, instance_id_of

TAGGED = "karpenter.k8s.aws/tagged"
CLUSTER_NAME_TAGGED = "compatibility.karpenter.k8s.aws/cluster-name-tagged"

REQUEUE = 60.0
GC_AFTER = 30.0


class NodeClassController:
    name = "nodeclass.status"
    periodic = True

    def __init__(self, mgr: Any, api: Any, resolver: NodeClassResolver, clock: Any, recorder: Any, log: Any,
                 provider: EC2CloudProvider | None = None, isolated_vpc: bool = False):
        self.mgr, self.api, self.resolver, self.clock, self.recorder, self.log = mgr, api, resolver, clock, recorder, log
        self.provider, self.isolated_vpc = provider, isolated_vpc

    def setup(self, mgr: Any) -> None:
        mgr.watch("EC2NodeClass", lambda etype, obj, old: mgr.enqueue(self, obj["metadata"]["name"]))

    def reconcile(self, name: str) -> float | None:
        nc = self.mgr.get("EC2NodeClass", name)
        if nc is None:
            return None
        if nc["metadata"].get("deletionTimestamp"):
            return self.finalize(nc)
        finalizers = list(nc["metadata"].get("finalizers") or ())
        if FINALIZER not in finalizers:
            self.api.patch("EC2NodeClass", name, {"metadata": {"finalizers": [*finalizers, FINALIZER],
                                                               "resourceVersion": nc["metadata"].get("resourceVersion")}})
        res = self.resolver.resolve(nc)
        status = res.status
        self._validate_kubelet_expressions(nc, status, res.conditions)
        now = self.clock.now()
        for ctype in CONDITIONS:
            value, reason, message = res.conditions.get(ctype, ("Unknown", "AwaitingReconciliation", ""))
            set_condition(status, ctype, value, now, reason=reason, message=message or "")
        bad = [f"{t}={res.conditions.get(t, ('Unknown',))[0]}" for t in CONDITIONS if res.conditions.get(t, ("Unknown",))[0] != "True"]
        set_condition(status, "Ready", "False" if bad else "True", now,
                      reason="UnhealthyDependents" if bad else "Ready", message=", ".join(bad) if bad else "")
        for etype, reason, message in res.events:
            self.recorder.publish(ref(nc), reason, message, etype, dedupe=300.0)
            self.log.error("failed resolving nodeclass", controller=self.name, EC2NodeClass={"name": name}, error=message)
        ann = hash_annotations(nc)
        if any((nc["metadata"].get("annotations") or {}).get(k) != v for k, v in ann.items()):
            self.api.patch("EC2NodeClass", name, {"metadata": {"annotations": ann}})
        if status != (nc.get("status") or {}):
            self.api.patch("EC2NodeClass", name, {"status": status}, subresource="status")
            if not bad:
                self.log.info("nodeclass ready", controller=self.name, EC2NodeClass={"name": name},
                              subnets=len(status.get("subnets") or ()), amis=[a["id"] for a in status.get("amis") or ()])
        return REQUEUE

    def _validate_kubelet_expressions(self, nc: dict, status: dict, cond: dict) -> None:
        """Upstream's validation of ``spec.kubelet``, ahead of the other checks: a configuration that cannot be
        decoded (InvalidKubeletConfiguration), or a CEL expression while the gate NodeClassCEL is off
        (KubeletExpressionsDisabled), leaves ValidationSucceeded False, so nothing launches from the NodeClass.
        With the gate on each expression must compile (KubeletExpressionInvalid) and, once the other conditions
        hold, evaluate for every instance type (KubeletExpressionEvaluationFailed)."""
        raw = (nc.get("spec") or {}).get("kubelet")
        bad = ec2_kubelet_parse_error(raw)
        if bad is not None:
            cond["ValidationSucceeded"] = ("False", "InvalidKubeletConfiguration", f"parsing spec.kubelet, {bad}")
            return
        gates = self.provider.gates if self.provider is not None else {}
        if not gates.get(kubelet_cel.GATE):
            if kubelet_cel.has_expressions(raw):
                cond["ValidationSucceeded"] = ("False", "KubeletExpressionsDisabled",
                                               "spec.kubelet contains a CEL expression, but the NodeClassCEL feature "
                                               "gate is disabled")
            return
        kubelet = raw or {}
        fields = [("spec.kubelet.maxPods", kubelet["maxPods"])] if isinstance(kubelet.get("maxPods"), str) else []
        for key in ("kubeReserved", "systemReserved"):
            fields += [(f"spec.kubelet.{key}[{k}]", v) for k, v in static.reserved_expressions(kubelet.get(key)).items()]
        for field, expression in fields:
            try:
                kubelet_cel.validate(expression)
            except kubelet_cel.KubeletExpressionError as e:
                cond["ValidationSucceeded"] = ("False", "KubeletExpressionInvalid", f"validating {field}: {e}")
                return
        if not fields or cond.get("ValidationSucceeded", ("Unknown",))[0] != "True" or self.provider is None:
            return
        try:
            self.provider.types.list({**nc, "status": status}, gates=self.provider.gates, strict=True)
        except kubelet_cel.KubeletExpressionError as e:
            cond["ValidationSucceeded"] = ("False", "KubeletExpressionEvaluationFailed", str(e))

    def finalize(self, nc: dict) -> float | None:
        """Upstream's termination: wait for the NodeClaims that use the NodeClass, then delete its instance
        profiles and launch templates and let it go."""
        name = nc["metadata"]["name"]
        finalizers = list(nc["metadata"].get("finalizers") or ())
        if FINALIZER not in finalizers:
            return None
        using = sorted(c["metadata"]["name"] for c in self.mgr.list("NodeClaim")
                       if ((c.get("spec") or {}).get("nodeClassRef") or {}).get("name") == name
                       and ((c.get("spec") or {}).get("nodeClassRef") or {}).get("kind", "EC2NodeClass") == "EC2NodeClass")
        if using:
            self.recorder.publish(ref(nc), "WaitingOnNodeClaimTermination",
                                  f"Waiting on NodeClaim termination for {', '.join(using[:5])}"
                                  + (f" and {len(using) - 5} other(s)" if len(using) > 5 else ""), "Normal", dedupe=300.0)
            return 10.0
        try:
            if not (nc.get("spec") or {}).get("instanceProfile") and not self.isolated_vpc:
                for prof in self.resolver.instance_profiles(nc["metadata"].get("uid", "")):
                    self.resolver.delete_instance_profile(prof)
                    self.log.info("deleted instance profile", controller=self.name, EC2NodeClass={"name": name},
                                  **{"instance-profile": prof["InstanceProfileName"]})
            if self.provider is not None:
                for lt in self.provider.delete_launch_templates(name):
                    self.log.info("deleted launch template", controller=self.name, EC2NodeClass={"name": name},
                                  **{"launch-template": lt})
        except Exception as e:  # noqa: BLE001 - an Event, a log line and another try
            self.recorder.publish(ref(nc), "FailedCleanup", f"deleting the NodeClass's AWS resources: {error_message(e)}",
                                  "Warning", dedupe=300.0)
            self.log.error("failed cleaning up nodeclass", controller=self.name, EC2NodeClass={"name": name},
                           error=error_message(e))
            return 30.0
        self.api.patch("EC2NodeClass", name, {"metadata": {
            "finalizers": [f for f in finalizers if f != FINALIZER],
            "resourceVersion": nc["metadata"].get("resourceVersion")}})
        return None


class LaunchTemplateGC:
    """Launch templates karpy made for this cluster that no launch used for a minute are deleted (upstream's
    launch-template cache eviction). The first pass learns the templates that already exist (a restart)."""

    name = "launchtemplate.garbagecollection"
    periodic = True

    def __init__(self, mgr: Any, provider: EC2CloudProvider, log: Any, every: float = 60.0):
        self.mgr, self.provider, self.log, self.every = mgr, provider, log, every
        self.hydrated = False

    def setup(self, mgr: Any) -> None:
        mgr.requeue_after(self, "", 0.0)

    def reconcile(self, key: Any) -> float | None:
        if not self.hydrated:
            n = self.provider.hydrate_launch_templates()
            self.hydrated = True
            self.log.debug("hydrated launch template cache", controller=self.name, count=n)
            return self.every
        for lt in self.provider.collect_launch_templates():
            self.log.info("deleted launch template", controller=self.name, **{"launch-template": lt})
        return self.every


class InstanceProfileGC:
    """Instance profiles karpy made in this cluster whose EC2NodeClass no longer exists are deleted (the
    NodeClass went while karpy was not running, or its cleanup failed)."""

    name = "instanceprofile.garbagecollection"
    periodic = True

    def __init__(self, mgr: Any, resolver: NodeClassResolver, log: Any, every: float = 600.0):
        self.mgr, self.resolver, self.log, self.every = mgr, resolver, log, every

    def setup(self, mgr: Any) -> None:
        mgr.requeue_after(self, "", 30.0)

    def reconcile(self, key: Any) -> float | None:
        live = {nc["metadata"].get("uid") for nc in self.mgr.list("EC2NodeClass")}
        for prof in self.resolver.instance_profiles():
            uid = prof.get("Path", "").rstrip("/").rsplit("/", 1)[-1]
            if not uid or uid in live:
                continue
            try:
                self.resolver.delete_instance_profile(prof)
            except Exception as e:  # noqa: BLE001 - next pass
                self.log.error("failed deleting instance profile", controller=self.name,
                               **{"instance-profile": prof["InstanceProfileName"]}, error=error_message(e))
                continue
            self.log.info("deleted instance profile", controller=self.name,
                          **{"instance-profile": prof["InstanceProfileName"]})
        return self.every


class TaggingController:
    """Once a NodeClaim's Node has registered, its instance gets ``Name=<node name>``,
    ``karpenter.sh/nodeclaim=<nodeclaim>`` and ``eks:eks-cluster-name`` (only the tags it lacks), and the
    NodeClaim is annotated ``karpenter.k8s.aws/tagged: "true"`` so it is done once (upstream's tagging)."""

    name = "nodeclaim.tagging"

    def __init__(self, mgr: Any, api: Any, provider: EC2CloudProvider, cluster_name: str, log: Any, pause: float = 1.0):
        self.mgr, self.api, self.provider, self.cluster, self.log, self.pause = mgr, api, provider, cluster_name, log, pause
        self.next_call = 0.0  # CreateTags shares its rate limit with CreateFleet: at most one a second

    def setup(self, mgr: Any) -> None:
        def on_claim(etype: str, obj: dict, old: dict | None) -> None:
            if etype != "DELETED" and _taggable(obj):
                mgr.enqueue(self, obj["metadata"]["name"])
        mgr.watch("NodeClaim", on_claim)

    def reconcile(self, name: str) -> float | None:
        claim = self.mgr.get("NodeClaim", name)
        if claim is None or not _taggable(claim) or not self.provider.serves((claim.get("spec") or {}).get("nodeClassRef")):
            return None
        st = claim["status"]
        wait = self.next_call - time.monotonic()
        if wait > 0:
            return wait
        try:
            added = self.provider.create_tags(st["providerID"], {"Name": st["nodeName"], TAG_NODECLAIM: name,
                                                                 TAG_CLUSTER_NAME: self.cluster})
        except NodeClaimNotFoundError:
            return None
        if added:
            self.log.debug("tagged instance", controller=self.name, NodeClaim={"name": name},
                           **{"provider-id": st["providerID"]}, tags=sorted(added))
        if added:
            self.next_call = time.monotonic() + self.pause
        self.api.patch("NodeClaim", name, {"metadata": {"annotations": {TAGGED: "true", CLUSTER_NAME_TAGGED: "true"}}})
        return None


def _taggable(claim: dict) -> bool:
    meta = claim.get("metadata") or {}
    ann = meta.get("annotations") or {}
    st = claim.get("status") or {}
    return not (ann.get(TAGGED) == "true" and ann.get(CLUSTER_NAME_TAGGED) == "true") and bool(st.get("nodeName")) \
        and bool(st.get("providerID")) and not meta.get("deletionTimestamp")


class InstanceGC:
    name = "instance.garbagecollection"
    periodic = True

    def __init__(self, mgr: Any, api: Any, provider: EC2CloudProvider, log: Any):
        self.mgr, self.api, self.provider, self.log = mgr, api, provider, log
        self.passes = 0
        self.started = False

    def setup(self, mgr: Any) -> None:
        def kick(etype: str, obj: dict, old: dict | None) -> None:
            if not self.started:
                self.started = True
                mgr.requeue_after(self, "", 10.0)
        mgr.watch("NodeClaim", kick)

    def reconcile(self, key: Any) -> float | None:
        claimed = {(c.get("status") or {}).get("providerID") for c in self.mgr.list("NodeClaim")}
        now = time.time()
        for inst in self.provider.list():
            pid = inst["status"]["providerID"]
            launched = inst.get("launchTime")
            age = now - launched.timestamp() if hasattr(launched, "timestamp") else GC_AFTER
            if pid in claimed or inst["metadata"].get("deletionTimestamp") or age < GC_AFTER:
                continue
            try:
                self.provider.delete(inst)
            except Exception as e:  # noqa: BLE001 - next pass
                self.log.error("failed garbage collecting instance", controller=self.name, error=str(e))
                continue
            self.log.info("garbage collected cloudprovider instance", controller=self.name, **{"provider-id": pid})
            for node in self.mgr.list("Node"):
                if (node.get("spec") or {}).get("providerID") == pid:
                    try:
                        self.api.delete("Node", node["metadata"]["name"])
                    except Exception:  # noqa: BLE001 - already gone
                        pass
        self.passes += 1
        return 10.0 if self.passes < 20 else 120.0


class CapacityBlockExpiration:
    """Every minute, the capacity reservations EC2NodeClass NodeClaims were launched into are read again; a NodeClaim
    in a capacity block within 40 minutes of its end is deleted, so its pods move before EC2 ends the instance
    (upstream's capacityreservation.expiration)."""

    name = "capacityreservation.expiration"
    periodic = True

    def __init__(self, mgr: Any, api: Any, clients: Any, log: Any, every: float = 60.0):
        self.mgr, self.api, self.c, self.log, self.every = mgr, api, clients, log, every

    def setup(self, mgr: Any) -> None:
        mgr.watch("NodeClaim", lambda etype, obj, old: None)  # read from the cache each pass
        mgr.requeue_after(self, "", 0.0)

    def reconcile(self, key: Any) -> float | None:
        import datetime as dt

        claims = [c for c in self.mgr.list("NodeClaim")
                  if ((c.get("spec") or {}).get("nodeClassRef") or {}).get("kind") == "EC2NodeClass"
                  and (c["metadata"].get("labels") or {}).get(static.LABEL_CAPACITY_RESERVATION_ID)]
        ids = sorted({c["metadata"]["labels"][static.LABEL_CAPACITY_RESERVATION_ID] for c in claims})
        now = dt.datetime.now(dt.timezone.utc)
        expiring: set[str] = set()
        for rid in ids:  # one query per ID, as upstream: an ID EC2 no longer knows fails only its own query
            try:
                for page in self.c.ec2.get_paginator("describe_capacity_reservations").paginate(
                        CapacityReservationIds=[rid]):
                    expiring.update(r["CapacityReservationId"] for r in page.get("CapacityReservations") or ()
                                    if capacity_block_expiring(r, now))
            except Exception as e:  # noqa: BLE001 - the next pass tries again
                if not is_not_found(e):
                    self.log.error("getting capacity reservations", controller=self.name, error=error_message(e),
                                   **{"capacity-reservation-id": rid})
        for c in claims:
            rid = c["metadata"]["labels"][static.LABEL_CAPACITY_RESERVATION_ID]
            if rid not in expiring or c["metadata"].get("deletionTimestamp"):
                continue
            try:
                self.api.delete("NodeClaim", c["metadata"]["name"])
            except E.NotFound:
                continue
            except Exception as e:  # noqa: BLE001 - the next pass tries again
                self.log.error("deleting nodeclaim", controller=self.name, error=str(e),
                               NodeClaim={"name": c["metadata"]["name"]})
                continue
            self.log.info("initiating delete for capacity block expiration", controller=self.name,
                          NodeClaim={"name": c["metadata"]["name"]}, **{"capacity-reservation-id": rid})
        return self.every


class CapacityTypeSync:
    """Every minute, a ``reserved`` NodeClaim whose instance EC2 now reports in no reservation (an on-demand capacity
    reservation ended and the instance runs on) becomes ``on-demand``, without the reservation ID and type labels, and
    so does its registered Node (upstream's capacityreservation.capacitytype). Nothing is promoted to reserved."""

    name = "capacityreservation.capacitytype"
    periodic = True
    RESERVATION_LABELS = (static.LABEL_CAPACITY_RESERVATION_ID, static.LABEL_CAPACITY_RESERVATION_TYPE)

    def __init__(self, mgr: Any, api: Any, provider: EC2CloudProvider, log: Any, every: float = 60.0):
        self.mgr, self.api, self.provider, self.log, self.every = mgr, api, provider, log, every

    def setup(self, mgr: Any) -> None:
        for kind in ("NodeClaim", "Node"):  # read from the cache each pass
            mgr.watch(kind, lambda etype, obj, old: None)
        mgr.requeue_after(self, "", 0.0)

    def _demote(self, kind: str, obj: dict) -> bool:
        patch = {"metadata": {"labels": {"karpenter.sh/capacity-type": "on-demand",
                                         **{k: None for k in self.RESERVATION_LABELS}}}}
        try:
            self.api.patch(kind, obj["metadata"]["name"], patch)
        except E.NotFound:
            return False
        return True

    def reconcile(self, key: Any) -> float | None:
        try:
            listed = self.provider.list()
        except Exception as e:  # noqa: BLE001 - the next pass tries again
            self.log.error("listing instances", controller=self.name, error=error_message(e))
            return self.every
        on_demand = {c["status"]["providerID"] for c in listed
                     if c["metadata"]["labels"].get("karpenter.sh/capacity-type") == "on-demand"}
        reserved_nodes: dict[str, list[dict]] = {}
        for node in self.mgr.list("Node"):
            labels = node["metadata"].get("labels") or {}
            # registered Nodes only: an unregistered one gets its labels from the NodeClaim when it registers
            if labels.get("karpenter.sh/capacity-type") == "reserved" and labels.get("karpenter.sh/registered") == "true" \
                    and not node["metadata"].get("deletionTimestamp"):
                reserved_nodes.setdefault((node.get("spec") or {}).get("providerID") or "", []).append(node)
        updated = []
        for nc in self.mgr.list("NodeClaim"):
            pid = (nc.get("status") or {}).get("providerID")
            if pid not in on_demand or nc["metadata"].get("deletionTimestamp"):
                continue
            if (nc["metadata"].get("labels") or {}).get("karpenter.sh/capacity-type") == "reserved" and \
                    self._demote("NodeClaim", nc):
                updated.append(nc["metadata"]["name"])
            for node in reserved_nodes.get(pid, ()):
                if self._demote("Node", node) and nc["metadata"]["name"] not in updated:
                    updated.append(nc["metadata"]["name"])
        if updated:
            self.log.debug("updated capacity type for nodeclaims", controller=self.name,
                           NodeClaims=[{"name": n} for n in updated])
        return self.every


def _queued_for(m: dict) -> float | None:
    """Seconds the message waited in the queue (from SQS's SentTimestamp, in milliseconds)."""
    try:
        return max(0.0, time.time() - int((m.get("Attributes") or {})["SentTimestamp"]) / 1000.0)
    except (KeyError, ValueError, TypeError):
        return None


def parse_message(body: str) -> tuple[str, list[str], dict] | None:
    """An EventBridge envelope -> (kind, instance ids, detail); None for what karpy does not act on."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("version") != "0":
        return None
    src, dtype, detail = doc.get("source"), doc.get("detail-type"), doc.get("detail") or {}
    if src == "aws.ec2" and dtype == "EC2 Spot Instance Interruption Warning":
        return "spot_interrupted", [detail.get("instance-id", "")], detail
    if src == "aws.ec2" and dtype == "EC2 Instance Rebalance Recommendation":
        return "rebalance_recommendation", [detail.get("instance-id", "")], detail
    if src == "aws.ec2" and dtype == "EC2 Instance State-change Notification":
        state = detail.get("state")
        if state in ("stopping", "stopped"):
            return "instance_stopped", [detail.get("instance-id", "")], detail
        if state in ("shutting-down", "terminated"):
            return "instance_terminated", [detail.get("instance-id", "")], detail
        return None
    if src == "aws.health" and dtype == "AWS Health Event":
        if detail.get("service") == "EC2" and detail.get("eventTypeCategory") == "scheduledChange":
            return "scheduled_change", [e.get("entityValue", "") for e in detail.get("affectedEntities") or ()], detail
    return None


class InterruptionQueue:
    """Long-polls the SQS queue on a thread and hands interruptions to the provider."""

    def __init__(self, clients: Any, queue: str, provider: EC2CloudProvider, mgr: Any, log: Any, recorder: Any = None,
                 wait_seconds: int = 20):
        self.c, self.queue, self.provider, self.mgr, self.log = clients, queue, provider, mgr, log
        self.recorder = recorder
        self.wait_seconds = wait_seconds
        self.stop_event = threading.Event()
        self.url: str | None = None
        self.counts: dict[str, int] = {}
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name="interruption", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - logged, retried after a pause
                self.log.error("failed receiving interruption messages", controller="interruption", queue=self.queue,
                               error=str(e))
                self.url = None
                self.stop_event.wait(10)

    def poll(self) -> int:
        if self.url is None:
            self.url = self.c.sqs.get_queue_url(QueueName=self.queue)["QueueUrl"]
        msgs = self.c.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10, VisibilityTimeout=20,
                                          WaitTimeSeconds=self.wait_seconds, AttributeNames=["SentTimestamp"],
                                          MessageAttributeNames=["All"]).get("Messages", [])
        for m in msgs:
            parsed = parse_message(m.get("Body", ""))
            kind = parsed[0] if parsed else "no_op"
            self.counts[kind] = self.counts.get(kind, 0) + 1
            # karpy controller's /metrics counts these records (karpenter_interruption_*)
            self.log.debug("received interruption queue message", controller="interruption", message_type=kind,
                           unlogged={"queue_seconds": _queued_for(m)})
            if kind == "rebalance_recommendation":
                self.rebalance(parsed[1])  # type: ignore[index]
            elif parsed is not None:
                self.handle(*parsed)
            else:
                self.log.info("ignoring interruption message", controller="interruption", body=m.get("Body", "")[:200])
            self.c.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"])
            self.log.debug("deleted interruption queue message", controller="interruption", message_type=kind)
        return len(msgs)

    def rebalance(self, ids: list[str]) -> None:
        """A rebalance recommendation is an Event on the NodeClaim and its Node, nothing more (as upstream)."""
        if self.recorder is None:
            return
        claims = {instance_id_of((c.get("status") or {}).get("providerID") or ""): c for c in self.mgr.list("NodeClaim")}
        for iid in ids:
            claim = claims.get(iid)
            if claim is None:
                continue
            node = self.mgr.get("Node", (claim.get("status") or {}).get("nodeName") or "") if \
                (claim.get("status") or {}).get("nodeName") else None
            for obj in (claim, node):
                if obj is not None:
                    self.recorder.publish(ref(obj), "SpotRebalanceRecommendation",
                                          "Spot rebalance recommendation was triggered", "Normal", dedupe=300.0)

    def handle(self, kind: str, ids: list[str], detail: dict) -> None:
        claims = {instance_id_of((c.get("status") or {}).get("providerID") or ""): c for c in self.mgr.list("NodeClaim")}
        for iid in ids:
            claim = claims.get(iid)
            if claim is None:
                continue
            labels = claim["metadata"].get("labels") or {}
            self.provider.push_interruption({
                "kind": "SpotInterruption" if kind == "spot_interrupted" else "InstanceStopping",
                "providerID": claim["status"]["providerID"], "instanceType": labels.get("node.kubernetes.io/instance-type", ""),
                "zone": labels.get("topology.kubernetes.io/zone", ""),
                "capacityType": labels.get("karpenter.sh/capacity-type", ""), "reason": kind})
            self.log.info("received interruption message", controller="interruption", messageKind=kind,
                          NodeClaim={"name": claim["metadata"]["name"]}, instance=iid)


def build_aws(settings: Any, api: Any, mgr: Any, clock: Any, recorder: Any, log: Any,
              ssm_root: str = "/aws/service") -> tuple[EC2CloudProvider, list, list]:
    """The provider, its controllers and its background workers (each with start/stop)."""
    import os

    from .clients import Clients
    from .instancetypes import InstanceTypes

    aws = settings.aws
    clients = Clients()
    clients.check_credentials()
    ssm_root = os.environ.get("KARPY_AWS_SSM_ROOT", ssm_root)  # tests only: moto reserves /aws for itself
    facts: dict[str, Any] = {}

    def cluster() -> dict:
        if not facts:
            desc: dict = {}
            try:
                desc = clients.eks.describe_cluster(name=aws.cluster_name)["cluster"]
            except Exception as e:  # noqa: BLE001 - not EKS, or no eks:DescribeCluster: the settings must say
                log.warn("failed describing cluster", controller="cloudprovider", cluster=aws.cluster_name, error=str(e))
            net = desc.get("kubernetesNetworkConfig") or {}
            facts.update(endpoint=aws.cluster_endpoint or desc.get("endpoint", ""),
                         ca=aws.cluster_ca_bundle or (desc.get("certificateAuthority") or {}).get("data", ""),
                         cidr=net.get("serviceIpv4Cidr") or net.get("serviceIpv6Cidr"),
                         version=desc.get("version") or "1.33", dns=None)
            try:
                facts["dns"] = ((api.get("Service", "kube-dns", "kube-system") or {}).get("spec") or {}).get("clusterIP")
            except Exception:  # noqa: BLE001 - no kube-dns: the AMI's default
                pass
        return facts

    its = InstanceTypes(clients, clients.region, aws.isolated_vpc, aws.reserved_enis, aws.vm_memory_overhead_percent,
                        log=lambda msg, **kv: log.error(msg, controller="pricing", **kv))
    try:
        its.refresh()
    except Exception as e:  # noqa: BLE001 - AccessDenied, no endpoint: exit 2 naming it
        from .clients import ProviderConfigError, error_message

        raise ProviderConfigError(f"cannot list EC2 instance types in {clients.region}: {error_message(e)}") from None
    provider = EC2CloudProvider(clients, aws, its, lambda kind, name: mgr.get(kind, name), cluster, recorder=recorder, log=log)
    resolver = NodeClassResolver(clients, aws.cluster_name, lambda: cluster()["version"], ssm_root,
                                 lambda: cluster()["cidr"])
    provider.reservations = resolver.reservation_capacity  # the status pass counts, launches take places
    provider.reserved_capacity = bool(settings.feature_gates.get("ReservedCapacity", True))  # as upstream, on by default
    provider.gates = {**settings.feature_gates,  # AWS_FEATURE_GATES NodeClassCEL, or --feature-gates
                      "NodeClassCEL": aws.node_class_cel or bool(settings.feature_gates.get("NodeClassCEL"))}
    provider.overlays = lambda: mgr.list("NodeOverlay")  # prices for unpriced types (gate NodeOverlay)
    controllers = [NodeClassController(mgr, api, resolver, clock, recorder, log, provider, aws.isolated_vpc),
                   InstanceGC(mgr, api, provider, log), LaunchTemplateGC(mgr, provider, log),
                   TaggingController(mgr, api, provider, aws.cluster_name, log),
                   CapacityBlockExpiration(mgr, api, clients, log), CapacityTypeSync(mgr, api, provider, log)]
    if not aws.isolated_vpc:  # as upstream: no IAM instance-profile garbage collection in an isolated VPC
        controllers.append(InstanceProfileGC(mgr, resolver, log))
    workers = []
    if aws.interruption_queue:
        workers.append(InterruptionQueue(clients, aws.interruption_queue, provider, mgr, log, recorder,
                                         wait_seconds=int(os.environ.get("KARPY_AWS_SQS_WAIT", "20"))))
    log.info("discovered region", controller="cloudprovider", region=clients.region,
             instanceTypes=len(its.infos), prices=its.on_demand_source)
    return provider, controllers, workers
