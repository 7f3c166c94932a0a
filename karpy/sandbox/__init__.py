"""``karpy sandbox``: a Kubernetes API server over a simulated cluster running in real time.

* :mod:`.runtime`: the simulated world and Karpenter on a real-time clock;
* :mod:`.rest`: Kubernetes REST semantics over the in-memory store;
* :mod:`.server`: the HTTP transport;
* :mod:`.discovery`, :mod:`.tables`, :mod:`.crds`: discovery and OpenAPI
  documents, server-side Table output, the installed CRDs;
* :mod:`.cli`: the ``karpy sandbox`` command.
"""
