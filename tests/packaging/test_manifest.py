"""compatibility.json: schema-valid at write time; RECORD and manifest agree with the members."""

from __future__ import annotations

import copy
import json
import zipfile
from pathlib import Path

import pytest
from packaging_support import run_build
from torch_fl_packaging.errors import ManifestError, VerifyError
from torch_fl_packaging.manifest import validate_manifest
from torch_fl_packaging.verify import prove
from torch_fl_packaging.verify_target import TargetSource


@pytest.fixture
def host_wheel(platform_inputs, tmp_path: Path) -> Path:
    inputs = platform_inputs("host")
    out = tmp_path / "out"
    res = run_build([*inputs.args, "--out", str(out), "--preflight", "off"])
    assert res.rc == 0, res.stderr
    return next(out.glob("*.whl"))


@pytest.mark.compile
def test_written_manifest_is_schema_valid_and_rejects_tampering(host_wheel: Path) -> None:
    with zipfile.ZipFile(host_wheel) as zf:
        manifest = json.loads(zf.read("torch_fl/compatibility.json"))
    validate_manifest(manifest)
    for mutate in (
        lambda m: m["sdk"].__setitem__("version", "latest"),
        lambda m: m.__setitem__("schema_version", 2),
        lambda m: m["elf"][0].__setitem__("sha256", "nothex"),
        lambda m: m["elf"][0].__setitem__("origin", "downloaded"),
        lambda m: m.__setitem__("surprise", 1),
    ):
        bad = copy.deepcopy(manifest)
        mutate(bad)
        with pytest.raises(ManifestError, match="violates the schema"):
            validate_manifest(bad)


@pytest.mark.compile
def test_verify_of_the_wheel_alone_catches_a_flipped_byte(host_wheel: Path, tmp_path: Path) -> None:
    def alone(wheel: Path):  # type: ignore[no-untyped-def]  # --preflight off: the wheel, no target
        return prove(wheel, platform="host", release=False, python="", work=tmp_path, source=TargetSource(),
                     gates=False)

    verified = alone(host_wheel)
    assert verified.preflight == "skipped" and verified.elf_records == 2 and verified.members >= 6
    # Rewrite the wheel with one byte of the package's __init__.py flipped (RECORD unchanged).
    broken = tmp_path / host_wheel.name
    with zipfile.ZipFile(host_wheel) as src, zipfile.ZipFile(broken, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "torch_fl/__init__.py":
                data = bytes([data[0] ^ 0x01]) + data[1:]
            dst.writestr(info, data)
    with pytest.raises(VerifyError, match=r"wheel\.record") as err:
        alone(broken)
    assert "torch_fl/__init__.py" in str(err.value)
