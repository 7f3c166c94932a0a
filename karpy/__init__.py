"""karpy: Karpenter, the Kubernetes node autoprovisioner, in Python."""

__version__ = "0.1.0"


def version() -> str:
    """The version ``karpy --version`` shows: with the commit a container image was built from, if it was."""
    from ._build import COMMIT

    return f"{__version__} (commit {COMMIT})" if COMMIT else __version__
