"""The HTTP transport of ``karpy sandbox``: the standard library's ``ThreadingHTTPServer``.

Why the standard library and not aiohttp or another framework: the work per
request is a dictionary lookup in the in-memory store under one lock, the
clients are a handful of kubectl and controller connections, and watches are
long-lived streams that a thread per connection serves simply (a blocking
wait on the watch queue). ``ThreadingHTTPServer`` speaks HTTP/1.1 with
keep-alive, which is all kubectl, client-go and the Python client need, and it
adds no dependency (nor an event loop that the single-threaded controllers
would have to be bridged into).

Watches are sent with ``Transfer-Encoding: chunked``, one JSON event per line,
flushed as they happen. Off loopback the server requires TLS and a bearer token
(``Authorization: Bearer <token>``) on every request but the health checks.

With TLS the listening socket stays a plain one: ``accept()`` on the serving
thread only takes the connection, and the handshake runs in that connection's
own thread with a deadline (:data:`HANDSHAKE_TIMEOUT`), so a client that
connects and says nothing (or says it slowly) holds up its own connection and
nobody else's.
"""

from __future__ import annotations

import hmac
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .rest import RestAPI, Response

HEALTH = ("/healthz", "/livez", "/readyz")
HANDSHAKE_TIMEOUT = 10.0  # seconds a client has to complete the TLS handshake


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], rest: RestAPI, token: str | None, family: int,
                 ssl_context: ssl.SSLContext | None = None, handshake_timeout: float = HANDSHAKE_TIMEOUT):
        self.address_family = family
        self.rest = rest
        self.token = token
        self.ssl_context = ssl_context
        self.handshake_timeout = handshake_timeout
        super().__init__(addr, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Runs in the connection's thread: the TLS handshake (with its deadline), then the HTTP exchanges."""
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        try:
            request.settimeout(self.handshake_timeout)
            conn = self.ssl_context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        except OSError:
            return
        try:
            conn.do_handshake()
            conn.settimeout(None)  # watches stay open as long as the client wants
        except (OSError, ValueError):  # a timeout, a client that does not trust the CA, plain HTTP on the port
            _close(conn)
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            _close(conn)  # wrap_socket took over the accepted socket: shutdown_request cannot close it


def _close(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        conn.close()
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and the client's
    # delayed ACK hold every answer back about 40 ms
    disable_nagle_algorithm = True
    server_version = "karpy-sandbox"
    sys_version = ""
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _body(self) -> bytes:
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            out = bytearray()
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None or self.path.split("?", 1)[0] in HEALTH:
            return True
        got = self.headers.get("Authorization") or ""
        return got.startswith("Bearer ") and hmac.compare_digest(got[7:].strip(), token)

    def _dispatch(self) -> None:
        body = self._body()
        if not self._authorized():
            self._send(Response(401, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": "Unauthorized", "reason": "Unauthorized", "code": 401}))
            return
        try:
            resp = self.server.rest.handle(self.command, self.path, self.headers, body)
        except Exception as e:  # noqa: BLE001 - a bug of ours must not kill the connection thread silently
            import traceback

            traceback.print_exc(file=sys.stderr)
            resp = Response(500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": f"internal error: {type(e).__name__}: {e}", "reason": "InternalError",
                                  "code": 500})
        if resp.stream is not None:
            self._stream(resp)
        else:
            self._send(resp)

    def send_response(self, code: int, message: str | None = None) -> None:
        """The status line, Date and an Audit-Id, as kube-apiserver's Go server sends them (no Server header)."""
        import uuid

        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Date", self.date_time_string())

    def _send(self, resp: Response) -> None:
        data = resp.payload()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in resp.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _stream(self, resp: Response) -> None:
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()
        gen = resp.stream
        try:
            for chunk in gen:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        finally:
            close = getattr(gen, "close", None)
            if close is not None:
                close()
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch


class HTTPServer:
    """The listening socket and its serving thread."""

    def __init__(self, rest: RestAPI, address: str, port: int, *, tls_cert: str | None = None,
                 tls_key: str | None = None, token: str | None = None,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        ctx = None
        if tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(tls_cert, tls_key)
            ctx.set_alpn_protocols(["http/1.1"])  # clients that offer h2 (Node.js, Go) settle on HTTP/1.1
        self.httpd = _Server((address, port), rest, token, family, ctx, handshake_timeout)
        self.tls = ctx is not None
        self.rest = rest
        self.address = address
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="karpy-sandbox-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.rest.stopping.set()
        self.rest.stop_watches()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
