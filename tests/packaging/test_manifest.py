"""compatibility.json: schema-valid at write time; RECORD and manifest agree with the members."""

from __future__ import annotations

import copy
import json
import zipfile
from pathlib import Path

import pytest
from packaging_support import REPO, run_build
from torch_fl_packaging.errors import ManifestError, VerifyError
from torch_fl_packaging.manifest import load_schema, validate_manifest
from torch_fl_packaging.verify import check_wheel


@pytest.fixture
def host_wheel(platform_inputs, tmp_path: Path) -> Path:
    inputs = platform_inputs("host")
    out = tmp_path / "out"
    res = run_build([*inputs.args, "--out", str(out), "--preflight", "off"])
    assert res.rc == 0, res.stderr
    return next(out.glob("*.whl"))


@pytest.mark.compile
def test_written_manifest_is_schema_valid_and_rejects_tampering(host_wheel: Path) -> None:
    schema = load_schema(REPO)
    with zipfile.ZipFile(host_wheel) as zf:
        manifest = json.loads(zf.read("torch_fl/compatibility.json"))
    validate_manifest(manifest, schema)
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
            validate_manifest(bad, schema)


@pytest.mark.compile
def test_check_wheel_catches_a_flipped_byte(host_wheel: Path, tmp_path: Path) -> None:
    schema = load_schema(REPO)
    members, elves, _ = check_wheel(host_wheel, schema)
    assert elves == 2 and members >= 6
    # Rewrite the wheel with one byte of the runtime library flipped (RECORD unchanged).
    broken = tmp_path / host_wheel.name
    with zipfile.ZipFile(host_wheel) as src, zipfile.ZipFile(broken, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "torch_fl/lib/libflagos_hostrt.so":
                data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
            dst.writestr(info, data)
    with pytest.raises(VerifyError, match="does not match RECORD"):
        check_wheel(broken, schema)
