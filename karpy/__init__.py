"""karpy: Karpenter, the Kubernetes node autoprovisioner, in Python."""

__version__ = "0.1.0"
