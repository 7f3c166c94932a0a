"""autoscaling.x-k8s.io/v1beta1 CapacityBuffer (upstream Karpenter v1.14's copy of the Cluster Autoscaler API),
and the core ``v1`` PodTemplate a buffer may name.

A CapacityBuffer keeps room for pods that do not exist yet: ``replicas`` chunks shaped like a PodTemplate's
pod (``podTemplateRef``) or like a workload's pods (``scalableRef``: a Deployment, ReplicaSet or
StatefulSet of ``apps``), as many as ``replicas``, ``percentage`` of the workload's replicas (rounded up, at
least 1) -- the larger of the two -- capped by what fits in ``limits`` (or only what fits in ``limits``
when neither is set). With the ``CapacityBuffer`` feature gate on, karpy's ``capacitybuffer`` controller
(``karpy/controllers/capacitybuffer.py``) resolves it into its status and the provisioner schedules that
many virtual pods with the pending pods, so Karpenter launches room for them and keeps it.

What the CRD checks (as upstream's ``autoscaling.x-k8s.io_capacitybuffers.yaml``): ``spec`` is required;
``podTemplateRef.name``, ``scalableRef.kind`` and ``scalableRef.name`` are required and not empty;
``replicas`` and ``percentage`` are not negative; a ``podTemplateRef`` needs ``replicas`` or ``limits``;
``podTemplateRef`` and ``scalableRef`` are not both set. ``provisioningStrategy`` defaults to
``buffer.x-k8s.io/active-capacity``.
"""

from __future__ import annotations

from .core import _template
from .meta import object_meta
from .nodepool import conditions
from .schema import cel, int32, int64, obj, quantity_map, string

GROUP = "autoscaling.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta1"
KIND = "CapacityBuffer"
ACTIVE_CAPACITY = "buffer.x-k8s.io/active-capacity"
SCALABLE_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")

_LOCAL_REF = obj({"name": string(min_len=1, description="The name of the referent.")}, required=("name",),
                 description="A reference to an object in the same namespace.")

SPEC = obj(
    {
        "provisioningStrategy": string(default=ACTIVE_CAPACITY,
                                       description="How the buffer is used; buffer.x-k8s.io/active-capacity "
                                                   "provisions room for its virtual pods."),
        "podTemplateRef": _LOCAL_REF,
        "scalableRef": obj(
            {
                "apiGroup": string(description="The API group of the referent; empty for the core group."),
                "kind": string(min_len=1, description="The kind of the referent."),
                "name": string(min_len=1, description="The name of the referent."),
            },
            required=("kind", "name"),
            description="A workload with a scale subresource whose pods the buffer is shaped like.",
        ),
        "replicas": int32(minimum=0, description="How many chunks to keep room for."),
        "percentage": int32(minimum=0, description="Chunks as a percentage of the scalableRef's replicas, "
                                                   "rounded up, at least 1."),
        "limits": quantity_map(description="Resource totals the chunks' requests may not exceed."),
    },
    rules=(
        cel(lambda s: "podTemplateRef" not in s or "replicas" in s or "limits" in s,
            "If podTemplateRef is set, replicas or limits must also be set",
            "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)"),
        cel(lambda s: not ("podTemplateRef" in s and "scalableRef" in s),
            "You must define either PodTemplateRef or ScalableRef, but not both",
            "!(has(self.podTemplateRef) && has(self.scalableRef))"),
    ),
    description="CapacityBufferSpec: the shape and the number of the chunks to keep room for.",
)

STATUS = obj(
    {
        "podTemplateRef": _LOCAL_REF,
        "replicas": int32(description="The number of chunks resolved."),
        "podTemplateGeneration": int64(description="The generation of the PodTemplate resolved."),
        "conditions": conditions("ReadyForProvisioning, Provisioning."),
        "provisioningStrategy": string(description="The strategy observed."),
    },
    description="CapacityBufferStatus: the observed state of the buffer.",
)

CAPACITYBUFFER = obj(
    {"apiVersion": string(), "kind": string(), "metadata": object_meta(), "spec": SPEC,
     "status": obj(preserve=True)},
    required=("spec",),
)

POD_TEMPLATE = obj(
    {"apiVersion": string(), "kind": string(), "metadata": object_meta(), "template": _template()},
)

