"""Reading simple pages (PEP 503 HTML, PEP 691 JSON) and the upload form: pure logic."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.publish import PUBLISH_SRC, make_wheel

sys.path.insert(0, str(PUBLISH_SRC))  # when torch-fl-publish is not installed
from torch_fl_publish import credentials, index, publish, release, upload, wheels

BASE = "https://idx.example/simple/torch-fl/"
SHA = "a" * 64


def test_html_page_with_and_without_hashes() -> None:
    page = f"""<!DOCTYPE html><html><body>
    <a href="../../packages/torch_fl-2.13.0%2Bhost-py3-none-any.whl#sha256={SHA.upper()}">torch_fl-2.13.0+host-py3-none-any.whl</a><br>
    <a href="https://files.example/x/torch_fl-2.13.0+cuda13.0-py3-none-any.whl#md5=00">torch_fl-2.13.0+cuda13.0-py3-none-any.whl</a>
    <a href="/y/torch_fl-2.12.0-py3-none-any.whl"></a>
    </body></html>"""
    files = index.parse_html(page, BASE)
    assert [f.filename for f in files] == [
        "torch_fl-2.13.0+host-py3-none-any.whl",
        "torch_fl-2.13.0+cuda13.0-py3-none-any.whl",
        "torch_fl-2.12.0-py3-none-any.whl",
    ]
    assert (
        files[0].sha256 == SHA
        and files[0].url == "https://idx.example/packages/torch_fl-2.13.0%2Bhost-py3-none-any.whl"
    )
    assert files[1].sha256 is None and files[2].sha256 is None


def test_json_page() -> None:
    page = json.dumps(
        {
            "meta": {"api-version": "1.1"},
            "name": "torch-fl",
            "files": [
                {
                    "filename": "torch_fl-2.13.0+host-py3-none-any.whl",
                    "url": "../../p/a.whl",
                    "hashes": {"sha256": SHA},
                },
                {"filename": "torch_fl-2.13.0-py3-none-any.whl", "url": "b.whl", "hashes": {}},
            ],
        }
    ).encode()
    files = index.parse_json(page, BASE)
    assert files[0].sha256 == SHA and files[0].url == "https://idx.example/p/a.whl"
    assert files[1].sha256 is None


def test_upload_form_carries_metadata_and_hashes(tmp_path: Path) -> None:
    wheel = wheels.inspect(make_wheel(tmp_path))
    parts, length = upload._form(wheel, "BOUNDARY")
    head, path, tail = parts
    assert isinstance(head, bytes) and isinstance(tail, bytes) and path == wheel.path
    assert length == len(head) + wheel.size + len(tail)
    text = head.decode()
    for name, value in [
        (":action", "file_upload"),
        ("protocol_version", "1"),
        ("name", "torch-fl"),
        ("version", "2.13.0+host"),
        ("filetype", "bdist_wheel"),
        ("pyversion", "cp311"),
        ("sha256_digest", wheel.sha256),
        ("requires_dist", "torch<2.14,>=2.13"),
    ]:
        assert f'name="{name}"\r\n\r\n{value}\r\n' in text
    assert text.count('name="classifiers"') == 2
    assert 'name="description"\r\n\r\nA wheel built by the test fixture.' in text


def test_backoff_grows_and_is_capped() -> None:
    policy = upload.RetryPolicy(backoff=1.0, backoff_max=8.0)
    assert 0.5 <= policy.delay(1) <= 1.0
    assert 2.0 <= policy.delay(3) <= 4.0
    assert policy.delay(10) <= 8.0


def test_credentials_order_and_repr() -> None:
    env = {"TWINE_USERNAME": "t", "TWINE_PASSWORD": "tp", "TORCH_FL_PUBLISH_PASSWORD": "fp"}
    found = credentials.resolve("https://idx.example/", env)
    assert found is not None and (found.username, found.password, found.source) == (
        "t",
        "fp",
        "TORCH_FL_PUBLISH_PASSWORD",
    )
    assert "fp" not in repr(found)
    assert credentials.redact(f"x {found.authorization()} fp", found) == "x Basic *** ***"
    url, from_url = credentials.split_url_credentials("https://u:pw@idx.example:8443/lane/")
    assert url == "https://idx.example:8443/lane/" and from_url is not None and from_url.password == "pw"


@pytest.mark.parametrize(
    ("version", "ok"),
    [("2.13.0+host", True), ("2.13.0", True), ("2.13.0.post1+host", False), ("2.13.1+cuda13.0", False)],
)
def test_version_gate(tmp_path: Path, version: str, ok: bool) -> None:
    wheel = wheels.inspect(make_wheel(tmp_path, version=version))
    assert (release.check_version(wheel, release.parse_tag("v2.13.0")) is None) is ok


def test_failed_checks_are_found_in_any_shape() -> None:
    doc = {
        "version": 1,
        "wheels": [{"checks": [{"id": "wheel.record", "status": "fail"}, {"id": "x", "status": "pass"}]}],
        "groups": {"elf": [{"id": "elf.symbols", "result": "FAIL"}]},
    }
    assert release._failed_checks(doc) == ["elf.symbols", "wheel.record"]


class _Listing:
    """An index whose simple page is given (pure logic: what verification concludes from it)."""

    def __init__(self, files: list[index.IndexFile]):
        self._files = files

    def files(self, project: str) -> list[index.IndexFile]:
        return self._files

    def sha256_of(self, file: index.IndexFile) -> str:
        assert file.sha256 is not None
        return file.sha256

    def project_url(self, project: str) -> str:
        return f"https://idx.example/simple/{project}/"


@pytest.mark.parametrize(
    ("listing", "status", "detail"),
    [
        ("once", "uploaded", ""),
        ("missing", "unverified", "not listed on the index after upload"),
        ("twice", "unverified", "listed 2 times on the index"),
        ("other", "unverified", "the index serves another sha256"),
    ],
)
def test_verification_after_upload(tmp_path: Path, listing: str, status: str, detail: str) -> None:
    wheel = wheels.inspect(make_wheel(tmp_path))
    mine = index.IndexFile(wheel.filename, "u", wheel.sha256)
    files = {"once": [mine], "missing": [], "twice": [mine, mine], "other": [index.IndexFile(wheel.filename, "u", SHA)]}
    outcome = upload.Outcome(wheel, upload.Status.UPLOADED, "", 1, wheel.sha256)
    publish._verify([outcome], _Listing(files[listing]), upload.RetryPolicy(attempts=1), lambda _: None)  # type: ignore[arg-type]
    assert (outcome.status.value, outcome.detail, outcome.verified) == (status, detail, listing == "once")


def test_keyring_is_asked_only_without_a_password(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    def fake_keyring(service: str, username: str) -> str | None:
        asked.append((service, username))
        return "from-keyring"

    monkeypatch.setattr(credentials, "_from_keyring", fake_keyring)
    found = credentials.resolve("https://idx.example/host/", {"TORCH_FL_PUBLISH_USERNAME": "ci"})
    assert found is not None and (found.username, found.source) == ("ci", "keyring")
    assert asked == [("https://idx.example/host/", "ci")]
    assert credentials.resolve("https://idx.example/", {"TWINE_PASSWORD": "t"}).source == "TWINE_PASSWORD"  # type: ignore[union-attr]
    assert len(asked) == 1
