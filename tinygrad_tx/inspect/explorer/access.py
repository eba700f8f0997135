"""Who may use an explorer: same-origin requests, with a Host it expects, and beyond loopback a token.

A web page elsewhere can make the browser send requests to the explorer: a form or
`fetch` with `text/plain` (a "simple" request, sent without asking first), or, through
DNS rebinding, a name it controls that resolves to this machine. So a request does
work only when:

- its Host header names the address the server listens on (on a loopback address:
  that address or `localhost`), so a rebound name is refused;
- it is not made to fill a frame (`Sec-Fetch-Dest` iframe, frame, embed, object): no page,
  not even its own files, is answered into another site's frame, where the page could
  be dressed up and its clicks made for it (every answer also forbids framing);
- it does not come from another origin: the browser's `Sec-Fetch-Site` is
  `same-origin` or `none` (typed into the address bar), and an `Origin` header, where
  there is one, is the explorer's own;
- bound beyond loopback (anyone on the network can reach it), it carries the token
  printed in the address, as Jupyter does: `/?token=...` once, then a cookie
  (HttpOnly, SameSite=Strict: never sent by a page elsewhere).
"""
from __future__ import annotations

import hmac
import ipaddress
import secrets
from http.cookies import CookieError, SimpleCookie
from typing import Mapping


FRAMES = frozenset({"iframe", "frame", "embed", "object", "fencedframe"})
"""The `Sec-Fetch-Dest` of a request made to fill a frame."""


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or address to bind) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """Whether binding `host` listens on every address of the machine (0.0.0.0, ::)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return host == ""


def host_header(host: str, port: int) -> str:
    """How a browser writes `host:port` in a Host header (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host.strip("[]") else f"{host.strip('[]')}:{port}"


class Access:
    """The rules of one server, bound to `host` on `port`."""

    def __init__(self, host: str, port: int):
        self.port = port
        self.token = None if is_loopback(host) else secrets.token_urlsafe(24)
        names = {host_header(host, port)}
        if is_loopback(host):
            names.add(host_header("localhost", port))
            if host == "localhost":
                names.add(host_header("127.0.0.1", port))
        # beyond loopback the token is the check, as in Jupyter: the machine's names cannot all be known
        self.hosts = None if self.token else names
        self.cookie = f"tx_explorer_{port}"

    def address(self, host: str) -> str:
        """The address to print: the page, with the token when one is needed."""
        shown = "127.0.0.1" if is_wildcard(host) else host
        return f"http://{host_header(shown, self.port)}/" + (f"?token={self.token}" if self.token else "")

    def refusal(self, headers: Mapping[str, str], query_token: str | None, work: bool = True) -> str | None:
        """Why a request may not be answered (None: it may). `work`: it asks an endpoint for
        something (the page's own files, which do no work, may be opened from a link elsewhere)."""
        host = headers.get("Host", "")
        if self.hosts is not None and host not in self.hosts:
            return f"wrong Host header {host[:60]!r}: this explorer answers {' or '.join(sorted(self.hosts))}"
        dest = headers.get("Sec-Fetch-Dest")
        if dest in FRAMES:
            return f"the explorer is not shown inside a frame ({dest}): open it in a tab of its own"
        site = headers.get("Sec-Fetch-Site")
        if work and site is not None and site not in ("same-origin", "none"):
            return f"a request from another site ({site}) is refused: open the explorer's own page"
        origin = headers.get("Origin")
        if work and origin is not None and origin != f"http://{host}":
            return f"a request from another origin ({origin[:60]}) is refused"
        if self.token and not self._has_token(headers, query_token):
            return "this explorer needs its token: open the address it printed (with ?token=...)"
        return None

    def _has_token(self, headers: Mapping[str, str], query_token: str | None) -> bool:
        given = query_token
        if given is None:
            try:
                morsel = SimpleCookie(headers.get("Cookie", "")).get(self.cookie)
            except CookieError:
                morsel = None
            given = morsel.value if morsel else None
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def set_cookie(self) -> str | None:
        """The Set-Cookie value that keeps the token for the page's later requests."""
        if not self.token:
            return None
        return f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/"
