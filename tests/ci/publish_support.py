"""Test support for torch-fl-publish: small real wheels, a real pypiserver, a fault-injecting proxy.

The proxy sits between torch-fl-publish and pypiserver on 127.0.0.1 and, per
connection, either pipes bytes through or injects one fault chosen by rules:
a connection reset in the middle of an upload body, an HTTP 503, or a stall
past the client's timeout (before forwarding, or after the server has already
stored the upload, so that only the response is lost).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import importlib.util
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- the publish command -------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
PUBLISH_SRC = REPO / "publish" / "src"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def publish_env(server: PyPIServer | None, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TWINE_", "TORCH_FL_PUBLISH_"))
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    # No keyring lookups from tests: the null backend answers "no password" at once.
    env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"
    env["NO_PROXY"] = "127.0.0.1,localhost"
    # The interpreter's scripts (torch-fl-preflight, when installed) are on PATH, as in an activated venv.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if importlib.util.find_spec("torch_fl_publish") is None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PUBLISH_SRC), env.get("PYTHONPATH")]))
    if server is not None:
        env["TORCH_FL_PUBLISH_USERNAME"] = server.username
        env["TORCH_FL_PUBLISH_PASSWORD"] = server.password
    env.update(extra)
    return env


def run_publish(args: list[str], env: dict[str, str], timeout: float = 120) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "torch_fl_publish", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


# -- wheels -------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def make_wheel(
    out: Path,
    name: str = "torch_fl",
    version: str = "2.13.0+host",
    tag: str = "cp311-cp311-manylinux_2_28_x86_64",
    salt: str = "",
    payload_size: int = 2048,
    platform: str | None = None,
) -> Path:
    """A small, valid wheel (METADATA, WHEEL, RECORD; a module and a binary-ish payload).

    ``salt`` changes the content (and so the sha256) but not the file name.
    ``platform`` adds a ``torch_fl/compatibility.json`` naming it (only that field: enough for the lane check).
    Members get a fixed timestamp, so the same arguments give the same bytes.
    """
    dist = f"{name}-{version}"
    files: dict[str, bytes] = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n# {salt}\n'.encode(),
        f"{name}/payload.bin": hashlib.shake_256(f"{name}{version}{salt}".encode()).digest(payload_size),
        f"{dist}.dist-info/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {name.replace('_', '-')}\n"
            f"Version: {version}\n"
            "Summary: test wheel for torch-fl-publish\n"
            "Classifier: Programming Language :: Python :: 3\n"
            "Classifier: Operating System :: POSIX :: Linux\n"
            "Requires-Dist: torch<2.14,>=2.13\n"
            "Description-Content-Type: text/plain\n"
            "\n"
            "A wheel built by the test fixture.\n"
        ).encode(),
        f"{dist}.dist-info/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: tests/ci\nRoot-Is-Purelib: false\nTag: {tag}\n"
        ).encode(),
    }
    if platform is not None:
        files[f"{name}/compatibility.json"] = json.dumps({"schema_version": 1, "platform": platform}).encode()
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    record += f"{dist}.dist-info/RECORD,,\n"
    files[f"{dist}.dist-info/RECORD"] = record.encode()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, data in files.items():
            info = zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return path


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- pypiserver ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class PyPIServer:
    """A pypiserver on 127.0.0.1 that requires a password to upload, list and download."""

    root: Path
    username: str = "publisher"
    password: str = "s3cret-Pa55-for-tests"
    port: int = 0
    hash_algo: str = "sha256"
    """What the simple page's link fragments carry (``md5``, or ``off`` for none)."""
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def packages(self) -> Path:
        return self.root / "packages"

    def start(self) -> None:
        self.packages.mkdir(parents=True, exist_ok=True)
        htpasswd = self.root / "htpasswd"
        # passlib is imported in a child: importing it here would raise the stdlib
        # `crypt` DeprecationWarning, which the suite's filterwarnings=error turns fatal.
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from passlib.apache import HtpasswdFile; "
                "h = HtpasswdFile(sys.argv[1], new=True); h.set_password(sys.argv[2], sys.argv[3]); h.save()",
                str(htpasswd),
                self.username,
                self.password,
            ],
            check=True,
        )
        self.log_path = self.root / "pypiserver.log"
        for _ in range(5):
            self.port = free_port()
            with self.log_path.open("wb") as log:
                self.process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "pypiserver",
                        "run",
                        "--interface",
                        "127.0.0.1",
                        "--port",
                        str(self.port),
                        "--passwords",
                        str(htpasswd),
                        "--authenticate",
                        "update,list,download",
                        "--disable-fallback",
                        "--hash-algo",
                        self.hash_algo,
                        str(self.packages),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if self._wait_ready():
                return
            self.stop()
        raise RuntimeError(f"pypiserver did not start; see {self.log_path}")

    def _wait_ready(self, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError):
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                try:
                    connection.request("GET", "/health")
                    if connection.getresponse().status == 200:
                        return True
                finally:
                    connection.close()
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def simple_page(self, project: str) -> tuple[int, str]:
        """The project's simple page, read directly (never through a proxy)."""
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", f"/simple/{project}/", headers={"Authorization": f"Basic {auth}"})
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()


# -- fault-injecting proxy -------------------------------------------------------


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
            # Enough of the body to see which file it carries (the name precedes the content).
            while len(body) < min(length, 65536):
                chunk = client.recv(65536)
                if not chunk:
                    break
                body += chunk
            fault = self._choose(method, head + body)
            what = fault.kind if fault else "pass"
            with self._lock:
                self.requests.append((method, path, what))
                if method == "POST":
                    self._in_flight += 1
                    self.max_uploads_in_flight = max(self.max_uploads_in_flight, self._in_flight)
            try:
                self._handle(client, fault, head, body, length)
            finally:
                if method == "POST":
                    with self._lock:
                        self._in_flight -= 1
        except OSError:
            pass
        finally:
            client.close()

    def _handle(self, client: socket.socket, fault: Fault | None, head: bytes, body: bytes, length: int) -> None:
        kind = fault.kind if fault is not None else "pass"
        if kind == "503":
            self._drain(client, length - len(body))
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
