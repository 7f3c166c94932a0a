"""Karpenter's controllers, written once for every way karpy runs.

Each controller reconciles through the Kubernetes API port (:mod:`karpy.kube`),
reads the informer cache and the cluster state (:mod:`karpy.state`), calls the
cloud provider (:mod:`karpy.cloudprovider.provider`) and takes time from the
injected clock. Decisions come from the pure engine (:mod:`karpy.scheduling`,
:mod:`karpy.provisioning`, :mod:`karpy.disruption`).

* :mod:`.provisioning` -- the pod and node triggers, the batcher and the provisioner;
* :mod:`.lifecycle` -- NodeClaim launch, registration, initialization, liveness and finalization;
* :mod:`.termination` -- the Node finalizer: taint, drain through the Eviction API, instance deletion;
* :mod:`.disruption` -- the disruption loop over the engine, and its orchestration queue;
* :mod:`.nodeclaim_disruption` -- the Drifted and Consolidatable conditions, and pod events;
* :mod:`.expiration`, :mod:`.interruption`, :mod:`.nodepool` -- expiry, interruption messages,
  NodePool counters, readiness and hash.

:func:`karpy.controllers.operator.build` wires them onto a manager.
"""
