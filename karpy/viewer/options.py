"""The viewer's options: flags, and defaults from a ``key=value`` file in the home directory.

``~/.karpy-viewer`` gives defaults under the flags' own names (``node-selector=aks-karpenter=demo``, ``#`` starts
a comment); so do ``~/.aks-node-viewer`` and ``~/.eks-node-viewer``, read first, so that a file written for those
viewers works as is (their keys karpy has no use for are skipped). A flag given on the command line wins.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

CONFIG_FILES = (".eks-node-viewer", ".aks-node-viewer", ".karpy-viewer")  # later files win
KEYS = ("kubeconfig", "context", "node-selector", "resources", "extra-labels", "node-sort", "style",
        "disable-pricing")
DEFAULT_STYLE = "#04B575,#FFFF00,#FF0000"  # good, ok, bad: eks-node-viewer's colours
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class OptionError(ValueError):
    """A bad option or config-file line: reported on stderr, exit status 2."""


@dataclass
class Options:
    kubeconfig: str | None = None
    context: str | None = None
    node_selector: str = ""
    resources: list[str] = field(default_factory=lambda: ["cpu"])
    extra_labels: list[str] = field(default_factory=list)
    node_sort: str = "creation"
    style: tuple[str, str, str] = tuple(DEFAULT_STYLE.split(","))  # type: ignore[assignment]
    disable_pricing: bool = False


def read_config(home: Path | None = None) -> dict[str, str]:
    """The defaults of the config files, later files over earlier ones."""
    home = home if home is not None else Path(os.path.expanduser("~"))
    out: dict[str, str] = {}
    for name in CONFIG_FILES:
        path = home / name
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise OptionError(f"{path}: {e.strerror or e}") from None
        ours = name == ".karpy-viewer"
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, eq, value = line.partition("=")
            key = key.strip().lstrip("-")
            if not eq:
                raise OptionError(f"{path}:{n}: expected key=value, got {line!r}")
            if key not in KEYS:
                if ours:
                    raise OptionError(f"{path}:{n}: unknown key {key!r}: known keys are {', '.join(KEYS)}")
                continue
            out[key] = value.strip()
    return out


def _split(value: str) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()]


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "t", "true", "yes", "on"):
        return True
    if v in ("0", "f", "false", "no", "off", ""):
        return False
    raise OptionError(f"{key}: {value!r} is not a boolean (true or false)")


def resolve(flags: dict[str, object], home: Path | None = None) -> Options:
    """Options from the flags given (None: not given) over the config files' defaults; OptionError if bad."""
    cfg = read_config(home)

    def pick(key: str) -> object:
        v = flags.get(key.replace("-", "_"))
        return v if v is not None else cfg.get(key)

    o = Options()
    o.kubeconfig = pick("kubeconfig") or None  # type: ignore[assignment]
    o.context = pick("context") or None  # type: ignore[assignment]
    o.node_selector = str(pick("node-selector") or "")
    if o.node_selector:
        from ..kube import errors as E
        from ..kube.selectors import label_requirements

        try:
            label_requirements(o.node_selector)
        except E.ApiError as e:
            raise OptionError(f"--node-selector: {e}") from None
    resources = pick("resources")
    if resources is not None:
        o.resources = _split(str(resources))
        if not o.resources:
            raise OptionError("--resources: at least one resource name is required (cpu, memory, pods, ...)")
        for r in o.resources:
            if not _RESOURCE_NAME.match(r):
                raise OptionError(f"--resources: {r!r} is not a resource name (cpu, memory, pods, "
                                  "ephemeral-storage, nvidia.com/gpu, ...)")
    labels = pick("extra-labels")
    if labels is not None:
        o.extra_labels = _split(str(labels))
    sort = pick("node-sort")
    if sort is not None:
        from .model import parse_sort

        try:
            parse_sort(str(sort))
        except ValueError as e:
            raise OptionError(f"--node-sort: {e}") from None
        o.node_sort = str(sort)
    style = pick("style")
    if style is not None:
        o.style = _style(str(style))
    dp = pick("disable-pricing")
    if isinstance(dp, bool):
        o.disable_pricing = dp
    elif dp is not None:
        o.disable_pricing = _bool("disable-pricing", str(dp))
    return o


def _style(value: str) -> tuple[str, str, str]:
    from rich.color import Color, ColorParseError

    parts = [x.strip() for x in value.split(",")]
    if len(parts) != 3:
        raise OptionError(f"--style: {value!r}: three colours are required: GOOD,OK,BAD (e.g. {DEFAULT_STYLE})")
    for p in parts:
        try:
            Color.parse(p)
        except ColorParseError:
            raise OptionError(f"--style: {p!r} is not a colour (#RRGGBB or a colour name)") from None
    return parts[0], parts[1], parts[2]
