"""The explorer's web server: the standard library's threaded HTTP server, JSON, server-sent events.

What it serves is a fixed table, nothing else:
- the page's own files (`ASSETS`: a request path maps to a file name written here,
  never joined onto a directory, so no path can reach the file system);
- JSON endpoints (`GET /api/...` with query parameters, `POST /api/...` with a
  small JSON object), each a Python function given by whoever starts the server
  (the step graph for `tx.inspect.explore`, more for a translation run);
- event streams (`GET /api/events/...`, server-sent events: the training curves,
  live while a run trains).
Anything else is a 4xx answer, and the server keeps serving. It binds to
127.0.0.1 unless told otherwise, and then answers only requests addressed to
that host name (a page elsewhere cannot reach it through DNS rebinding).

The engine is not thread-safe, so the endpoints run one at a time (one lock);
two tabs work, each waits for the other's request. Streams do not take the lock.
"""
from __future__ import annotations

import json
import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlsplit

from .step import BadRequest

ASSETS = {"/": "index.html", **{"/" + name: name for name in (  # request path -> file under static/
    "favicon.svg", "explore.css", "explore.js", "api.js", "draw.js", "graph.js", "translate.js", "training.js", "compiled.js",
    "vendor/dagre.min.js", "vendor/LICENSE-dagre.txt", "vendor/dagre.min.js.LEGAL.txt")}}
TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
         ".js": "text/javascript; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
MAX_BODY = 64 * 1024
"""The largest request body accepted (a sentence and a few settings need far less)."""

Endpoint = Callable[[dict], Any]  # parameters (query or JSON body) -> a JSON-able answer
Stream = Callable[[dict], Iterator[Any]]  # parameters -> events, each a JSON-able value


class Explorer:
    """The endpoints of one explorer, and the server that answers them."""

    def __init__(self, get: dict[str, Endpoint], post: dict[str, Endpoint] | None = None,
                 streams: dict[str, Stream] | None = None):
        self.get, self.post, self.streams = get, post or {}, streams or {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def answer(self, table: dict[str, Endpoint], path: str, params: dict) -> tuple[int, Any]:
        endpoint = table.get(path)
        if endpoint is None:
            return HTTPStatus.NOT_FOUND, {"error": f"no endpoint {path}"}
        try:
            with self.lock:
                return HTTPStatus.OK, endpoint(params)
        except BadRequest as e:
            return HTTPStatus.BAD_REQUEST, {"error": str(e)}
        except Exception as e:  # a bug of ours, not the request's: say so in the page, keep serving
            traceback.print_exc()
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"the explorer failed: {type(e).__name__}: {e}"}

    def server(self, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
        """A server bound to (host, port) (port 0: a free one), not yet serving."""
        handler = type("Handler", (_Handler,), {"explorer": self, "allowed_hosts": _allowed_hosts(host)})
        server = ThreadingHTTPServer((host, port), handler)
        server.daemon_threads = True  # Ctrl-C need not wait for an open event stream
        handler.allowed_hosts = {f"{name}:{server.server_address[1]}" for name in handler.allowed_hosts}
        return server

    def serve(self, host: str = "127.0.0.1", port: int | None = None, open_browser: bool = False) -> None:
        """Serve until Ctrl-C: prints the address (and opens it in a browser when asked)."""
        if host not in ("127.0.0.1", "localhost"):
            print(f"warning: serving on {host}: anyone who can reach this machine can open the explorer "
                  "and read your run; the default, 127.0.0.1, is this machine only", file=sys.stderr)
        server = self.server(host, port or 0)
        url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{server.server_address[1]}/"
        print(f"explorer at {url}  (Ctrl-C to stop)", flush=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("explorer stopped", flush=True)
        finally:
            self.stopping.set()
            server.server_close()


def _allowed_hosts(host: str) -> set[str]:
    """The Host headers a request may carry (without the port): any, when bound elsewhere on purpose."""
    return {"127.0.0.1", "localhost"} if host in ("127.0.0.1", "localhost") else set()


class _Handler(BaseHTTPRequestHandler):
    explorer: Explorer
    allowed_hosts: set[str]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the terminal shows the address only
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # PUT, DELETE, any unknown method: 405, not the library's 501
            return self._wrong_method
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The library's own refusals of malformed requests, kept 4xx: it answers 505 to an
        unknown HTTP version, which is the client's mistake too."""
        super().send_error(HTTPStatus.BAD_REQUEST if code == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED else code,
                           message, explain)

    def _wrong_method(self) -> None:
        self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{self.command} is not used here: GET or POST"},
                   extra={"Allow": "GET, POST"})

    def _host_ok(self) -> bool:
        if self.allowed_hosts and self.headers.get("Host", "") not in self.allowed_hosts:
            self._json(HTTPStatus.FORBIDDEN, {"error": "wrong Host header"})
            return False
        return True

    def do_GET(self) -> None:
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        if url.path in ASSETS:
            name = ASSETS[url.path]
            body = resources.files(__package__).joinpath("static", *name.split("/")).read_bytes()
            return self._send(HTTPStatus.OK, body, TYPES[name[name.rindex("."):]])
        try:
            params = {k: v[-1] for k, v in parse_qs(url.query, strict_parsing=bool(url.query)).items()}
        except ValueError:
            return self._json(HTTPStatus.BAD_REQUEST, {"error": "malformed query string"})
        if url.path in self.explorer.streams:
            return self._stream(self.explorer.streams[url.path], params)
        self._json(*self.explorer.answer(self.explorer.get, url.path, params))

    def do_POST(self) -> None:
        if not self._host_ok():
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            return self._json(HTTPStatus.LENGTH_REQUIRED, {"error": "a POST needs a Content-Length"})
        if int(length) > MAX_BODY:
            return self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body over {MAX_BODY} bytes"})
        try:
            params = json.loads(self.rfile.read(int(length)) or b"null")
        except (ValueError, UnicodeDecodeError):
            return self._json(HTTPStatus.BAD_REQUEST, {"error": "the body is not JSON"})
        if not isinstance(params, dict):
            return self._json(HTTPStatus.BAD_REQUEST, {"error": "the body must be a JSON object"})
        self._json(*self.explorer.answer(self.explorer.post, urlsplit(self.path).path, params))

    def _stream(self, stream: Stream, params: dict) -> None:
        """Server-sent events: one `data:` line of JSON per event, until the page or the server goes."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.close_connection = True
        try:
            for event in stream(params):
                if self.explorer.stopping.is_set():
                    break
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the tab was closed
            pass

    def _json(self, status: int, value: Any, extra: dict | None = None) -> None:
        if status >= 400:  # a body may be left unread: the connection cannot carry another request
            self.close_connection = True
        self._send(status, json.dumps(value, allow_nan=False).encode(), "application/json", extra)

    def _send(self, status: int, body: bytes, kind: str, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
