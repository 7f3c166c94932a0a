"""What ``karpy controller`` says, once, about how its credentials travel to the API server.

A bearer token (or a password, or what an exec or auth plugin hands out) sent
over plain HTTP to a server off this machine crosses the network readable by
anyone on the path; with TLS verification off (``insecure-skip-tls-verify``)
whoever answers in the server's place receives it. Neither is refused -- a
test cluster may be set up so on purpose -- but each is logged as a warning
at start, once.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _credentials(user: Any) -> str | None:
    """The kind of credential sent with every request, if any (client certificates only travel inside TLS)."""
    if user is None:
        return None
    if getattr(user, "token", None) or getattr(user, "token_file", None):
        return "bearer token"
    if getattr(user, "password", None):
        return "password"
    if getattr(user, "exec", None) or getattr(user, "auth_provider", None):
        return "plugin credentials"
    return None


def credential_warnings(config: Any) -> list[tuple[str, dict[str, Any]]]:
    """(message, values) of each warning the configuration calls for."""
    cluster = getattr(config, "cluster", None)
    server = str(getattr(cluster, "server", "") or "")
    creds = _credentials(getattr(config, "user", None))
    if not server or creds is None:
        return []
    url = urlsplit(server)
    out = []
    if url.scheme == "http" and not _is_loopback(url.hostname or ""):
        out.append(("credentials are sent to the API server in clear text (plain HTTP, not loopback)",
                    {"server": server, "credentials": creds}))
    if url.scheme == "https" and getattr(cluster, "insecure", False):
        out.append(("TLS verification of the API server is off (insecure-skip-tls-verify): credentials may go to "
                    "whoever answers", {"server": server, "credentials": creds}))
    return out
