"""A fault-injecting proxy between torch-fl-publish and a test index on 127.0.0.1.

Per connection it either pipes bytes through or injects one fault chosen by rules:
a connection reset in the middle of an upload body, an HTTP 503, or a stall past
the client's timeout (before forwarding, or after the server has already stored
the upload, so that only the response is lost).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Fault:
    """Inject ``kind`` into the next ``times`` connections whose request matches.

    kind: ``reset`` (forward the head and part of the body, then reset both
    connections), ``503`` (read the request, answer 503), ``delay`` (wait 0.3 s,
    then pass the request through), ``stall_request``
    (read the request, forward nothing, answer nothing), ``stall_response``
    (forward the request, let the server store it, withhold its response).
    """

    kind: str
    method: str = "POST"
    match: bytes | None = None
    times: int = 1
    fired: int = 0


def _names_its_file(body: bytes) -> bool:
    """Whether ``body`` (the start of a multipart upload) holds the whole header line naming the uploaded file."""
    at = body.find(b'filename="')
    return at >= 0 and body.find(b"\r\n", at) >= 0


@dataclass
class FaultProxy:
    upstream_port: int
    stall_seconds: float = 5.0
    faults: list[Fault] = field(default_factory=list)
    port: int = 0
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, what happened)
    max_uploads_in_flight: int = 0
    _in_flight: int = 0
    tls: ssl.SSLContext | None = None
    """Serve HTTPS to the client (the server behind stays plain HTTP)."""
    _listener: socket.socket | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _closing: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/"

    def start(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(32)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        self._closing.set()
        for thread in list(self._threads):
            thread.join(timeout=10)
        if self._listener is not None:
            self._listener.close()

    def count(self, method: str) -> int:
        with self._lock:
            return sum(1 for m, _, _ in self.requests if m == method)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            with self._lock:
                self._threads.append(thread)
            thread.start()

    def _choose(self, method: str, prefix: bytes) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.fired >= fault.times or fault.method != method:
                    continue
                if fault.match is not None and fault.match not in prefix:
                    continue
                fault.fired += 1
                return fault
        return None

    @staticmethod
    def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return data, b""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n", rest

    def _serve(self, client: socket.socket) -> None:
        try:
            client.settimeout(30)
            if self.tls is not None:
                client = self.tls.wrap_socket(client, server_side=True)
            head, body = self._read_head(client)
            if not head:
                return
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, path = (request_line.split(" ") + ["", ""])[:2]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == b"content-length":
                    length = int(value.strip())
            # Enough of the body to see which file it carries: up to the end of the file part's header line
            # (its filename="..."), which comes after the metadata fields, a long description among them.
            while len(body) < length and not _names_its_file(body):
                chunk = client.recv(65536)
                if not chunk:
                    break
                body += chunk
            fault = self._choose(method, head + body)
            what = fault.kind if fault else "pass"
            counted = method == "POST"
            with self._lock:
                self.requests.append((method, path, what))
                if counted:
                    self._in_flight += 1
                    self.max_uploads_in_flight = max(self.max_uploads_in_flight, self._in_flight)

            def answered() -> None:
                # An upload stops counting before its answer goes back: the client may start
                # the next one as soon as it has read it, before this thread runs again.
                nonlocal counted
                if counted:
                    counted = False
                    with self._lock:
                        self._in_flight -= 1

            try:
                self._handle(client, fault, head, body, length, answered)
            finally:
                answered()
        except OSError:
            pass
        finally:
            client.close()

    def _handle(self, client: socket.socket, fault: Fault | None, head: bytes, body: bytes, length: int,
                answered: Callable[[], None]) -> None:
        kind = fault.kind if fault is not None else "pass"
        if kind == "503":
            self._drain(client, length - len(body))
            answered()
            client.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 19\r\n"
                b"Connection: close\r\n\r\nservice unavailable"
            )
            return
        if kind == "stall_request":
            self._closing.wait(self.stall_seconds)
            return
        if kind == "delay":
            self._closing.wait(0.3)
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
        try:
            if kind == "reset":
                upstream.sendall(head + body[: max(1, len(body) // 2)])
                time.sleep(0.05)
                for sock in (upstream, client):
                    # SO_LINGER with a zero timeout makes close() send RST, not FIN.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            upstream.sendall(head + body)
            self._copy(client, upstream, length - len(body))
            response = self._read_all(upstream)
            if kind == "stall_response":
                self._closing.wait(self.stall_seconds)
                return
            answered()
            client.sendall(response)
        finally:
            upstream.close()

    @staticmethod
    def _drain(sock: socket.socket, remaining: int) -> None:
        while remaining > 0:
            chunk = sock.recv(min(65536, remaining))
            if not chunk:
                return
            remaining -= len(chunk)

    @staticmethod
    def _copy(source: socket.socket, target: socket.socket, remaining: int) -> None:
        while remaining > 0:
            chunk = source.recv(min(65536, remaining))
            if not chunk:
                return
            target.sendall(chunk)
            remaining -= len(chunk)

    @staticmethod
    def _read_all(sock: socket.socket) -> bytes:
        # The test server answers with Connection: close (wsgiref, HTTP/1.0 style),
        # so the response ends when the server closes.
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


@contextlib.contextmanager
def fault_proxy(
    upstream_port: int, faults: list[Fault], stall_seconds: float = 5.0, tls: ssl.SSLContext | None = None
) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream_port, stall_seconds=stall_seconds, faults=faults, tls=tls)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
