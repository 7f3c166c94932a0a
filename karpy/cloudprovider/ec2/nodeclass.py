"""EC2NodeClass status, as upstream's nodeclass controller resolves it.

Subnets and security groups from their selector terms (tags, ids, names), AMIs from ``amiSelectorTerms``
(aliases through SSM, ids, names, owners, tags), the instance profile from ``role`` (created under
``/karpenter/<region>/<cluster>/<uid>/``, tagged, role attached) or ``instanceProfile``, then validation
(restricted tags, the AL2023 service CIDR, a RunInstances dry run). Conditions and reasons are upstream's:
``SubnetsReady`` (SubnetsNotFound), ``SecurityGroupsReady`` (SecurityGroupsNotFound), ``AMIsReady``
(AMINotFound, UnsupportedAlias), ``InstanceProfileReady``, ``ValidationSucceeded`` (TagValidationFailed,
RunInstancesAuthCheckFailed, ClusterCIDRNotFound; the controller adds the ``spec.kubelet`` reasons
InvalidKubeletConfiguration, KubeletExpressionsDisabled, KubeletExpressionInvalid and
KubeletExpressionEvaluationFailed) and ``Ready``. An AWS error (AccessDenied, throttling past the
retries) is the condition's reason and message, never a crash.

The NodeClass is annotated with karpy's own static hash (``karpenter.k8s.aws/ec2nodeclass-hash``) under
hash version ``karpy-v1``: a NodeClaim launched by upstream Karpenter carries another version, so taking a
cluster over never counts as drift.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ...disruption.drift import nodeclass_hash
from ..aws import ami_family_name
from .clients import error_code, error_message, is_not_found, is_unauthorized

HASH_ANNOTATION = "karpenter.k8s.aws/ec2nodeclass-hash"
HASH_VERSION_ANNOTATION = "karpenter.k8s.aws/ec2nodeclass-hash-version"
HASH_VERSION = "karpy-v1"
FINALIZER = "karpenter.k8s.aws/termination"
CONDITIONS = ("AMIsReady", "SubnetsReady", "SecurityGroupsReady", "InstanceProfileReady", "CapacityReservationsReady",
              "ValidationSucceeded")
EXPIRING_WITHIN = 40 * 60.0  # seconds before its end a reservation is "expiring" (no new launches)
RESTRICTED_TAGS = (re.compile(r"^kubernetes\.io/cluster/[0-9A-Za-z][A-Za-z0-9\-_]*$"),
                   re.compile(r"^karpenter\.sh/nodepool$"), re.compile(r"^eks:eks-cluster-name$"),
                   re.compile(r"^karpenter\.k8s\.aws/ec2nodeclass$"), re.compile(r"^karpenter\.sh/nodeclaim$"))
ARCH = {"x86_64": "amd64", "arm64": "arm64"}
LABEL_ARCH = "kubernetes.io/arch"
GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
ACCEL_COUNT = "karpenter.k8s.aws/instance-accelerator-count"


@dataclass
class Resolution:
    """What one pass resolved: the new status, the conditions' (status, reason, message), and Events."""

    status: dict
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def _filters_for(terms: list[dict], id_filter: str, name_filter: str | None) -> list[list[dict]]:
    """One filter set per term, ids of all terms in one set (upstream's grouping)."""
    sets: list[list[dict]] = []
    ids = [t["id"] for t in terms if t.get("id")]
    if ids:
        sets.append([{"Name": id_filter, "Values": ids}])
    names = [t["name"] for t in terms if t.get("name") and name_filter]
    if names:
        sets.append([{"Name": name_filter, "Values": names}])
    for t in terms:
        tags = t.get("tags") or {}
        if tags and not t.get("id") and not t.get("name"):
            sets.append([{"Name": "tag-key", "Values": [k]} if v == "*" else {"Name": f"tag:{k}", "Values": [str(v)]}
                         for k, v in sorted(tags.items())])
    return sets


def alias_paths(alias: str, k8s: str, root: str = "/aws/service") -> list[tuple[str, list[dict]]]:
    """The SSM parameters of an AMI alias, each with the requirements its image satisfies."""
    family, _, version = alias.partition("@")
    family = family.lower()
    version = version or "latest"
    std = [{"key": GPU_COUNT, "operator": "DoesNotExist"}, {"key": ACCEL_COUNT, "operator": "DoesNotExist"}]
    out: list[tuple[str, list[dict]]] = []

    def arch(a: str) -> dict:
        return {"key": LABEL_ARCH, "operator": "In", "values": [ARCH[a]]}

    if family == "al2023":
        for a, variant, extra in (("x86_64", "standard", std), ("arm64", "standard", std),
                                  ("x86_64", "nvidia", [{"key": GPU_COUNT, "operator": "Exists"}]),
                                  ("arm64", "nvidia", [{"key": GPU_COUNT, "operator": "Exists"}]),
                                  ("x86_64", "neuron", [{"key": ACCEL_COUNT, "operator": "Exists"}])):
            leaf = "recommended" if version == "latest" else f"amazon-eks-node-al2023-{a}-{variant}-{k8s}-{version}"
            out.append((f"{root}/eks/optimized-ami/{k8s}/amazon-linux-2023/{a}/{variant}/{leaf}/image_id",
                        [arch(a), *extra]))
    elif family == "al2":
        for a, suffix, extra in (("x86_64", "", std), ("arm64", "-arm64", std),
                                 ("x86_64", "-gpu", [{"key": GPU_COUNT, "operator": "Exists"}])):
            leaf = "recommended" if version == "latest" else f"amazon-eks{suffix}-node-{k8s}-{version}"
            out.append((f"{root}/eks/optimized-ami/{k8s}/amazon-linux-2{suffix}/{leaf}/image_id", [arch(a), *extra]))
    elif family == "bottlerocket":
        ver = version.lstrip("v")
        for a, suffix, extra in (("x86_64", "", std), ("arm64", "", std),
                                 ("x86_64", "-nvidia", [{"key": GPU_COUNT, "operator": "Exists"}]),
                                 ("arm64", "-nvidia", [{"key": GPU_COUNT, "operator": "Exists"}])):
            out.append((f"{root}/bottlerocket/aws-k8s-{k8s}{suffix}/{a}/{ver}/image_id", [arch(a), *extra]))
    return out


def instance_profile_name(cluster: str, region: str, nodeclass: dict) -> str:
    """A stable name per (region, NodeClass name, uid), as upstream derives it (with karpy's digest)."""
    meta = nodeclass.get("metadata") or {}
    digest = hashlib.sha256(f"{region}/{meta.get('name')}/{meta.get('uid', '')}".encode()).hexdigest()[:20]
    return f"{cluster}_{int(digest, 16)}"[:128]


def profile_path(region: str, cluster: str, uid: str) -> str:
    return f"/karpenter/{region}/{cluster}/{uid}/"


def reservation_end(r: dict) -> Any:
    """A DescribeCapacityReservations entry's EndDate as an aware datetime, or None."""
    import datetime as dt

    end = r.get("EndDate")
    if isinstance(end, str):
        end = dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
    return end


def capacity_block_expiring(r: dict, now: Any) -> bool:
    """As upstream, only a capacity block expires (its instances end with it): in its last 40 minutes nothing new
    launches into it and its NodeClaims are deleted; an on-demand reservation with an end date stays active."""
    end = reservation_end(r)
    return r.get("ReservationType") == "capacity-block" and end is not None and \
        (end - now).total_seconds() <= EXPIRING_WITHIN


class NodeClassResolver:
    """Resolves EC2NodeClass status against the account (``clients``: :class:`~.clients.Clients`)."""

    def __init__(self, clients: Any, cluster_name: str, k8s_version: Callable[[], str],
                 ssm_root: str = "/aws/service", cluster_cidr: Callable[[], str | None] | None = None):
        self.c = clients
        self.cluster = cluster_name
        self.k8s_version = k8s_version
        self.ssm_root = ssm_root
        self.cluster_cidr = cluster_cidr or (lambda: None)
        self.reservation_capacity: dict[str, int] = {}  # capacity reservation id -> instances it can still take

    # --- each dependency --------------------------------------------------------------------------
    def subnets(self, nc: dict) -> list[dict]:
        found: dict[str, dict] = {}
        for filters in _filters_for(_spec(nc).get("subnetSelectorTerms") or [], "subnet-id", None):
            for s in self.c.ec2.describe_subnets(Filters=filters).get("Subnets", []):
                found[s["SubnetId"]] = s
        ordered = sorted(found.values(), key=lambda s: (-int(s.get("AvailableIpAddressCount") or 0), s["SubnetId"]))
        return [{"id": s["SubnetId"], "zone": s["AvailabilityZone"], "zoneID": s.get("AvailabilityZoneId", "")}
                for s in ordered]

    def security_groups(self, nc: dict) -> list[dict]:
        found: dict[str, dict] = {}
        for filters in _filters_for(_spec(nc).get("securityGroupSelectorTerms") or [], "group-id", "group-name"):
            for g in self.c.ec2.describe_security_groups(Filters=filters).get("SecurityGroups", []):
                found[g["GroupId"]] = g
        return [{"id": g["GroupId"], "name": g.get("GroupName", "")} for g in sorted(found.values(), key=lambda g: g["GroupId"])]

    def amis(self, nc: dict) -> list[dict]:
        """One AMI per distinct requirement set: the newest (then the larger name)."""
        candidates: list[tuple[dict, list[dict]]] = []
        for term in _spec(nc).get("amiSelectorTerms") or []:
            if term.get("alias"):
                ids: dict[str, list[dict]] = {}
                for path, reqs in alias_paths(term["alias"], self.k8s_version(), self.ssm_root):
                    try:
                        value = self.c.ssm.get_parameter(Name=path)["Parameter"]["Value"]
                    except Exception as e:  # noqa: BLE001 - a missing parameter is skipped, as upstream
                        if is_not_found(e):
                            continue
                        raise
                    ids[value] = reqs
                if ids:
                    for img in self._images([{"Name": "image-id", "Values": sorted(ids)}], None):
                        candidates.append((img, ids[img["ImageId"]]))
                continue
            filters, owners = [], None
            if term.get("id"):
                filters.append({"Name": "image-id", "Values": [term["id"]]})
            if term.get("ssmParameter"):
                value = self.c.ssm.get_parameter(Name=term["ssmParameter"])["Parameter"]["Value"]
                filters.append({"Name": "image-id", "Values": [value]})
            if term.get("name"):
                filters.append({"Name": "name", "Values": [term["name"]]})
                owners = [term["owner"]] if term.get("owner") else ["self", "amazon"]
            elif term.get("owner"):
                owners = [term["owner"]]
            for k, v in sorted((term.get("tags") or {}).items()):
                filters.append({"Name": "tag-key", "Values": [k]} if v == "*" else {"Name": f"tag:{k}", "Values": [str(v)]})
            if not filters and not owners:
                continue
            for img in self._images(filters, owners):
                arch = ARCH.get(img.get("Architecture", ""))
                if arch:
                    candidates.append((img, [{"key": LABEL_ARCH, "operator": "In", "values": [arch]}]))
        best: dict[str, tuple[dict, list[dict]]] = {}
        for img, reqs in candidates:
            key = repr(sorted((r["key"], r["operator"], tuple(r.get("values") or ())) for r in reqs))
            cur = best.get(key)
            rank = (img.get("CreationDate", ""), img.get("Name", ""))
            if cur is None or rank > (cur[0].get("CreationDate", ""), cur[0].get("Name", "")):
                best[key] = (img, reqs)
        out = [{"id": img["ImageId"], "name": img.get("Name", ""),
                "requirements": sorted(reqs, key=lambda r: (len(r["key"]), r["key"]))}
               for img, reqs in best.values()]
        return sorted(out, key=lambda a: (a["requirements"][0].get("values") or [""], a["id"]))

    def _images(self, filters: list[dict], owners: list[str] | None) -> list[dict]:
        kwargs: dict[str, Any] = {"Filters": [*filters, {"Name": "state", "Values": ["available"]}]}
        if owners:
            kwargs["Owners"] = owners
        return self.c.ec2.describe_images(**kwargs).get("Images", [])

    def instance_profile(self, nc: dict, current: str | None) -> str:
        spec = _spec(nc)
        if spec.get("instanceProfile"):
            return str(spec["instanceProfile"])
        role = str(spec.get("role") or "")
        meta = nc.get("metadata") or {}
        name = current or instance_profile_name(self.cluster, self.c.region, nc)
        iam = self.c.iam
        try:
            prof = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except Exception as e:  # noqa: BLE001
            if not is_not_found(e):
                raise
            tags = {**{str(k): str(v) for k, v in (spec.get("tags") or {}).items()},
                    f"kubernetes.io/cluster/{self.cluster}": "owned", "eks:eks-cluster-name": self.cluster,
                    "karpenter.k8s.aws/ec2nodeclass": meta.get("name", ""),
                    "topology.kubernetes.io/region": self.c.region}
            prof = iam.create_instance_profile(
                InstanceProfileName=name, Path=profile_path(self.c.region, self.cluster, meta.get("uid", "")),
                Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())])["InstanceProfile"]
        roles = [r["RoleName"] for r in prof.get("Roles") or ()]
        if roles == [role.split("/")[-1]]:
            return name
        for r in roles:
            iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=r)
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role.split("/")[-1])
        return name

    def capacity_reservations(self, nc: dict) -> list[dict]:
        """Active reservations the selector terms match (one query per id term, one per other term), as
        upstream's status lists them; their free instance counts go to :attr:`reservation_capacity`."""
        import datetime as dt

        found: dict[str, dict] = {}
        for term in _spec(nc).get("capacityReservationSelectorTerms") or []:
            kw: dict[str, Any] = {"Filters": [{"Name": "state", "Values": ["active"]}]}
            if term.get("id"):
                kw["CapacityReservationIds"] = [term["id"]]
            else:
                if term.get("ownerID"):
                    kw["Filters"].append({"Name": "owner-id", "Values": [term["ownerID"]]})
                if term.get("instanceMatchCriteria"):
                    kw["Filters"].append({"Name": "instance-match-criteria", "Values": [term["instanceMatchCriteria"]]})
                for k, v in sorted((term.get("tags") or {}).items()):
                    kw["Filters"].append({"Name": "tag-key", "Values": [k]} if v == "*" else
                                         {"Name": f"tag:{k}", "Values": [str(v)]})
            try:
                for page in self.c.ec2.get_paginator("describe_capacity_reservations").paginate(**kw):
                    for r in page.get("CapacityReservations") or ():
                        found[r["CapacityReservationId"]] = r
            except Exception as e:
                if not (term.get("id") and is_not_found(e)):
                    raise
                # as upstream: a reservation ID EC2 does not know selects nothing (the rest still resolve)
        now = dt.datetime.now(dt.timezone.utc)
        out = []
        for r in sorted(found.values(), key=lambda r: r["CapacityReservationId"]):
            end = reservation_end(r)
            if end is not None and end <= now:
                continue
            expiring = capacity_block_expiring(r, now)
            self.reservation_capacity[r["CapacityReservationId"]] = int(r.get("AvailableInstanceCount") or 0)
            item = {"id": r["CapacityReservationId"], "instanceType": r.get("InstanceType", ""),
                    "availabilityZone": r.get("AvailabilityZone", ""), "ownerID": r.get("OwnerId", ""),
                    "instanceMatchCriteria": r.get("InstanceMatchCriteria", "open"),
                    "reservationType": "capacity-block" if r.get("ReservationType") == "capacity-block" else "default",
                    "state": "expiring" if expiring else "active"}
            if end is not None:
                item["endTime"] = end.strftime("%Y-%m-%dT%H:%M:%SZ")
            out.append(item)
        return out

    def instance_profiles(self, uid: str = "") -> list[dict]:
        """The instance profiles karpy made in this cluster (of one NodeClass when ``uid`` is given)."""
        prefix = profile_path(self.c.region, self.cluster, uid) if uid else f"/karpenter/{self.c.region}/{self.cluster}/"
        out: list[dict] = []
        for page in self.c.iam.get_paginator("list_instance_profiles").paginate(PathPrefix=prefix):
            out.extend(page.get("InstanceProfiles") or ())
        return out

    def delete_instance_profile(self, prof: dict) -> None:
        """Detach its roles and delete it (already gone is fine)."""
        name = prof["InstanceProfileName"]
        try:
            for r in prof.get("Roles") or ():
                self.c.iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=r["RoleName"])
            self.c.iam.delete_instance_profile(InstanceProfileName=name)
        except Exception as e:  # noqa: BLE001
            if not is_not_found(e):
                raise

    # --- the pass ---------------------------------------------------------------------------------
    def resolve(self, nc: dict) -> Resolution:
        status = dict(nc.get("status") or {})
        res = Resolution(status)
        cond = res.conditions

        def attempt(ctype: str, fn: Callable[[], Any]) -> Any:
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - an AWS failure is a condition, an Event and a log line
                code = error_code(e)
                reason = "Unauthorized" if is_unauthorized(e) else (code or type(e).__name__)
                msg = f"{error_message(e)}"
                cond[ctype] = ("False" if is_unauthorized(e) or isinstance(e, _Terminal) else "Unknown", reason, msg)
                res.events.append(("Warning", "FailedResolving", f"{ctype}: {reason}: {msg}"))
                return None

        amis = attempt("AMIsReady", lambda: self._checked_amis(nc))
        if amis is not None:
            status["amis"] = amis
            cond["AMIsReady"] = ("True", "AMIsReady", "") if amis else \
                ("False", "AMINotFound", "AMISelector did not match any AMIs")
        subnets = attempt("SubnetsReady", lambda: self.subnets(nc))
        if subnets is not None:
            status["subnets"] = subnets
            cond["SubnetsReady"] = ("True", "SubnetsReady", "") if subnets else \
                ("False", "SubnetsNotFound", "SubnetSelector did not match any Subnets")
        sgs = attempt("SecurityGroupsReady", lambda: self.security_groups(nc))
        if sgs is not None:
            status["securityGroups"] = sgs
            cond["SecurityGroupsReady"] = ("True", "SecurityGroupsReady", "") if sgs else \
                ("False", "SecurityGroupsNotFound", "SecurityGroupSelector did not match any SecurityGroups")
        if _spec(nc).get("capacityReservationSelectorTerms"):
            crs = attempt("CapacityReservationsReady", lambda: self.capacity_reservations(nc))
            if crs is not None:
                status["capacityReservations"] = crs
                cond["CapacityReservationsReady"] = ("True", "CapacityReservationsReady", "")
        else:
            status.pop("capacityReservations", None)
            cond["CapacityReservationsReady"] = ("True", "CapacityReservationsReady", "")
        prof = attempt("InstanceProfileReady", lambda: self.instance_profile(nc, status.get("instanceProfile")))
        if prof is not None:
            status["instanceProfile"] = prof
            cond["InstanceProfileReady"] = ("True", "InstanceProfileReady", "")
        cond["ValidationSucceeded"] = self.validate(nc, status, cond)
        return res

    def _checked_amis(self, nc: dict) -> list[dict]:
        for term in _spec(nc).get("amiSelectorTerms") or []:
            alias = str(term.get("alias") or "")
            if alias.lower().startswith("al2@"):
                major, _, minor = self.k8s_version().partition(".")
                if (int(major or 0), int(minor or 0)) >= (1, 33):
                    raise _Terminal("UnsupportedAlias", f"AL2 is not supported on Kubernetes {self.k8s_version()}")
        return self.amis(nc)

    def validate(self, nc: dict, status: dict, cond: dict) -> tuple[str, str, str]:
        spec = _spec(nc)
        for k in spec.get("tags") or {}:
            if any(p.match(str(k)) for p in RESTRICTED_TAGS):
                return ("False", "TagValidationFailed", f'tag "{k}" is restricted (karpy sets it itself)')
        if any(cond.get(t, ("Unknown",))[0] != "True" for t in CONDITIONS if t != "ValidationSucceeded"):
            return ("Unknown", "DependenciesNotReady", "waiting on the other conditions")
        if ami_family_name(nc) == "AL2023" and not self.cluster_cidr():
            return ("False", "ClusterCIDRNotFound", "the cluster's service CIDR is unknown: eks:DescribeCluster failed")
        amis, subnets = status.get("amis") or [], status.get("subnets") or []
        try:
            self.c.ec2.run_instances(DryRun=True, MinCount=1, MaxCount=1, ImageId=amis[0]["id"],
                                     InstanceType="m5.large", SubnetId=subnets[0]["id"],
                                     IamInstanceProfile={"Name": status.get("instanceProfile", "")},
                                     SecurityGroupIds=[g["id"] for g in status.get("securityGroups") or ()])
        except Exception as e:  # noqa: BLE001
            code = error_code(e)
            if code == "DryRunOperation":
                return ("True", "ValidationSucceeded", "")
            if is_unauthorized(e):
                return ("False", "RunInstancesAuthCheckFailed", error_message(e))
            return ("Unknown", code or "ValidationFailed", error_message(e))
        return ("True", "ValidationSucceeded", "")


class _Terminal(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.response = {"Error": {"Code": code, "Message": message}}


def hash_annotations(nc: dict) -> dict[str, str]:
    return {HASH_ANNOTATION: nodeclass_hash(nc), HASH_VERSION_ANNOTATION: HASH_VERSION}


def _spec(nc: dict) -> dict:
    return nc.get("spec") or {}
