"""The Kubernetes API port: what karpy's controllers and the simulated world talk to.

:mod:`karpy.kube.port` defines the interface (get, list, watch, create, update,
patch, delete, evict, status); :mod:`karpy.kube.memory` implements it as an
in-memory API server (the one ``karpy simulate`` and ``karpy sandbox`` run);
a client of a real API server implements the same interface for
``karpy controller``.
"""
