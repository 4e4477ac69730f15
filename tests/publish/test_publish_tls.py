"""HTTPS: the upload and the simple-page reads over TLS, with the certificate verified."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from fault_proxy import fault_proxy
from support.publish import PyPIServer, publish_env, run_publish, sha256_file

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl (to make a test certificate) is not installed")


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_publish_over_https(pypi: PyPIServer, wheels: list[Path], certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with fault_proxy(pypi.port, [], tls=context) as proxy:
        assert proxy.url.startswith("https://")
        args = ["--lane", "host", "--repository-url", proxy.url, "--json", "--retries", "0", *map(str, wheels)]

        untrusted = run_publish(args, publish_env(pypi))
        assert untrusted.returncode == 1, "an unknown certificate must not be accepted"
        assert all("CERTIFICATE_VERIFY_FAILED" in f["detail"] for f in untrusted.json["files"])

        trusted = run_publish(args, publish_env(pypi, SSL_CERT_FILE=str(cert)))
    assert trusted.returncode == 0, trusted.stderr
    assert all(f["status"] == "uploaded" and f["verified"] for f in trusted.json["files"])
    for wheel in wheels:
        assert sha256_file(pypi.packages / wheel.name) == sha256_file(wheel)
