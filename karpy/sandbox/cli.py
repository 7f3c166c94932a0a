"""``karpy sandbox``: a Kubernetes API server in one process, holding a simulated cluster.

See ``../shared/contract/controller.md`` (section ``karpy sandbox``).
"""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
import re
import signal
import sys
import threading
import traceback

import click

CONTEXT = "karpy-sandbox"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def kubeconfig_text(url: str, *, token: str | None = None, ca_file: str | None = None,
                    ca_pem: bytes | None = None, client_cert_pem: bytes | None = None,
                    client_key_pem: bytes | None = None) -> str:
    import base64

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    cluster: dict = {"server": url}
    if ca_file:
        with open(ca_file, "rb") as f:
            ca_pem = f.read()
    if ca_pem:
        cluster["certificate-authority-data"] = b64(ca_pem)
    user: dict = {"token": token} if token else {}
    if client_cert_pem and client_key_pem:
        user["client-certificate-data"] = b64(client_cert_pem)
        user["client-key-data"] = b64(client_key_pem)
    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": user}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
        "current-context": CONTEXT,
    }
    return json.dumps(doc, indent=2) + "\n"  # JSON is YAML; every kubeconfig reader takes it


def _write_kubeconfig(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


@click.command("sandbox")
@click.argument("paths", nargs=-1)
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=6443, show_default=True, type=int, help="Port to listen on (0: any free port).")
@click.option("--kubeconfig", "kubeconfig", default="karpy-sandbox.kubeconfig", show_default=True,
              help="Where to write a kubeconfig for the sandbox (context karpy-sandbox).")
@click.option("--speed", default=1.0, show_default=True, type=float,
              help="How many times faster than real time the simulated clock runs.")
@click.option("--no-karpenter", "no_karpenter", is_flag=True,
              help="Run the simulated cluster without Karpenter's controllers (for karpy controller or another client).")
@click.option("--karpenter-namespace", "karpenter_namespace", default="karpenter", show_default=True,
              help="Namespace of the Deployment and Pod that stand for Karpenter (kubectl logs reads its lines there).")
@click.option("--region", default=None, help="Region of the cloud catalog (default: per provider).")
@click.option("--plain-http", "plain_http", is_flag=True,
              help="Serve plain HTTP instead of HTTPS with a generated certificate (loopback only).")
@click.option("--tls-cert", "tls_cert", default=None, help="TLS certificate (required off loopback).")
@click.option("--tls-key", "tls_key", default=None, help="TLS private key (required off loopback).")
@click.option("--token-file", "token_file", default=None, help="File holding the bearer token clients must send.")
@click.option("--log-level", "log_level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warn", "error"]), help="Level of Karpenter's logs (stdout).")
@click.option("--watch-history", "watch_history", default=None, type=int, hidden=True,
              help="Watch events kept per kind (older resourceVersions answer 410 Gone).")
@click.option("--handshake-timeout", "handshake_timeout", default=None, type=float, hidden=True,
              help="Seconds a client has to complete the TLS handshake (default 10).")
@click.option("--read-timeout", "read_timeout", default=None, type=float, hidden=True,
              help="Seconds a client has to send a request's headers, and then its body (default 32, 60).")
@click.option("--write-timeout", "write_timeout", default=None, type=float, hidden=True,
              help="Seconds one write to a client may take before the connection is dropped (default 60).")
@click.option("--max-connections", "max_connections", default=None, type=int, hidden=True,
              help="Connections open at once (default 1024).")
@click.option("--max-requests-inflight", "max_inflight", default=None, type=int, hidden=True,
              help="Reads served at once, watches aside (default 400, kube-apiserver's).")
@click.option("--max-mutating-requests-inflight", "max_mutating", default=None, type=int, hidden=True,
              help="Writes served at once (default 200, kube-apiserver's).")
def sandbox(paths: tuple[str, ...], address: str, port: int, kubeconfig: str, speed: float, no_karpenter: bool,
            karpenter_namespace: str, region: str | None, plain_http: bool, tls_cert: str | None, tls_key: str | None,
            token_file: str | None,
            log_level: str, watch_history: int | None, handshake_timeout: float | None, read_timeout: float | None,
            write_timeout: float | None, max_connections: int | None, max_inflight: int | None,
            max_mutating: int | None) -> None:
    """Serve a Kubernetes API over a simulated cluster (with Karpenter), applying the manifests in PATH... first."""
    if not (speed > 0) or speed > 1e6:
        _fail(f"--speed: Invalid value: {speed}: must be greater than 0")
    if not 0 <= port <= 65535:
        _fail(f"--port: Invalid value: {port}: must be between 0 and 65535")
    for flag, value in (("--handshake-timeout", handshake_timeout), ("--read-timeout", read_timeout),
                        ("--write-timeout", write_timeout), ("--max-connections", max_connections),
                        ("--max-requests-inflight", max_inflight), ("--max-mutating-requests-inflight", max_mutating)):
        if value is not None and not value > 0:
            _fail(f"{flag}: Invalid value: {value}: must be greater than 0")
    if not _DNS_LABEL.fullmatch(karpenter_namespace):
        _fail(f"--karpenter-namespace: Invalid value: {json.dumps(karpenter_namespace)}: a lowercase RFC 1123 label "
              "must consist of lower case alphanumeric characters or '-', start and end with an alphanumeric "
              "character, and be at most 63 characters")
    if region is not None and not region.strip():
        _fail('--region: Invalid value: "": must not be empty')
    if bool(tls_cert) != bool(tls_key):
        _fail("--tls-cert and --tls-key go together")
    if plain_http and not is_loopback(address):
        _fail(f"--plain-http: serves loopback only (127.0.0.1, ::1, localhost), not --address {address}; off "
              "loopback the sandbox requires TLS and a token (--tls-cert, --tls-key, --token-file)")
    if plain_http and tls_cert:
        _fail("--plain-http and --tls-cert/--tls-key exclude each other")
    if not is_loopback(address) and not (tls_cert and tls_key and token_file):
        _fail(f"--address {address}: off loopback the sandbox requires TLS and a token (--tls-cert, --tls-key, "
              "--token-file)")
    token = None
    if token_file:
        try:
            with open(token_file) as f:
                token = f.read().strip()
        except OSError as e:
            _fail(f"--token-file: {e}")
        if not token:
            _fail("--token-file: the file is empty")
    for p in (tls_cert, tls_key):
        if p and not os.path.isfile(p):
            _fail(f"{p}: no such file")

    from ..api.loader import load_documents

    documents = []
    if paths:
        try:
            loaded = load_documents(list(paths))
        except Exception:  # the loader reports bad input itself; anything else is ours
            traceback.print_exc()
            sys.exit(1)
        if loaded.errors:
            for e in loaded.errors:
                click.echo(f"error: {e}", err=True)
            sys.exit(2)
        from ..simulator.inputs import check_regions, check_size

        problems = check_regions(loaded.documents, region) + check_size(loaded.documents)
        if problems:
            for p in problems:
                click.echo(f"error: {p}", err=True)
            sys.exit(2)
        documents = loaded.documents

    from .rest import RestAPI
    from .runtime import Sandbox
    from .server import HTTPServer, Limits

    certs = None
    ca_pem = None
    if not tls_cert and not plain_http:  # loopback: HTTPS with a CA of this run, as kind does
        from .tls import generate

        certs = generate(address)
        atexit.register(certs.remove)
        tls_cert, tls_key = certs.cert_file, certs.key_file
        ca_pem = certs.ca_pem.decode()
    elif tls_cert:
        with open(tls_cert) as f:
            ca_pem = f.read()
    box = Sandbox(documents, region=region, speed=speed, karpenter=not no_karpenter, log_level=log_level,
                  log_stream=sys.stdout, watch_history=watch_history, ca_pem=ca_pem,
                  karpenter_namespace=karpenter_namespace)
    rest = RestAPI(box.api, box.lock, box.clock, ca_pem=ca_pem, service_ips=box.service_ips)
    rest.log_source = box.log_source
    if certs is not None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes

        rest.client_cert_sha256 = x509.load_pem_x509_certificate(certs.client_cert_pem).fingerprint(hashes.SHA256()).hex()
    limits = Limits()
    if handshake_timeout:
        limits.handshake_timeout = handshake_timeout
    if read_timeout:
        limits.header_timeout = limits.idle_timeout = limits.body_timeout = read_timeout
    if write_timeout:
        limits.write_timeout = write_timeout
    if max_connections:
        limits.max_connections = max_connections
    if max_inflight:
        limits.max_requests_inflight = max_inflight
    if max_mutating:
        limits.max_mutating_requests_inflight = max_mutating
    try:
        server = HTTPServer(rest, address, port, tls_cert=tls_cert, tls_key=tls_key, token=token, limits=limits)
    except ssl_errors() as e:
        _fail(f"--tls-cert/--tls-key: {e}")
    except OSError as e:
        _fail(f"cannot listen on {address}:{port}: {e.strerror or e}")
    rest.server_address = f"{address}:{server.port}"
    box.serve_on(server.port)
    if certs is not None:
        text = kubeconfig_text(server.url, token=token, ca_pem=certs.ca_pem, client_cert_pem=certs.client_cert_pem,
                               client_key_pem=certs.client_key_pem)
    else:
        text = kubeconfig_text(server.url, token=token, ca_file=tls_cert)
    _write_kubeconfig(kubeconfig, text)

    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ANN001
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    box.start()
    server.start()
    click.echo(f"karpy sandbox: serving on {server.url} (kubeconfig {kubeconfig}, context {CONTEXT}, "
               f"speed {speed:g}x{', without Karpenter' if no_karpenter else ''})", err=True)
    while not stop.wait(0.5):
        pass
    click.echo("karpy sandbox: stopping", err=True)
    server.stop()
    box.stop()
    if certs is not None:
        certs.remove()
    sys.stdout.flush()
    sys.exit(0)


def ssl_errors() -> tuple[type[BaseException], ...]:
    import ssl

    return (ssl.SSLError,)
