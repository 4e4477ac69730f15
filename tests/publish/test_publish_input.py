"""Unusable input: one line, the offending value and the fix, exit 2, no traceback, nothing sent."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from support.publish import make_wheel, publish_env, run_publish

URL = "http://127.0.0.1:9/"  # discard port: nothing may be sent anyway


def one_line_exit_2(args: list[str], *expected: str) -> None:
    done = run_publish(args, publish_env(None))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert " — " in lines[-1]
    for text in expected:
        assert text in lines[-1]


def test_missing_wheel(tmp_path: Path) -> None:
    one_line_exit_2(
        ["--lane", "host", "--repository-url", URL, str(tmp_path / "nope.whl")], "no such wheel", "nope.whl"
    )


def test_not_a_wheel_name(tmp_path: Path) -> None:
    bogus = tmp_path / "torch_fl.whl"
    bogus.write_bytes(b"x")
    one_line_exit_2(["--lane", "host", "--repository-url", URL, str(bogus)], "not a wheel file name", "torch_fl.whl")


def test_not_a_zip(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "d")
    wheel.write_bytes(b"not a zip at all")
    one_line_exit_2(["--lane", "host", "--repository-url", URL, str(wheel)], "not a readable zip")


def test_metadata_disagrees_with_file_name(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "d", version="2.13.0+host")
    renamed = wheel.with_name(wheel.name.replace("2.13.0+host", "2.13.1+host"))
    wheel.rename(renamed)
    one_line_exit_2(["--lane", "host", "--repository-url", URL, str(renamed)], "METADATA disagrees", "never rename")


def test_no_metadata(tmp_path: Path) -> None:
    wheel = tmp_path / "torch_fl-2.13.0+host-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch_fl/__init__.py", "")
    one_line_exit_2(["--lane", "host", "--repository-url", URL, str(wheel)], "METADATA")


def test_two_different_wheels_with_one_name(tmp_path: Path) -> None:
    a = make_wheel(tmp_path / "a", salt="1")
    b = make_wheel(tmp_path / "b", salt="2")
    one_line_exit_2(["--lane", "host", "--repository-url", URL, str(a), str(b)], "share one file name")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--lane", "Host!", "--repository-url", URL], "not a lane name"),
        (["--lane", "host", "--repository-url", "ftp://example/"], "not an http(s) URL"),
        (["--lane", "host", "--repository-url", URL, "--concurrency", "0"], "--concurrency"),
        (["--lane", "host", "--repository-url", URL, "--timeout", "0"], "--timeout"),
    ],
)
def test_bad_flags(tmp_path: Path, flags: list[str], expected: str) -> None:
    one_line_exit_2([*flags, str(make_wheel(tmp_path / "d"))], expected)


def test_unreachable_index_names_every_file(tmp_path: Path) -> None:
    wheels = [make_wheel(tmp_path / "d", version=v) for v in ("2.13.0+host", "2.13.0+cuda13.0")]
    done = run_publish(
        [
            "--lane",
            "host",
            "--repository-url",
            URL,
            "--retries",
            "1",
            "--backoff",
            "0",
            "--timeout",
            "2",
            "--json",
            *map(str, wheels),
        ],
        publish_env(None),
    )
    assert done.returncode == 1
    assert sorted(done.json["not_published"]) == sorted(w.name for w in wheels)
    for wheel in wheels:
        assert f"not published: {wheel.name}" in done.stderr
