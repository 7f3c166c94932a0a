"""The health probe (``/healthz``, ``/readyz``) and metrics (``/metrics``) HTTP endpoints."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

Route = Callable[[], tuple[int, str, bytes]]  # -> (status, content type, body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Endpoints:
    """One HTTP server on ``address:port`` answering GET for a few fixed paths."""

    def __init__(self, address: str, port: int, routes: dict[str, Route]):
        routes = dict(routes)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    status, ctype, body = 404, "text/plain; charset=utf-8", b"404 page not found\n"
                else:
                    try:
                        status, ctype, body = route()
                    except Exception as e:  # noqa: BLE001 - never take the server down
                        status, ctype, body = 500, "text/plain; charset=utf-8", f"{e}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _Server((address, port), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name=f"http-{self.port}", daemon=True)

    def start(self) -> "Endpoints":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def text(status: int, body: str) -> tuple[int, str, bytes]:
    return status, "text/plain; charset=utf-8", body.encode()
