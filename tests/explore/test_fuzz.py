"""Bad requests to the explorer: junk paths, traversal (plain and encoded), huge bodies, wrong
methods, bad JSON. Every answer is 4xx, nothing but the page's own files and the run is served,
and the server still answers afterwards."""
from __future__ import annotations

import json
import random
import re
import socket
from urllib.parse import urlsplit

import pytest

from tinygrad_tx.inspect.explorer.server import ASSETS, MAX_BODY

SECRET_MARKERS = (b"root:", b"import ", b"def ", b"[build-system]", b"checksums")  # passwd, Python, TOML, run.json

TRAVERSALS = ["/../../../../etc/passwd", "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
              "/..%2f..%2f..%2fetc/passwd", "/static/../server.py", "/vendor/../../server.py", "/explore.js/../step.py",
              "//etc/passwd", "/static/index.html", "/static/explore.js", "/server.py", "/__init__.py",
              "/vendor/dagre.min.js.map", "/vendor/", "/vendor/%2e%2e/server.py", "/explore.js%00.py",
              "/api/../server.py", "/api/node/../../step.py", "/..\\..\\etc\\passwd", "/%252e%252e/etc/passwd",
              "/api/node?id=../../etc/passwd", "/api/node?id=", "/api/node", "/api/walk_step?n=-1",
              "/api/walk_step?n=abc", "/api/walk_step?n=99999999", "/api/walk_step?n=1e3", "/api/nosuch",
              "/api/checkpoint_attention?name=../run.json&sentence=abc", "/api/checkpoint_attention?name=best.npz",
              "/api/node?id=op1&id=%ff%fe", "/api/walk?x=1&&&==", "/run.json", "/metrics.jsonl", "/best.npz"]


def raw(url: str, request: bytes) -> tuple[int, bytes]:
    """Send bytes as they are (no client cleans the path up) and read the whole answer."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    if not answer.startswith(b"HTTP/"):  # an answer to a request the library read as HTTP/0.9: no headers
        return int(re.search(rb"Error code: (\d+)", answer)[1]), answer
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def request(method: str, path: str, body: bytes = b"", headers: dict | None = None, port_url: str = "") -> bytes:
    host = urlsplit(port_url).netloc
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def assert_refused(url: str, req: bytes, allowed=range(400, 500)) -> int:
    status, body = raw(url, req)
    assert status in allowed, (req[:120], status, body[:200])
    assert not any(marker in body for marker in SECRET_MARKERS), (req[:120], body[:200])
    return status


@pytest.mark.parametrize("path", TRAVERSALS)
def test_junk_and_traversal_paths_are_4xx(run_url, path):
    assert_refused(run_url, request("GET", path, port_url=run_url))


def test_random_paths_are_4xx_unless_an_asset(run_url):
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789./%_-~?=&#:;@!$'()*+,"
    for _ in range(150):
        path = "/" + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        served = "/" + path.lstrip("/")  # the standard library reads //x as /x
        if served.split("?")[0].split("#")[0] in ASSETS or served.startswith(("/api/walk", "/api/graph", "/api/info",
                                                                              "/api/metrics", "/api/events")):
            continue
        assert_refused(run_url, request("GET", path, port_url=run_url))


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "FOO", "HEAD"])
def test_wrong_methods_are_405(run_url, method):
    assert assert_refused(run_url, request(method, "/api/translate", port_url=run_url)) == 405


@pytest.mark.parametrize("body, headers", [
    (b"{", {"Content-Type": "application/json"}),
    (b"\xff\xfe\x00", {}),
    (b"[1, 2, 3]", {}),
    (b'"abc"', {}),
    (b"NaN", {}),
    (b'{"sentence": ["a"]}', {}),
    (b'{"sentence": "abc", "beam": 0}', {}),
    (b'{"sentence": "abc", "beam": 1000}', {}),
    (b'{"sentence": "abc", "beam": "four"}', {}),
    (b'{"sentence": "abc", "beam": true}', {}),
    (b'{"sentence": "abc", "beam": 2.5}', {}),
])
def test_bad_json_is_400(run_url, body, headers):
    req = request("POST", "/api/translate", body, {"Content-Length": str(len(body)), **headers}, run_url)
    assert assert_refused(run_url, req) == 400


def test_huge_and_unsized_bodies_are_refused(run_url):
    huge = json.dumps({"sentence": "a" * (4 * MAX_BODY)}).encode()
    req = request("POST", "/api/translate", huge, {"Content-Length": str(len(huge))}, run_url)
    assert assert_refused(run_url, req) == 413
    assert assert_refused(run_url, request("POST", "/api/translate", b"{}", {}, run_url)) == 411
    req = request("POST", "/api/translate", b"{}", {"Content-Length": "-5"}, run_url)
    assert assert_refused(run_url, req) == 411
    req = request("POST", "/api/nosuch", b"{}", {"Content-Length": "2"}, run_url)
    assert assert_refused(run_url, req) == 404


def test_garbage_request_lines_and_foreign_hosts(run_url):
    assert_refused(run_url, b"\x00\x01 garbage HTTP/1.1\r\n\r\n")
    assert_refused(run_url, b"GET / HTTP/9.9\r\n\r\n")
    assert_refused(run_url, b"\x00\x01\x02 garbage\r\n\r\n")
    assert_refused(run_url, b"GET " + b"/a" * 40000 + b" HTTP/1.1\r\n\r\n")  # a request line too long
    host = request("GET", "/api/info", port_url=run_url).replace(urlsplit(run_url).netloc.encode(), b"evil.example:80")
    assert assert_refused(run_url, host) == 403  # a page elsewhere, through DNS rebinding


def test_the_server_still_answers_and_serves_its_assets(run_url):
    for path in ASSETS:
        status, body = raw(run_url, request("GET", path, port_url=run_url))
        assert status == 200 and body
    status, body = raw(run_url, request("GET", "/api/info", port_url=run_url))
    assert status == 200 and json.loads(body)["views"] == ["graph", "translate", "training", "compiled"]
