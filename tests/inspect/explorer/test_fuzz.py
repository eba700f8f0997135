"""Bad and hostile requests to the explorer: junk paths, traversal (plain and encoded), huge and
deeply nested bodies, numbers that are not ASCII digits, wrong methods, bad JSON, requests from
another site (CSRF) or through another host name (DNS rebinding), and a random mix of all of these,
on a healthy run and on one that diverged. Every answer is 4xx or a strict-JSON 200, nothing but
the page's own files and the run is served, no refused request does any work, and the server
still answers afterwards."""
from __future__ import annotations

import json
import random
import re
import socket
from urllib.parse import quote, urlsplit

import pytest

from tinygrad_tx.inspect.explorer import Explorer
from tinygrad_tx.inspect.explorer.server import ASSETS, MAX_BODY

from .conftest import serving, strict

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
    head = "\r\n".join(lines) + "\r\n\r\n"
    try:
        return head.encode("latin-1") + body  # what HTTP headers are
    except UnicodeEncodeError:
        return head.encode("utf-8") + body  # what a careless client sends instead


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


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("body", [
    b"{", b"\xff\xfe\x00", b"[1, 2, 3]", b'"abc"', b"NaN", b'{"sentence": ["a"]}', b'{"sentence": {"a": 1}}',
    b'{"sentence": "abc", "beam": 0}', b'{"sentence": "abc", "beam": 1000}', b'{"sentence": "abc", "beam": "four"}',
    b'{"sentence": "abc", "beam": true}', b'{"sentence": "abc", "beam": 2.5}', b'{"sentence": "abc", "beam": NaN}',
    '{"sentence": "abc", "beam": "²"}'.encode(), '{"sentence": "abc", "beam": "١٢"}'.encode(),
    b'{"sentence": "abc", "beam": "+4"}', b'{"sentence": "abc", "beam": " 4"}', b'{"sentence": "abc", "beam": 1e400}',
    b'{"sentence": "abc", "beam": ' + b"9" * 5000 + b"}", b"[" * 60_000, b'{"a":' * 12_000,
    b'{"sentence": "abc"' + b" " * 100,
], ids=lambda body: repr(body[:24]) + f"...{len(body)}")
def test_bad_json_is_400_with_one_line_why(run_url, body):
    headers = {"Content-Length": str(len(body)), **JSON}
    status, answer = raw(run_url, request("POST", "/api/translate", body, headers, run_url))
    assert status == 400, (body[:60], status, answer[:200])
    error = strict(answer)["error"]
    assert error and "\n" not in error and len(error) < 200


@pytest.mark.parametrize("query", ["n=%C2%B2", "n=²", "n=%D9%A1%D9%A2", "n=+3", "n=-1", "n=0x1", "n=%203",
                                   "n=" + "9" * 5000, "n=1.0", "n=3&n=²", "n="], ids=lambda query: query[:16])
def test_numbers_that_are_not_ascii_digits_are_400(run_url, query):
    status, answer = raw(run_url, request("GET", "/api/walk_step?" + query, port_url=run_url))
    assert status == 400 and "whole number" in strict(answer)["error"]


@pytest.mark.parametrize("length", ["²", "١٢", "1e3", "1 2", "+12", "0x10", "99999999999999999999"])
def test_a_content_length_that_is_not_ascii_digits_is_411(run_url, length):
    req = request("POST", "/api/translate", b'{"sentence": "abc"}', {"Content-Length": length, **JSON}, run_url)
    assert assert_refused(run_url, req) == 411


def test_huge_and_unsized_bodies_are_refused(run_url):
    huge = json.dumps({"sentence": "a" * (4 * MAX_BODY)}).encode()
    req = request("POST", "/api/translate", huge, {"Content-Length": str(len(huge))}, run_url)
    assert assert_refused(run_url, req) == 413
    assert assert_refused(run_url, request("POST", "/api/translate", b"{}", {}, run_url)) == 411
    req = request("POST", "/api/translate", b"{}", {"Content-Length": "-5"}, run_url)
    assert assert_refused(run_url, req) == 411
    req = request("POST", "/api/nosuch", b"{}", {"Content-Length": "2", **JSON}, run_url)
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
    assert status == 200 and json.loads(body)["views"] == ["graph", "update", "translate", "training", "compiled"]


# -- requests from elsewhere do no work -------------------------------------------------------------

@pytest.fixture(scope="module")
def counted(run_explorer):
    """The run's explorer with each endpoint counting the requests that reached it."""
    calls = []

    def counting(table):
        return {path: (lambda params, f=f, path=path: calls.append(path) or f(params)) for path, f in table.items()}
    explorer = Explorer(counting(run_explorer.get), counting(run_explorer.post), run_explorer.streams)
    with serving(explorer) as url:
        yield url, calls


EVIL = "http://evil.example"


@pytest.mark.parametrize("method, path, headers, status", [
    ("POST", "/api/translate", {"Content-Type": "text/plain", "Origin": EVIL}, 403),  # a form on another site
    ("POST", "/api/translate", {"Content-Type": "text/plain"}, 415),  # a browser that sends no Origin
    ("POST", "/api/translate", {**JSON, "Origin": EVIL}, 403),
    ("POST", "/api/translate", {**JSON, "Origin": "null"}, 403),  # a sandboxed frame, a page from disk
    ("POST", "/api/translate", {**JSON, "Sec-Fetch-Site": "cross-site"}, 403),
    ("POST", "/api/translate", {**JSON, "Sec-Fetch-Site": "same-site"}, 403),  # another port of this machine
    ("GET", "/api/walk_step?n=1", {"Sec-Fetch-Site": "cross-site"}, 403),  # <img src=...> on another site
    ("GET", "/api/graph", {"Origin": EVIL}, 403),
    ("GET", "/api/events/metrics", {"Sec-Fetch-Site": "cross-site"}, 403),
])
def test_requests_from_another_site_do_no_work(counted, method, path, headers, status):
    url, calls = counted
    body = b'{"sentence": "abcdefghij", "beam": 16}' if method == "POST" else b""
    before = len(calls)
    req = request(method, path, body, {**({"Content-Length": str(len(body))} if body else {}), **headers}, url)
    assert assert_refused(url, req) == status
    assert len(calls) == before  # no beam search ran, nothing was computed


def test_the_pages_own_requests_are_answered(counted):
    url, calls = counted
    origin = f"http://{urlsplit(url).netloc}"
    body = b'{"sentence": "abc", "beam": 2}'
    headers = {"Content-Length": str(len(body)), **JSON, "Origin": origin, "Sec-Fetch-Site": "same-origin"}
    status, answer = raw(url, request("POST", "/api/translate", body, headers, url))
    assert status == 200 and strict(answer)["output"] and calls[-1] == "/api/translate"
    for site in ("none", "cross-site"):  # typed into the address bar; a link on another page: the page (no work)
        status, _ = raw(url, request("GET", "/", headers={"Sec-Fetch-Site": site}, port_url=url))
        assert status == 200


@pytest.mark.parametrize("host", ["127.0.0.2", "::1"])
def test_the_host_check_holds_on_every_loopback_address(host):
    explorer = Explorer(get={"/api/info": lambda params: {"views": []}})
    try:
        with serving(explorer, host) as url:
            port = url.rsplit(":", 1)[1]
            name = f"[{host}]" if ":" in host else host
            for header, status in ((f"{name}:{port}", 200), (f"localhost:{port}", 200), (f"evil.example:{port}", 403),
                                   (f"{name}.evil.example:{port}", 403), ("", 403)):
                req = f"GET /api/info HTTP/1.1\r\nHost: {header}\r\nConnection: close\r\n\r\n".encode()
                assert raw(url, req)[0] == status, header
    except OSError as e:  # no such address on this machine (an IPv6-less container)
        pytest.skip(f"cannot bind {host}: {e}")


# -- a random mix, on a healthy run and on one that diverged -----------------------------------------

VALUES = ["", "0", "1", "4", "16", "17", "-1", "²", "١", "½", "1e3", "NaN", "Infinity", "9" * 30, "op1", "op99999",
          "leaf1", "const1", "best.npz", "last.npz", "snapshots/step_000100.npz", "../run.json", "abc", "abcdefghij",
          "ABC!?", "a" * 3000, "\u0000", "\ud800", "日本", "<script>", "%00", "op1\n"]
JSON_VALUES = [None, True, False, 0, 1, 4, 17, -3, 2.5, 1e308, "²", "abc", "abcdef", [], {}, [[[]]], {"a": [1]},
               "x" * 20000]
PATHS = ["/api/info", "/api/graph", "/api/node", "/api/walk", "/api/walk_step", "/api/compiled", "/api/profile",
         "/api/parts", "/api/part_node", "/api/part_step", "/api/metrics", "/api/checkpoint_attention", "/api/tour",
         "/api/translate", "/api/nosuch"]
PARAMS = ["id", "n", "part", "name", "sentence", "beam", "token"]


def random_request(rng: random.Random, url: str) -> bytes:
    """A request a hostile or careless client could send: any endpoint, any parameters, some headers."""
    path = rng.choice(PATHS)
    headers = {}
    if rng.random() < 0.2:
        headers["Origin"] = rng.choice([EVIL, "null", f"http://{urlsplit(url).netloc}"])
    if rng.random() < 0.2:
        headers["Sec-Fetch-Site"] = rng.choice(["cross-site", "same-site", "same-origin", "none", "garbage"])
    if rng.random() < 0.5:
        body = {rng.choice(PARAMS): rng.choice(JSON_VALUES) for _ in range(rng.randint(0, 3))}
        data = json.dumps(body).encode() if rng.random() < 0.9 else rng.choice([b"[" * 5000, b"{", b"\xff"])
        headers["Content-Type"] = rng.choice(["application/json", "application/json; charset=utf-8", "text/plain"])
        headers["Content-Length"] = str(len(data)) if rng.random() < 0.95 else rng.choice(["²", "-1", "abc"])
        return request("POST", path, data, headers, url)
    pairs = [(rng.choice(PARAMS), quote(rng.choice(VALUES), errors="surrogatepass")) for _ in range(rng.randint(0, 3))]
    query = "&".join(f"{k}={v}" for k, v in pairs)
    return request("GET", path + ("?" + query if query else ""), headers=headers, port_url=url)


def fuzz(url: str, seed: int, n: int) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        req = random_request(rng, url)
        status, body = raw(url, req)  # a dropped connection fails in raw
        assert status < 500, (req[:200], status, body[:300])
        answer = strict(body)  # every answer strict JSON: NaN spelled "NaN"
        if status >= 400:
            assert "\n" not in answer["error"], answer
    status, body = raw(url, request("GET", "/api/info", port_url=url))
    assert status == 200


def test_a_random_mix_of_requests(run_url):
    fuzz(run_url, seed=1, n=250)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # NaN weights: NumPy says so, the page shows it
def test_a_random_mix_of_requests_to_a_diverged_run(diverged_run):
    from models.translate.explore import open_explorer

    with serving(open_explorer(diverged_run)) as url:
        fuzz(url, seed=2, n=150)
