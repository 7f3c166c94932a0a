"""``karpy viewer``: a terminal view of a cluster's nodes, their use and their price, and of Karpenter's
decisions, live (any kubeconfig, ``karpy sandbox`` included) or replaying a ``karpy simulate -o json`` result.

Layers: :mod:`.model` (snapshot to frame, pure), :mod:`.prices`, :mod:`.live` and :mod:`.replay` (the sources),
:mod:`.render` (Rich renderables and the ``--once`` outputs), :mod:`.app` (the interactive Textual screen),
:mod:`.cli` (the command).
"""
