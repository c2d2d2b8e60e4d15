"""Whether the client's requests go through a proxy the environment names, and what to say.

httpx, as curl and requests do, sends requests through the proxy that ``HTTP_PROXY``,
``HTTPS_PROXY`` or ``ALL_PROXY`` names (lower-case names first) unless ``NO_PROXY`` names the
host. On a cluster whose nodes reach the internet through a company proxy, a server inside the
cluster is then asked through that proxy, which cannot reach it or answers with a page of its
own: the error said "connection refused" at the server's address while the server was up. The
errors now name the proxy and the variable to set. httpx reads host names, domains (``.corp``
or ``corp``: it and its subdomains) and IP addresses in ``NO_PROXY``, not address ranges
(``10.0.0.0/8``), which curl reads too.
"""

from __future__ import annotations

import ipaddress
import os
from typing import NamedTuple
from urllib.parse import urlsplit
from urllib.request import getproxies

from zeus_bso.options import shown_url


class Proxy(NamedTuple):
    url: str
    """As messages show it: credentials in it as ``user:***@``."""
    variable: str
    """The environment variable that names it."""


def _variable(kind: str, value: str) -> str:
    """The environment variable that gave ``kind``'s proxy (``http`` -> ``http_proxy`` or
    ``HTTP_PROXY``)."""
    names = [name for name in os.environ if name.lower() == f"{kind}_proxy"]
    named = [name for name in sorted(names, key=str.isupper) if os.environ[name] == value]
    return named[0] if named else f"{kind.upper()}_PROXY"


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` (``no_proxy``) names ``host`` as httpx reads it: ``*``, an IP
    address (itself), a name (itself and its subdomains), ``.name`` (its subdomains)."""
    host = host.lower().strip("[]")
    for entry in (part.strip().lower() for part in no_proxy.split(",")):
        if entry == "*":
            return True
        if not entry or "://" in entry:
            continue
        if _is_address(entry.strip("[]")):
            matched = host == entry.strip("[]")
        elif entry.startswith("."):
            matched = host.endswith(entry)
        else:
            matched = host == entry or host.endswith("." + entry)
        if matched:
            return True
    return False


def proxy_for(url: str) -> Proxy | None:
    """The proxy that requests to ``url`` go through, from the environment; None: direct."""
    parts = urlsplit(url)
    proxies = getproxies()
    if parts.hostname is None or _bypassed(parts.hostname, proxies.get("no", "")):
        return None
    for kind in (parts.scheme, "all"):
        if proxies.get(kind):
            return Proxy(shown_url(proxies[kind]), _variable(kind, proxies[kind]))
    return None


def through_proxy(url: str) -> str:
    """What to add to a message about a request to ``url`` that a proxy carried, or ''."""
    proxy = proxy_for(url)
    if proxy is None:
        return ""
    host = urlsplit(url).hostname
    return (
        f"; it was sent through the proxy {proxy.url} that {proxy.variable} names: where the"
        f" server is reached directly, add its host to NO_PROXY (NO_PROXY={host}; host names,"
        " domains and IP addresses, not address ranges)"
    )
