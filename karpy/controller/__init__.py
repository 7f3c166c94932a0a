"""``karpy controller``: Karpenter against a real Kubernetes API server (see process.py)."""
