"""One HTTP request with a hard deadline, on the standard library's ``http.client``.

Why not ``requests``: its timeout bounds each socket operation, not the whole
request, so a server that trickles one byte a second never times out.  Here
every send and receive gets the time left until the request's deadline as its
socket timeout, so an upload attempt takes at most ``--timeout`` seconds, which
is what makes a stalled connection retryable.
"""

from __future__ import annotations

import http.client
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from torch_fl_publish import __version__

USER_AGENT = f"torch-fl-publish/{__version__}"
_CHUNK = 256 << 10
_MAX_BODY = 64 << 20  # a simple page or an error message; never a whole wheel in memory
_MAX_REDIRECTS = 5
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


class TransportError(Exception):
    """The request did not complete: connection refused or reset, timeout, TLS failure.

    Always worth retrying; the message never contains credentials.
    """


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes
    url: str


BodyPart = bytes | Path


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TransportError("timed out")
        return left


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


def _connect(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection for ``url`` (through the environment's proxy, if any) and the request target."""
    parts = urlsplit(url)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    host = parts.hostname or ""
    port = parts.port
    proxy = None
    if host not in _LOOPBACK and not urllib.request.proxy_bypass(host):
        proxy = urllib.request.getproxies().get(parts.scheme)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context()
        if proxy:
            p = urlsplit(proxy)
            connection = http.client.HTTPSConnection(p.hostname or "", p.port or 8080, timeout=timeout, context=context)
            connection.set_tunnel(host, port or 443)
        else:
            connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    elif parts.scheme == "http":
        if proxy:
            p = urlsplit(proxy)
            connection = http.client.HTTPConnection(p.hostname or "", p.port or 8080, timeout=timeout)
            target = url.split("#", 1)[0]
        else:
            connection = http.client.HTTPConnection(host, port, timeout=timeout)
    else:
        raise TransportError(f"unsupported URL scheme {parts.scheme!r}")
    return connection, target


def _send_once(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: Iterable[BodyPart],
    length: int | None,
    deadline: _Deadline,
    sink: Callable[[bytes], None] | None,
) -> Response:
    connection, target = _connect(url, deadline.left())
    try:
        connection.putrequest(method, target, skip_accept_encoding=True)
        connection.putheader("User-Agent", USER_AGENT)
        for key, value in headers.items():
            connection.putheader(key, value)
        if length is not None:
            connection.putheader("Content-Length", str(length))
        connection.endheaders()
        for part in body:
            if isinstance(part, bytes):
                _send(connection, part, deadline)
                continue
            with part.open("rb") as handle:
                while chunk := handle.read(_CHUNK):
                    _send(connection, chunk, deadline)
        if connection.sock is not None:
            connection.sock.settimeout(deadline.left())
        response = connection.getresponse()
        data = bytearray()
        while len(data) <= _MAX_BODY:
            if connection.sock is not None:
                connection.sock.settimeout(deadline.left())
            chunk = response.read(_CHUNK)
            if not chunk:
                break
            if sink is not None and response.status == 200:
                sink(chunk)
            else:
                data += chunk
        return Response(
            response.status,
            response.reason,
            {k.lower(): v for k, v in response.getheaders()},
            bytes(data[:_MAX_BODY]),
            url,
        )
    except TimeoutError:
        raise TransportError("timed out") from None
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(_describe(exc)) from None
    finally:
        connection.close()


def _send(connection: http.client.HTTPConnection, data: bytes, deadline: _Deadline) -> None:
    if connection.sock is not None:
        connection.sock.settimeout(deadline.left())
    connection.send(data)


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc)
    return f"{name}: {text}" if text else name


def request(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: Iterable[BodyPart] = (),
    length: int | None = None,
    timeout: float,
    auth_for: tuple[tuple[str, str, int | None], str] | None = None,
    sink: Callable[[bytes], None] | None = None,
) -> Response:
    """Send one request and read the whole response within ``timeout`` seconds.

    GET follows redirects within the same origin only: a simple page that
    redirects to another host (pypiserver's fallback to a public index) is
    answered as a 404, since files there are not on this index.
    ``auth_for`` is ``(origin, Authorization value)``: the header goes only to that origin.
    ``sink`` receives a 200 response's body in chunks instead of it being kept in memory.
    """
    deadline = _Deadline(timeout)
    current = url
    for _ in range(_MAX_REDIRECTS + 1):
        sent = dict(headers or {})
        if auth_for is not None and origin(current) == auth_for[0]:
            sent["Authorization"] = auth_for[1]
        response = _send_once(method, current, sent, body, length, deadline, sink)
        location = response.headers.get("location")
        if method != "GET" or response.status not in (301, 302, 303, 307, 308) or not location:
            return response
        following = urljoin(current, location)
        if origin(following) != origin(url):
            return Response(404, "redirected to another host", {}, b"", current)
        current = following
    raise TransportError(f"more than {_MAX_REDIRECTS} redirects")
