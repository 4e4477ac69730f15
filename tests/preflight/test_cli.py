"""The whole command on real wheels: outcomes, exit codes, --json, --markdown-table, --installed."""

from __future__ import annotations

import json
import shutil
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import _preflight_builders as B
from support.elf import compile_c

pytestmark = pytest.mark.compile


def _json(args: list[str], **kw: Any) -> tuple[int, dict[str, Any]]:
    r = B.run_preflight([*args, "--json"], **kw)
    doc = json.loads(r.stdout)
    schema = json.loads(resources.files("torch_fl_preflight").joinpath("report.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["version"] == 1
    return r.returncode, doc


def _status(doc: dict[str, Any], subject: int = 0) -> dict[str, str]:
    return {f["id"]: f["status"] for f in doc["subjects"][subject]["findings"]}


def _finding(doc: dict[str, Any], fid: str) -> dict[str, Any]:
    return next(f for f in doc["subjects"][0]["findings"] if f["id"] == fid)


def test_host_wheel_passes(host_wheel: Path, target_python: str) -> None:
    code, doc = _json(["--wheel", str(host_wheel), "--python", target_python])
    st = _status(doc)
    assert code == 0, doc
    for fid in ("wheel.identity", "wheel.record", "manifest.metadata", "manifest.torch", "manifest.elf",
                "host.tags", "host.torch", "elf.needed", "elf.versions", "elf.symbols", "elf.rpath"):
        assert st[fid] == "pass", (fid, doc)
    ext = doc["subjects"][0]["facts"]["external_libraries"]
    plugin = next(k for k in ext if "/_C." in k)
    assert ext[plugin]["libtorch_cpu.so"].endswith("/torch/lib/libtorch_cpu.so")
    assert "libflagos_rt.so" not in ext[plugin]  # found inside the wheel


def test_text_report_groups_and_summarises(host_wheel: Path, target_python: str) -> None:
    r = B.run_preflight(["--wheel", str(host_wheel), "--python", target_python])
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith(host_wheel.name)
    assert lines[-1].startswith("OK: ")
    assert "ok   elf.symbols" in r.stdout


def test_flipped_byte_fails_record_and_manifest_hash(host_wheel: Path, target_python: str, tmp_path: Path) -> None:
    def flip(name: str, data: bytes) -> bytes:
        if name.endswith("libflagos_dep.so"):
            b = bytearray(data)
            b[-1] ^= 0xFF  # past every table the loader reads: only the hashes can tell
            return bytes(b)
        return data

    bad = B.rewrite_wheel(host_wheel, tmp_path / host_wheel.name, flip)
    code, doc = _json(["--wheel", str(bad), "--python", target_python])
    st = _status(doc)
    assert code == 1
    assert st["wheel.record"] == "fail" and st["manifest.elf"] == "fail"
    assert any("libflagos_dep.so" in d for d in _finding(doc, "wheel.record")["details"])
    assert st["elf.symbols"] == "pass"  # the library itself still loads


def test_wrong_python_fails_the_tag_check(natives: B.Natives, target_python: str, tmp_path: Path) -> None:
    spec = B.WheelSpec(B.host_wheel_files(natives), tag="cp38-cp38-manylinux_2_28_x86_64")
    whl = B.write_wheel(tmp_path, spec)
    code, doc = _json(["--wheel", str(whl), "--python", target_python])
    assert code == 1
    assert _status(doc)["host.tags"] == "fail"
    assert "cp38-cp38-manylinux_2_28_x86_64" in _finding(doc, "host.tags")["message"]


def test_newer_glibc_tag_than_host_fails(natives: B.Natives, target_python: str, tmp_path: Path) -> None:
    whl = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives),
                                              tag=f"{B.PY_TAG}-{B.PY_TAG}-manylinux_2_99_x86_64"))
    code, doc = _json(["--wheel", str(whl), "--python", target_python])
    assert code == 1 and _status(doc)["host.tags"] == "fail"


def test_other_torch_build_fails_naming_the_missing_symbol(host_wheel: Path, target_python_next: str) -> None:
    code, doc = _json(["--wheel", str(host_wheel), "--python", target_python_next])
    assert code == 1
    f = _finding(doc, "elf.symbols")
    assert f["status"] == "fail"
    assert any(d.endswith(": fl_torch_op_v1") for d in f["details"])


def test_no_torch_in_target_fails(host_wheel: Path, tmp_path: Path) -> None:
    py = B.make_target_env(tmp_path / "bare", None)
    code, doc = _json(["--wheel", str(host_wheel), "--python", str(py)])
    st = _status(doc)
    assert code == 1 and st["host.torch"] == "fail" and st["elf.needed"] == "fail"
    assert any("libtorch_cpu.so not found" in d for d in _finding(doc, "elf.needed")["details"])


def _wheel_with(natives: B.Natives, tmp_path: Path, extra: dict[str, Path], **manifest: Any) -> Path:
    files = B.host_wheel_files(natives)
    files.update({k: v.read_bytes() for k, v in extra.items()})
    return B.write_wheel(tmp_path, B.WheelSpec(files, manifest_extra=manifest))


@pytest.mark.parametrize(("lib", "gate", "needle"), [
    ("needs_glibcxx99", "elf.versions", "lacks version GLIBCXX_9.9"),
    ("needs_missing_lib", "elf.needed", "libnot_on_this_host.so.1 not found"),
    ("undefined_sym", "elf.symbols", "fl_defined_nowhere"),
    ("abs_rpath", "elf.rpath", "/opt/elsewhere/lib"),
])
def test_each_gate_fails_on_its_broken_library(natives: B.Natives, target_python: str, tmp_path: Path,
                                               lib: str, gate: str, needle: str) -> None:
    whl = _wheel_with(natives, tmp_path, {f"torch_fl/lib/lib{lib}.so": getattr(natives, lib)})
    code, doc = _json(["--wheel", str(whl), "--python", target_python])
    f = _finding(doc, gate)
    assert code == 1 and f["status"] == "fail", doc
    assert any(needle in d for d in f["details"]), f


def test_absolute_rpath_under_a_declared_prefix_passes(natives: B.Natives, target_python: str,
                                                       tmp_path: Path) -> None:
    whl = _wheel_with(natives, tmp_path, {"torch_fl/lib/libabs_rpath.so": natives.abs_rpath},
                      runtime={"directories": [], "prefixes": ["/opt/elsewhere"]})
    _code, doc = _json(["--wheel", str(whl), "--python", target_python])
    assert _status(doc)["elf.rpath"] == "pass"


def test_runtime_directory_from_manifest_and_env(natives: B.Natives, target_python: str, tmp_path: Path) -> None:
    """native-sdk: the plugin needs a vendor library found only through the manifest's runtime directory."""
    sdk = tmp_path / "sdk"
    vendor = compile_c(sdk / "lib" / "libvendor_rt.so.1", "int vendor_count(void){return 1;}\n", soname="libvendor_rt.so.1")
    (sdk / "version.txt").write_text("release 3.8.1\n")
    plug = compile_c(tmp_path / "build" / "_C.so", "extern int vendor_count(void);\nint c(void){return vendor_count();}\n",
                     libs=["libvendor_rt.so.1"], libdirs=[vendor.parent])
    files = {"torch_fl/__init__.py": b"", f"torch_fl/_C.{B.PY_TAG}-x86_64-linux-gnu.so": plug.read_bytes()}
    spec = B.WheelSpec(files, version="2.13.0+vendor3.8.1", manifest_extra={
        "platform": "vendor", "kind": "native-sdk", "directory": None,
        "sdk": {"name": "vendor", "version": "3.8.1", "root": {"env": "VENDOR_HOME", "default": "/opt/vendor-absent"},
                "version_file": "version.txt", "version_pattern": r"release (\S+)"},
        "runtime": {"directories": [{"path": "/opt/vendor-absent/lib", "env": "VENDOR_HOME",
                                     "libraries": ["libvendor_rt.so.1"]}]}})
    whl = B.write_wheel(tmp_path / "w", spec)
    code, doc = _json(["--wheel", str(whl), "--python", target_python])
    st = _status(doc)
    assert code == 1 and st["host.runtime"] == "fail" and st["elf.needed"] == "fail"
    code, doc = _json(["--wheel", str(whl), "--python", target_python], env={"VENDOR_HOME": str(sdk)})
    st = _status(doc)
    assert code == 0, doc
    assert st["host.runtime"] == "pass" and st["host.sdk"] == "pass" and st["elf.needed"] == "pass"
    code, doc = _json(["--wheel", str(whl), "--python", target_python, "--sdk-version", "3.9.0", "--strict-tested"],
                      env={"VENDOR_HOME": str(sdk)})
    assert code == 1 and _status(doc)["host.sdk"] == "fail"


def test_platform_flag(host_wheel: Path, target_python: str) -> None:
    assert B.run_preflight(["--wheel", str(host_wheel), "--python", target_python, "--platform", "host"]).returncode == 0
    r = B.run_preflight(["--wheel", str(host_wheel), "--python", target_python, "--platform", "cuda"])
    assert r.returncode == 1 and "FAIL wheel.platform" in r.stdout


def test_release_requires_provenance(host_wheel: Path, natives: B.Natives, target_python: str,
                                     tmp_path: Path) -> None:
    r = B.run_preflight(["--wheel", str(host_wheel), "--python", target_python, "--release"])
    assert r.returncode == 1 and "FAIL manifest.provenance" in r.stdout and "companions.flaggems" in r.stdout
    pinned = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), manifest_extra={
        "companions": {"flaggems": "4.2.0", "flagtree": "0.3.0", "flagcx": "0.6.0"}}))
    r = B.run_preflight(["--wheel", str(pinned), "--python", target_python, "--release"])
    assert r.returncode == 0, r.stdout


def test_markdown_table(host_wheel: Path, natives: B.Natives, tmp_path: Path) -> None:
    pinned = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), manifest_extra={
        "companions": {"flaggems": "4.2.0", "flagtree": "0.3.0", "flagcx": "0.6.0"}}))
    r = B.run_preflight(["--markdown-table", "--release", "--wheel", str(pinned)])
    assert r.returncode == 0, r.stderr
    header, rule, row = r.stdout.strip().splitlines()
    assert header.startswith("| platform | wheel version | build torch | C++ ABI | SDK |")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:3] == ["host", "2.13.0+host", "2.13.0+cpu"] and cells[6] == "4.2.0"
    r = B.run_preflight(["--markdown-table", "--release", "--wheel", str(host_wheel)])
    assert r.returncode == 1 and "missing provenance" in r.stdout
    r = B.run_preflight(["--markdown-table", "--wheel", str(host_wheel)])  # not a release: listed, not failed
    assert r.returncode == 0 and "missing provenance" in r.stdout


def test_markdown_table_lists_recipe_only_platforms(host_wheel: Path) -> None:
    r = B.run_preflight(["--markdown-table", "--wheel", str(host_wheel), "--recipe-only", "metax",
                         "--recipe-only", "ascend"])
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ")][1:]
    cells = {row.strip("|").split("|")[0].strip(): [c.strip() for c in row.strip("|").split("|")] for row in rows}
    assert cells["metax"][-1] == "recipe only" and cells["ascend"][-1] == "recipe only"
    assert cells["host"][-1] == "ok"


def test_markdown_table_fails_a_wheel_whose_record_does_not_match(natives: B.Natives, tmp_path: Path) -> None:
    pinned = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), manifest_extra={
        "companions": {"flaggems": "4.2.0", "flagtree": "0.3.0", "flagcx": "0.6.0"}}))

    def flip(name: str, data: bytes) -> bytes:
        if name.endswith("libflagos_dep.so"):
            b = bytearray(data)
            b[-1] ^= 0xFF
            return bytes(b)
        return data

    (tmp_path / "bad").mkdir()
    bad = B.rewrite_wheel(pinned, tmp_path / "bad" / pinned.name, flip)
    r = B.run_preflight(["--markdown-table", "--release", "--wheel", str(pinned), str(bad)])
    assert r.returncode == 1, r.stdout + r.stderr
    table = [ln for ln in r.stdout.splitlines() if ln.startswith("| ")]
    assert table[0].endswith("| sha256 | check |")
    good_row, bad_row = ([c.strip() for c in row.strip("|").split("|")] for row in table[1:])
    assert good_row[-1] == "ok"
    assert bad_row[-1].startswith("FAIL ") and "wheel.record" in bad_row[-1] and "manifest.elf" in bad_row[-1]
    assert any(ln.startswith("failed: ") and "wheel.record" in ln for ln in r.stdout.splitlines())
    r = B.run_preflight(["--markdown-table", "--wheel", str(bad)])  # not a release: still a failed check
    assert r.returncode == 1


def test_markdown_table_refuses_json(host_wheel: Path) -> None:
    r = B.run_preflight(["--markdown-table", "--json", "--wheel", str(host_wheel)])
    assert r.returncode == 2
    line, = r.stderr.strip().splitlines()
    assert "--json" in line and "--markdown-table" in line and "Traceback" not in r.stderr
    doc = json.loads(r.stdout)  # --json asked: the error as one JSON document, no Markdown
    assert doc["ok"] is False and "|" not in r.stdout.replace(doc["error"], "")


def test_wheel_that_is_a_directory_exits_2(tmp_path: Path) -> None:
    r = B.run_preflight(["--wheel", str(tmp_path)])
    assert r.returncode == 2
    line, = r.stderr.strip().splitlines()
    assert "is a directory" in line and "*.whl" in line and "zip" not in line


def test_metadata_disagreement_fails(natives: B.Natives, target_python: str, tmp_path: Path) -> None:
    spec = B.WheelSpec(B.host_wheel_files(natives))
    m = B.manifest_for(spec.files, tags=[spec.tag], filename=spec.filename, requirements=["torch>=2.12"],
                       torch_requirement="torch>=2.12")
    spec.manifest_override = m
    whl = B.write_wheel(tmp_path, spec)
    code, doc = _json(["--wheel", str(whl), "--python", target_python])
    assert code == 1 and _status(doc)["manifest.metadata"] == "fail"


def test_pinning_kind_needs_exact_torch(natives: B.Natives, target_python: str, tmp_path: Path) -> None:
    whl = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), manifest_extra={"kind": "cuda-assets"}))
    code, doc = _json(["--wheel", str(whl), "--python", target_python])
    assert code == 1 and "is not exact" in _finding(doc, "manifest.torch")["message"]


def test_unrecorded_elf_fails(natives: B.Natives, target_python: str, tmp_path: Path) -> None:
    spec = B.WheelSpec(B.host_wheel_files(natives))
    spec.manifest_override = B.manifest_for(spec.files, tags=[spec.tag], filename=spec.filename,
                                            requirements=spec.requirements)
    spec.files["torch_fl/lib/libextra.so"] = natives.dep.read_bytes()
    whl = B.write_wheel(tmp_path, spec)
    code, doc = _json(["--wheel", str(whl), "--python", target_python])
    assert code == 1
    assert any("libextra.so: ELF file not recorded" in d for d in _finding(doc, "manifest.elf")["details"])


def test_installed_mode(host_wheel: Path, natives: B.Natives, tmp_path: Path) -> None:
    """Unpack the wheel into a target's site-packages as an installer would, then check it there."""
    py = B.make_target_env(tmp_path / "env", natives.torch_lib)
    site = next((tmp_path / "env" / "lib").glob("python*/site-packages"))
    with zipfile.ZipFile(host_wheel) as z:
        z.extractall(site)
    code, doc = _json(["--installed", "--python", str(py), "--check-installed"])
    assert code == 0, doc
    assert _status(doc)["wheel.record"] == "pass" and _status(doc)["elf.symbols"] == "pass"
    lib = site / "torch_fl" / "lib" / "libflagos_dep.so"
    data = bytearray(lib.read_bytes())
    data[-1] ^= 1
    lib.write_bytes(bytes(data))
    code, doc = _json(["--installed", "--python", str(py), "--check-installed"])
    assert code == 1 and _status(doc)["wheel.record"] == "fail" and _status(doc)["manifest.elf"] == "fail"
    shutil.rmtree(site / "torch_fl")


def test_check_installed_requirements(host_wheel: Path, target_python: str, tmp_path: Path, natives: B.Natives) -> None:
    whl = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives),
                                              requirements=["torch>=2.13,<2.14", "nvidia-fake-runtime==1.0"]))
    code, doc = _json(["--wheel", str(whl), "--python", target_python, "--check-installed"])
    assert code == 1
    assert "nvidia-fake-runtime==1.0: not installed" in _finding(doc, "host.requirements")["details"]


def test_usage_errors_exit_2(host_wheel: Path) -> None:
    for args in ([], ["--wheel"], ["--wheel", str(host_wheel), "--installed"], ["--bogus"]):
        r = B.run_preflight(args)
        assert r.returncode == 2, args
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_bad_python_exits_2(host_wheel: Path, tmp_path: Path) -> None:
    r = B.run_preflight(["--wheel", str(host_wheel), "--python", str(tmp_path / "no-python")])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--python" in r.stderr


def test_check_build_env_needs_the_very_torch_build(host_wheel: Path, target_python: str,
                                                     target_python_next: str) -> None:
    code, doc = _json(["--wheel", str(host_wheel), "--python", target_python, "--check-build-env"])
    assert code == 0 and _status(doc)["host.torch"] == "pass"
    code, doc = _json(["--wheel", str(host_wheel), "--python", target_python_next, "--check-build-env"])
    assert code == 1 and "build environment torch 2.13.1+cpu is not 2.13.0+cpu" in _finding(doc, "host.torch")["message"]


def test_strict_tested_refuses_another_patch_release(host_wheel: Path, natives: B.Natives, tmp_path: Path) -> None:
    """torch 2.13.1 satisfies the wheel's minor-line requirement; only --strict-tested refuses it."""
    py = str(B.make_target_env(tmp_path / "env", natives.torch_lib, torch_version="2.13.1+cpu"))
    code, doc = _json(["--wheel", str(host_wheel), "--python", py])
    assert code == 0 and "(built with 2.13.0+cpu)" in _finding(doc, "host.torch")["message"]
    code, doc = _json(["--wheel", str(host_wheel), "--python", py, "--strict-tested"])
    assert code == 1 and "not the tested build torch" in _finding(doc, "host.torch")["message"]


def test_old_cxx_abi_torch_is_refused(host_wheel: Path, natives: B.Natives, tmp_path: Path) -> None:
    lib = tmp_path / "oldabi"
    shutil.copytree(natives.torch_lib, lib)
    compile_c(lib / "libc10.so", "int c10_version(void){return 213;}\n", soname="libc10.so")  # no __cxx11 names
    py = str(B.make_target_env(tmp_path / "env", lib))
    code, doc = _json(["--wheel", str(host_wheel), "--python", py])
    assert code == 1 and "old C++ ABI" in _finding(doc, "host.torch")["message"]


def test_require_sdk(host_wheel: Path, target_python: str) -> None:
    """The host wheel names no SDK tree: its version is unknown, which --require-sdk refuses."""
    code, doc = _json(["--wheel", str(host_wheel), "--python", target_python])
    assert code == 0 and _status(doc)["host.sdk"] == "skip"
    code, doc = _json(["--wheel", str(host_wheel), "--python", target_python, "--require-sdk"])
    assert code == 1 and _status(doc)["host.sdk"] == "fail"
    code, doc = _json(["--wheel", str(host_wheel), "--python", target_python, "--require-sdk", "--sdk-version", "1.0"])
    assert code == 0 and _status(doc)["host.sdk"] == "warn"  # known now, but the wheel records none to compare


def test_several_wheels_one_verdict(host_wheel: Path, natives: B.Natives, target_python: str, tmp_path: Path) -> None:
    other = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), tag="cp38-cp38-manylinux_2_28_x86_64"))
    code, doc = _json(["--wheel", str(host_wheel), str(other), "--python", target_python])
    assert code == 1 and [s["ok"] for s in doc["subjects"]] == [True, False]


@pytest.mark.parametrize(("floors", "status"), [
    ({"glibc": "2.17", "glibcxx": "3.4.19"}, "pass"),
    ({"glibc": "2.99", "glibcxx": None}, "fail"),
    ({"glibc": "2.17", "glibcxx": "9.9"}, "fail"),
])
def test_floors_against_this_host(natives: B.Natives, target_python: str, tmp_path: Path,
                                  floors: dict[str, Any], status: str) -> None:
    whl = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), manifest_extra={"floors": floors}))
    _code, doc = _json(["--wheel", str(whl), "--python", target_python])
    assert _status(doc)["host.floors"] == status, _finding(doc, "host.floors")
