"""torch-fl-publish against a real index, shared by the publish tests and the release-step tests.

A pypiserver on 127.0.0.1 that requires a password (`PyPIServer`), small valid wheels to
upload (`make_wheel`), the environment the command runs in (`publish_env`) and a run of it
(`run_publish`).
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
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.paths import REPO
from support.wheels import write_wheel

#: The publish distribution's sources, put on PYTHONPATH where torch-fl-publish is not installed.
PUBLISH_SRC = REPO / "publish" / "src"


@dataclass
class Run:
    """A finished torch-fl-publish run; `json` parses its stdout (the `--json` document)."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def publish_env(server: PyPIServer | None, **extra: str) -> dict[str, str]:
    """This process's environment for a torch-fl-publish run: no inherited credentials or proxies,
    `server`'s username and password (when given), then `extra`."""
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
    """`python -m torch_fl_publish ARGS` in `env`, in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-m", "torch_fl_publish", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def make_wheel(
    out: Path,
    name: str = "torch_fl",
    version: str = "2.13.0+host",
    tag: str = "cp311-cp311-manylinux_2_28_x86_64",
    salt: str = "",
    payload_size: int = 2048,
    platform: str | None = None,
) -> Path:
    """A small, valid wheel (METADATA, WHEEL, RECORD; a module and a binary-ish payload) in `out`.

    ``salt`` changes the content (and so the sha256) but not the file name.
    ``platform`` adds a ``torch_fl/compatibility.json`` naming it (only that field: enough for the lane check).
    The same arguments give the same bytes.
    """
    files: dict[str, bytes | Path] = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n# {salt}\n'.encode(),
        f"{name}/payload.bin": hashlib.shake_256(f"{name}{version}{salt}".encode()).digest(payload_size),
    }
    if platform is not None:
        files[f"{name}/compatibility.json"] = json.dumps({"schema_version": 1, "platform": platform}).encode()
    metadata = (
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
    )
    return write_wheel(out / f"{name}-{version}-{tag}.whl", files, name=name, version=version, tag=tag,
                       metadata=metadata, generator="tests/support/publish.py")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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


@contextlib.contextmanager
def serving(root: Path) -> Iterator[PyPIServer]:
    """A started `PyPIServer` keeping its packages under `root`, stopped on exit."""
    server = PyPIServer(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()
