"""The explorer's web server: the standard library's threaded HTTP server, JSON, server-sent events.

What it serves is a fixed table, nothing else:
- the page's own files (`ASSETS`: a request path maps to a file name written here,
  never joined onto a directory, so no path can reach the file system);
- JSON endpoints (`GET /api/...` with query parameters, `POST /api/...` with a
  small JSON object), each a Python function given by whoever starts the server
  (the step graph for `tx.inspect.explore`, more for a translation run);
- event streams (`GET /api/events/...`, server-sent events: the training curves,
  live while a run trains).
Anything else is a 4xx answer with a one-line reason, and the server keeps serving.
Every answer is strict JSON (`strict_json.py`: NaN is written "NaN"). Only
same-origin requests with the expected Host do any work, and beyond loopback only
those with the printed token (`access.py`).

The engine is not thread-safe, so the endpoints run one at a time (one lock);
two tabs work, each waits for the other's request. Streams do not take the lock.
"""
from __future__ import annotations

import json
import re
import socket
import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlsplit

from . import strict_json
from .access import Access, is_loopback
from .params import BadRequest, flat

ASSETS = {"/": "index.html", **{"/" + name: name for name in (  # request path -> file under static/
    "favicon.svg", "explore.css", *(f"{name}.js" for name in ("api", "draw", "graph", "walk", "parts", "tour",
                                                               "translate", "stats", "training", "compiled", "update",
                                                               "explore")),
    "vendor/dagre.min.js", "vendor/LICENSE-dagre.txt", "vendor/dagre.min.js.LEGAL.txt")}}
SCRIPTS = ["vendor/dagre.min.js", *(f"{name}.js" for name in ("api", "draw", "graph", "walk", "parts", "tour",
                                                               "translate", "stats", "training", "compiled", "update",
                                                               "explore"))]
"""The page's scripts in the order it runs them (index.html, and the saved page, which inlines them)."""
TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
         ".js": "text/javascript; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
MAX_BODY = 64 * 1024
"""The largest request body accepted (a sentence and a few settings need far less)."""
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
                    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                               "frame-ancestors 'none'"}
"""Sent with every answer: no framing by any page (X-Frame-Options for browsers without CSP 3), no type sniffing."""
LENGTH = re.compile(r"[0-9]{1,9}")  # a Content-Length: ASCII digits ("²".isdigit() is True, int("²") fails)

Endpoint = Callable[[dict], Any]  # parameters (query or JSON body) -> a JSON-able answer
Stream = Callable[[dict], Iterator[Any]]  # parameters -> events, each a JSON-able value


def asset(name: str) -> bytes:
    """One of the page's files, as shipped in the package."""
    return resources.files(__package__).joinpath("static", *name.split("/")).read_bytes()


class Explorer:
    """The endpoints of one explorer, and the server that answers them."""

    def __init__(self, get: dict[str, Endpoint], post: dict[str, Endpoint] | None = None,
                 streams: dict[str, Stream] | None = None):
        self.get, self.post, self.streams = get, post or {}, streams or {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def answer(self, table: dict[str, Endpoint], path: str, params: dict) -> tuple[int, str]:
        """The status and strict JSON text of one request to an endpoint."""
        endpoint = table.get(path)
        if endpoint is None:
            return HTTPStatus.NOT_FOUND, strict_json.dumps({"error": f"no endpoint {path}"})
        try:
            with self.lock:
                return HTTPStatus.OK, strict_json.dumps(endpoint(params))
        except BadRequest as e:
            return HTTPStatus.BAD_REQUEST, strict_json.dumps({"error": str(e)})
        except Exception as e:  # a bug of ours, not the request's: say so in the page, keep serving
            traceback.print_exc()
            return HTTPStatus.INTERNAL_SERVER_ERROR, strict_json.dumps(
                {"error": f"the explorer failed: {type(e).__name__}: {e}"})

    def server(self, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
        """A server bound to (host, port) (port 0: a free one), not yet serving; its `access`
        holds the rules of who may use it (and the address to print)."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family})
        server = server_class((host.strip("[]"), port), _Handler)
        server.daemon_threads = True  # Ctrl-C need not wait for an open event stream
        server.explorer, server.access = self, Access(host, server.server_address[1])
        return server

    def serve(self, host: str = "127.0.0.1", port: int | None = None, open_browser: bool = False) -> None:
        """Serve until Ctrl-C: prints the address (and opens it in a browser when asked)."""
        server = self.server(host, port or 0)
        if not is_loopback(host):
            print(f"warning: serving on {host}: anyone who can reach this machine and has the address below "
                  "(with its token) can open the explorer and read your run; the default, 127.0.0.1, is "
                  "this machine only", file=sys.stderr)
        url = server.access.address(host)
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


class _Handler(BaseHTTPRequestHandler):
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
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not used here: GET or POST",
                    extra={"Allow": "GET, POST"})

    def _refused(self, query_token: str | None, work: bool = True) -> bool:
        """Answer 403 (and say so) unless the request may be answered at all (`access.py`)."""
        why = self.server.access.refusal(self.headers, query_token, work)
        if why is not None:
            self._error(HTTPStatus.FORBIDDEN, why)
        return why is not None

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        try:
            params = {k: v[-1] for k, v in parse_qs(url.query, strict_parsing=bool(url.query)).items()}
        except ValueError:
            params = None
        if self._refused(params.pop("token", None) if params else None, work=url.path not in ASSETS):
            return
        if url.path in ASSETS:
            name = ASSETS[url.path]
            cookie = self.server.access.set_cookie() if url.path == "/" else None
            return self._send(HTTPStatus.OK, asset(name), TYPES[name[name.rindex("."):]],
                              {"Set-Cookie": cookie} if cookie else None)
        if params is None:
            return self._error(HTTPStatus.BAD_REQUEST, "malformed query string")
        explorer = self.server.explorer
        if url.path in explorer.streams:
            return self._stream(explorer.streams[url.path], params)
        self._json(*explorer.answer(explorer.get, url.path, params))

    def do_POST(self) -> None:
        if self._refused(None):
            return
        length = self.headers.get("Content-Length", "")
        if not LENGTH.fullmatch(length):
            return self._error(HTTPStatus.LENGTH_REQUIRED, "a POST needs a Content-Length (ASCII digits)")
        if int(length) > MAX_BODY:
            return self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes")
        kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "application/json":  # a page elsewhere can send text/plain without asking first
            return self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "a POST body must be application/json")
        try:
            params = flat(json.loads(self.rfile.read(int(length)) or b"null"))
        except RecursionError:
            return self._error(HTTPStatus.BAD_REQUEST, "the body is nested too deeply to be a request")
        except (ValueError, UnicodeDecodeError) as e:  # BadRequest is a ValueError
            return self._error(HTTPStatus.BAD_REQUEST, str(e) if isinstance(e, BadRequest) else "the body is not JSON")
        explorer = self.server.explorer
        self._json(*explorer.answer(explorer.post, urlsplit(self.path).path, params))

    def _stream(self, stream: Stream, params: dict) -> None:
        """Server-sent events: one `data:` line of JSON per event, until the page or the server goes."""
        try:
            events = iter(stream(params))
            first = next(events)
        except BadRequest as e:
            return self._error(HTTPStatus.BAD_REQUEST, str(e))
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.close_connection = True
        try:
            for event in _chain(first, events):
                if self.server.explorer.stopping.is_set():
                    break
                self.wfile.write(b"data: " + strict_json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the tab was closed
            pass

    def _error(self, status: int, message: str, extra: dict | None = None) -> None:
        self._json(status, strict_json.dumps({"error": message}), extra)

    def _json(self, status: int, text: str, extra: dict | None = None) -> None:
        if status >= 400:  # a body may be left unread: the connection cannot carry another request
            self.close_connection = True
        self._send(status, text.encode(), "application/json", extra)

    def end_headers(self) -> None:
        """Every answer (a page, JSON, an event stream, the library's own errors) forbids being framed
        by another site (which could dress the page up and make its clicks) and sniffing its type."""
        for key, value in SECURITY_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def _send(self, status: int, body: bytes, kind: str, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")  # live: a view is never an old copy
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
