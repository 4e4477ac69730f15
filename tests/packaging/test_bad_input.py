"""Unusable input exits 2 with one line naming the problem and the fix, before compiling.

Each case runs the real command on the real source tree without --from-wheel,
so a check that came too late would start the C++ build; ``--out`` must be
left exactly as it was.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from packaging_support import BUNDLERS, build_env, run_build
from synthetic import make_sdk_tree
from torch_fl_packaging.recipe import load_recipe


def _assert_usage_error(res, needle: str, out: Path, before: set[str]) -> None:
    assert res.rc == 2, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr and needle in lines[0] and " — " in lines[0]
    assert {p.name for p in out.iterdir()} == before


@pytest.fixture
def out(tmp_path: Path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    (d / "keep.txt").write_text("untouched")
    return d


@pytest.fixture
def metax_sdk(tmp_path: Path) -> Path:
    root = tmp_path / "maca"
    make_sdk_tree(root, load_recipe("metax", BUNDLERS), "3.8.1")
    return root


def test_unknown_platform(out: Path) -> None:
    res = run_build(["--platform", "metx", "--out", str(out)])
    _assert_usage_error(res, "unknown platform (metx) — did you mean 'metax'?", out, {"keep.txt"})


def test_missing_sdk_root(out: Path, tmp_path: Path) -> None:
    res = run_build(["--platform", "ascend", "--sdk-root", str(tmp_path / "nope"), "--out", str(out)])
    _assert_usage_error(res, "SDK root not found", out, {"keep.txt"})


def test_missing_default_sdk_prefix_names_the_variable(out: Path) -> None:
    env = build_env()
    env.pop("ASCEND_TOOLKIT_HOME", None)
    res = run_build(["--platform", "ascend", "--out", str(out)], env=env)
    _assert_usage_error(res, "ASCEND_TOOLKIT_HOME", out, {"keep.txt"})


@pytest.mark.parametrize("placeholder", ["unknown", "latest", "LATEST", "*"])
def test_placeholder_sdk_version(out: Path, metax_sdk: Path, placeholder: str) -> None:
    res = run_build(["--platform", "metax", "--sdk-root", str(metax_sdk), "--sdk-version", placeholder,
                     "--out", str(out)])
    _assert_usage_error(res, "not a concrete version", out, {"keep.txt"})


def test_placeholder_in_the_sdk_version_file(out: Path, metax_sdk: Path) -> None:
    (metax_sdk / "Version.txt").write_text("Version: latest\n")
    res = run_build(["--platform", "metax", "--sdk-root", str(metax_sdk), "--out", str(out)])
    # "latest" does not match the recipe's version pattern: the version is unknown, and
    # the wheel version cannot be formed without it.
    _assert_usage_error(res, "cannot read the maca SDK version", out, {"keep.txt"})


@pytest.mark.compile
def test_vendor_torch_of_another_version(out: Path, metax_sdk: Path, tmp_path: Path, torch_lib: Path) -> None:
    fork = tmp_path / "fork" / "torch"
    (fork / "lib").mkdir(parents=True)
    shutil.copyfile(torch_lib / "libc10.so", fork / "lib" / "libc10.so")
    (fork / "version.py").write_text("__version__ = '2.12.1'\ngit_version = 'abcdef0'\n")
    res = run_build(["--platform", "metax", "--sdk-root", str(metax_sdk), "--vendor-torch", str(fork / "lib"),
                     "--out", str(out)])
    _assert_usage_error(res, "vendor torch is another version", out, {"keep.txt"})
    assert "2.12.1" in res.stderr


def test_missing_patchelf(out: Path, tmp_path: Path) -> None:
    env = build_env()
    env["PATCHELF"] = str(tmp_path / "no-patchelf")
    start = time.monotonic()
    res = run_build(["--platform", "host", "--out", str(out)], env=env)
    _assert_usage_error(res, "patchelf not found", out, {"keep.txt"})
    assert time.monotonic() - start < 30  # nothing was compiled


def test_out_is_not_created_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "never"
    res = run_build(["--platform", "nope", "--out", str(out)])
    assert res.rc == 2 and not out.exists()


def test_json_error_document(out: Path) -> None:
    res = run_build(["--platform", "metx", "--out", str(out), "--json"])
    assert res.rc == 2
    doc = res.json
    assert doc["version"] == 1 and doc["ok"] is False and doc["exit_code"] == 2
    assert doc["error"]["type"] == "RecipeError" and doc["error"]["value"] == "metx"


# -- --from-wheel is the user's input: a broken file is refused at configure (exit 2) ----------

@pytest.mark.compile
def test_truncated_from_wheel(out: Path, platform_inputs) -> None:
    inputs = platform_inputs("host")
    wheel = inputs.plugin_wheel
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])  # a download cut short
    res = run_build([*inputs.args, "--out", str(out)])
    _assert_usage_error(res, "--from-wheel is not a readable zip archive", out, {"keep.txt"})
    assert "BadZipFile" not in res.stderr and "internal error" not in res.stderr


@pytest.mark.compile
def test_from_wheel_with_a_corrupt_member(out: Path, platform_inputs) -> None:
    inputs = platform_inputs("host")
    wheel = inputs.plugin_wheel
    data = bytearray(wheel.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside some member's compressed data: the archive opens, the CRC fails
    wheel.write_bytes(bytes(data))
    res = run_build([*inputs.args, "--out", str(out)])
    assert res.rc == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--from-wheel" in lines[0] and "Traceback" not in res.stderr


@pytest.mark.compile
@pytest.mark.parametrize("name", ["torch_fl.whl", "torch_fl-2.13.0+host.whl", "not-a-wheel-at-all.zip"])
def test_from_wheel_with_a_bad_name(out: Path, platform_inputs, name: str) -> None:
    inputs = platform_inputs("host")
    renamed = inputs.plugin_wheel.rename(inputs.plugin_wheel.with_name(name))
    args = [str(renamed) if a == str(inputs.plugin_wheel) else a for a in inputs.args]
    res = run_build([*args, "--out", str(out)])
    _assert_usage_error(res, "--from-wheel: invalid wheel file name", out, {"keep.txt"})


@pytest.mark.compile
def test_from_wheel_of_another_version(out: Path, platform_inputs) -> None:
    inputs = platform_inputs("host")
    wheel = inputs.plugin_wheel
    other = wheel.with_name(wheel.name.replace("+host", "+elsewhere", 1))
    wheel.rename(other)
    args = [str(other) if a == str(wheel) else a for a in inputs.args]
    res = run_build([*args, "--out", str(out)])
    _assert_usage_error(res, "--from-wheel: the wheel has another version than configured", out, {"keep.txt"})


def test_from_wheel_directory(out: Path, tmp_path: Path) -> None:
    res = run_build(["--platform", "host", "--from-wheel", str(tmp_path), "--out", str(out)])
    _assert_usage_error(res, "--from-wheel is a directory", out, {"keep.txt"})
