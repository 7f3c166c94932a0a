"""The HTTP transport of ``karpy sandbox``: the standard library's ``ThreadingHTTPServer``, hardened.

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

One client must not be able to stall the others, so (see :class:`Limits`):

* the serving thread only accepts connections; each connection gets a thread
  of its own, where its TLS handshake runs, and at most ``max_connections``
  are open at once (past that a new connection is closed at once);
* every wait on the client has a deadline, kept by one watchdog thread that
  shuts a connection down once its deadline passes: the TLS handshake
  (10 s), the request line and headers (32 s, kube-apiserver's
  ``ReadHeaderTimeout``; 90 s for the next request of a kept-alive
  connection, its ``IdleTimeout``), the body (60 s) and every write of an
  answer or a watch event (60 s: a watcher that stops reading is dropped);
* the token is checked from the headers before any body is read, and bodies
  are capped at kube-apiserver's 3 MiB (413, without reading the rest);
* at most ``max_requests_inflight`` reads and ``max_mutating_requests_inflight``
  writes are served at once, as kube-apiserver's max-in-flight filter counts
  them (watches are long-running and not counted); past that the answer is its
  429 ``Too many requests, please try again later.`` with ``Retry-After: 1``.
"""

from __future__ import annotations

import hmac
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .rest import RestAPI, Response

HEALTH = ("/healthz", "/livez", "/readyz")
HANDSHAKE_TIMEOUT = 10.0  # seconds a client has to complete the TLS handshake
MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's MaxRequestBodyBytes
_READ_CHUNK = 64 * 1024
LINGER_SECONDS, LINGER_BYTES = 1.0, 256 * 1024


@dataclass
class Limits:
    """What one connection and all of them together may take (defaults: kube-apiserver's where it has one)."""

    handshake_timeout: float = HANDSHAKE_TIMEOUT
    header_timeout: float = 32.0  # the request line and headers of a connection's first request
    idle_timeout: float = 90.0  # waiting for (and reading the headers of) the next request on a kept-alive connection
    body_timeout: float = 60.0  # the whole body
    write_timeout: float = 60.0  # one write of an answer or of a watch event
    max_body_bytes: int = MAX_BODY_BYTES
    max_connections: int = 1024
    max_requests_inflight: int = 400  # kube-apiserver's --max-requests-inflight
    max_mutating_requests_inflight: int = 200  # and --max-mutating-requests-inflight


class _Conn:
    """One open connection as the watchdog sees it: the socket and the time by which its current wait must end."""

    __slots__ = ("sock", "deadline", "closed", "lock")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.deadline: float | None = None
        self.closed = False
        self.lock = threading.Lock()

    def expect(self, seconds: float | None) -> None:
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def kill(self) -> None:
        """Shut the connection down from another thread: the owner's blocked read or write returns at once.
        (The plain socket's shutdown, also under TLS: the owner's TLS read fails on the closed transport.)"""
        with self.lock:
            if self.closed:
                return
            try:
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            _close(self.sock)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a stop does not wait for connection threads (watches end with the stop anyway)
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], rest: RestAPI, token: str | None, family: int,
                 ssl_context: ssl.SSLContext | None = None, limits: Limits | None = None):
        self.address_family = family
        self.rest = rest
        self.token = token
        self.ssl_context = ssl_context
        self.limits = limits or Limits()
        self._conns: set[_Conn] = set()
        self._conns_lock = threading.Lock()
        self._inflight = {False: 0, True: 0}  # mutating? -> requests being served
        self._inflight_lock = threading.Lock()
        self._stop = threading.Event()
        super().__init__(addr, _Handler)
        self._watchdog = threading.Thread(target=self._watch_deadlines, name="karpy-sandbox-deadlines", daemon=True)
        self._watchdog.start()

    # --- connections ---------------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        """On the serving thread: only the count of open connections is checked before a thread takes over."""
        with self._conns_lock:
            full = len(self._conns) >= self.limits.max_connections
            if not full:
                conn = _Conn(request)
                self._conns.add(conn)
        if full:
            _close(request)
            return
        t = threading.Thread(target=self._serve_connection, args=(conn, client_address), daemon=True,
                             name="karpy-sandbox-conn")
        t.start()

    def _serve_connection(self, conn: _Conn, client_address: Any) -> None:
        try:
            if self.ssl_context is not None:
                conn.expect(self.limits.handshake_timeout)
                try:
                    tls = self.ssl_context.wrap_socket(conn.sock, server_side=True, do_handshake_on_connect=False)
                    conn.sock = tls  # wrap_socket took over the accepted socket's descriptor
                    tls.do_handshake()
                except (OSError, ValueError):  # a deadline, a client that does not trust the CA, plain HTTP
                    return
            conn.expect(None)
            handler = self.RequestHandlerClass(conn.sock, client_address, self, conn)
            if handler.unread_body:
                _linger(conn)
        except (OSError, ValueError):
            pass  # the client went away, or the watchdog shut the connection down
        except Exception:  # noqa: BLE001 - a bug of ours must not pass silently, nor kill the server
            import traceback

            traceback.print_exc(file=sys.stderr)
        finally:
            conn.close()
            with self._conns_lock:
                self._conns.discard(conn)

    def _watch_deadlines(self) -> None:
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._conns_lock:
                late = [c for c in self._conns if c.deadline is not None and now > c.deadline]
            for c in late:
                c.kill()

    def open_connections(self) -> int:
        with self._conns_lock:
            return len(self._conns)

    # --- requests in flight ------------------------------------------------------------------------------
    def admit(self, mutating: bool) -> bool:
        cap = self.limits.max_mutating_requests_inflight if mutating else self.limits.max_requests_inflight
        with self._inflight_lock:
            if cap > 0 and self._inflight[mutating] >= cap:
                return False
            self._inflight[mutating] += 1
            return True

    def release(self, mutating: bool) -> None:
        with self._inflight_lock:
            self._inflight[mutating] -= 1

    def stop_serving(self) -> None:
        self._stop.set()
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            c.kill()


def _linger(conn: _Conn) -> None:
    """After an answer sent without reading the request's body: stop sending, and take (and drop) what the client
    still sends for a moment, so that its network stack delivers the answer rather than a reset."""
    try:
        socket.socket.shutdown(conn.sock, socket.SHUT_WR)
        conn.expect(LINGER_SECONDS)
        taken = 0
        while taken < LINGER_BYTES:
            chunk = socket.socket.recv(conn.sock, 65536)
            if not chunk:
                break
            taken += len(chunk)
    except (OSError, ValueError):
        pass
    finally:
        conn.expect(None)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError):
        pass
    try:
        sock.close()
    except (OSError, ValueError):
        pass


class _TooLarge(Exception):
    pass


class _BadFraming(Exception):
    pass


def _status(code: int, reason: str, message: str, details: bool = False) -> Response:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason}
    if details:
        body["details"] = {}
    body["code"] = code
    return Response(code, body)


def _plain(code: int, text: str, headers: dict[str, str] | None = None) -> Response:
    """An answer as Go's ``http.Error`` writes it."""
    return Response(code, text + "\n", "text/plain; charset=utf-8",
                    headers={"X-Content-Type-Options": "nosniff", **(headers or {})})


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization`` header, read as kube-apiserver reads it (the scheme in any case)."""
    parts = header.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and the client's
    # delayed ACK hold every answer back about 40 ms
    disable_nagle_algorithm = True
    server_version = "karpy-sandbox"
    sys_version = ""
    server: _Server

    def __init__(self, request: Any, client_address: Any, server: _Server, conn: _Conn):
        self.conn = conn
        self._served = 0
        self.unread_body = False  # the connection ends with a body the client sent and nobody read
        super().__init__(request, client_address, server)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def handle_one_request(self) -> None:
        limits = self.server.limits
        self.conn.expect(limits.idle_timeout if self._served else limits.header_timeout)
        self._served += 1
        super().handle_one_request()
        self.conn.expect(None)

    # --- the body ------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        """The body, within the size cap and the body deadline."""
        limit = self.server.limits.max_body_bytes
        chunked = (self.headers.get("Transfer-Encoding") or "").lower() == "chunked"
        n = 0
        if not chunked:
            raw = (self.headers.get("Content-Length") or "").strip()
            try:
                n = int(raw) if raw else 0
            except ValueError:
                raise _BadFraming() from None
            if n < 0:
                raise _BadFraming()
            if n > limit:
                raise _TooLarge()
        self.conn.expect(self.server.limits.body_timeout)
        try:
            if (self.headers.get("Expect") or "").lower() == "100-continue":
                self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.conn.expect(self.server.limits.body_timeout)
            return self._chunked(limit) if chunked else self._read(n)
        finally:
            self.conn.expect(None)

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.rfile.read1(min(_READ_CHUNK, n - len(out)))
            if not chunk:
                raise ConnectionResetError("the client closed the connection in the middle of the body")
            out += chunk
        return bytes(out)

    def _chunked(self, limit: int) -> bytes:
        out = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip() or b"x", 16)
            except ValueError:
                raise _BadFraming() from None
            if size < 0:
                raise _BadFraming()
            if size == 0:
                for _ in range(100):  # the trailer
                    if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                        break
                return bytes(out)
            if len(out) + size > limit:
                raise _TooLarge()
            out += self._read(size)
            self.rfile.readline(1024)

    # --- requests ------------------------------------------------------------------------------------
    def _authorized(self) -> bool:
        token = self.server.token
        if token is None or self.path.split("?", 1)[0] in HEALTH:
            return True
        got = bearer_token(self.headers.get("Authorization") or "")
        return got is not None and hmac.compare_digest(got.encode(), token.encode())

    def _long_running(self) -> bool:
        """A watch (kube-apiserver's long-running check: not counted among the requests in flight)."""
        if self.command != "GET":
            return False
        path, _, query = self.path.partition("?")
        if "/watch/" in path:
            return True
        from urllib.parse import parse_qs

        return any(v.lower() in ("1", "true") for v in parse_qs(query).get("watch", ()))

    def _dispatch(self) -> None:
        has_body = bool(self.headers.get("Content-Length", "").strip() not in ("", "0")
                        or (self.headers.get("Transfer-Encoding") or "").lower() == "chunked")
        if not self._authorized():
            # answered from the headers: the body is never read (nor is the connection kept)
            self.close_connection = has_body or self.close_connection
            self.unread_body = has_body
            self._send(_status(401, "Unauthorized", "Unauthorized"))
            return
        mutating = self.command not in ("GET", "HEAD")
        counted = not self._long_running() and self.path.split("?", 1)[0] not in HEALTH
        if counted and not self.server.admit(mutating):
            self.close_connection = has_body or self.close_connection
            self.unread_body = has_body
            self._send(_plain(429, "Too many requests, please try again later.", {"Retry-After": "1"}))
            return
        try:
            try:
                body = self._body()
            except _TooLarge:
                self.close_connection = self.unread_body = True
                self._send(_status(413, "RequestEntityTooLarge",
                                   f"Request entity too large: limit is {self.server.limits.max_body_bytes}"))
                return
            except _BadFraming:
                self.close_connection = True
                self._send(_plain(400, "400 Bad Request"))
                return
            try:
                resp = self.server.rest.handle(self.command, self.path, self.headers, body)
            except Exception as e:  # noqa: BLE001 - a bug of ours must not kill the connection thread silently
                import traceback

                traceback.print_exc(file=sys.stderr)
                resp = Response(500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": f"internal error: {type(e).__name__}: {e}",
                                      "reason": "InternalError", "code": 500})
            del body
        finally:
            if counted:
                self.server.release(mutating)
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

    def _write(self, data: bytes) -> None:
        """One write to the client (with the headers not sent yet), within the write deadline."""
        pending = getattr(self, "_headers_buffer", None)
        if pending:
            data = b"".join(pending) + data
            self._headers_buffer = []
        self.conn.expect(self.server.limits.write_timeout)
        try:
            self.wfile.write(data)
            self.wfile.flush()
        finally:
            self.conn.expect(None)

    def _headers_done(self) -> None:
        self._headers_buffer.append(b"\r\n")  # sent with the body's first write, under its deadline

    def handle_expect_100(self) -> bool:
        """``Expect: 100-continue`` is answered when the body is read, after the token was checked."""
        return True

    def _send(self, resp: Response) -> None:
        data = resp.payload()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in resp.headers.items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self._headers_done()
        self._write(b"" if self.command == "HEAD" else data)

    def _stream(self, resp: Response) -> None:
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self._headers_done()
        gen = resp.stream
        try:
            self._write(b"")
            for chunk in gen:
                self._write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self._write(b"0\r\n\r\n")
        except (OSError, ValueError):  # the client went away, or stopped reading past the write deadline
            pass
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
                 handshake_timeout: float = HANDSHAKE_TIMEOUT, limits: Limits | None = None):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        ctx = None
        if tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(tls_cert, tls_key)
            ctx.set_alpn_protocols(["http/1.1"])  # clients that offer h2 (Node.js, Go) settle on HTTP/1.1
        limits = limits or Limits()
        if handshake_timeout != HANDSHAKE_TIMEOUT:
            limits.handshake_timeout = handshake_timeout
        self.httpd = _Server((address, port), rest, token, family, ctx, limits)
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
        self.httpd.stop_serving()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
