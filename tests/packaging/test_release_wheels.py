"""The real host and host-forked wheels: torch-fl-build from the source tree, installed on stock torch+cpu.

host-forked is a STAND-IN (stock torch+cpu core libraries re-RPATHed as a vendor fork).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from packaging_support import REPO, build_env, checkout_copy, run_build
from torch_fl_packaging.manifest import validate_manifest

pytestmark = [pytest.mark.wheel, pytest.mark.slow]

DEMO = """
import torch
x = torch.ones(2, 3, device="flagos")
y = (x + x).sum()
assert y.item() == 12.0, y
print("ok", y.device)
"""


@pytest.mark.parametrize("platform", ["host", "host-forked"])
def test_manifest_lists_every_elf_with_its_sha256(real_wheels: dict[str, Path], platform: str) -> None:
    wheel = real_wheels[platform]
    with zipfile.ZipFile(wheel) as zf:
        manifest = json.loads(zf.read("torch_fl/compatibility.json"))
        validate_manifest(manifest)
        elves = {n for n in zf.namelist() if zf.read(n)[:4] == b"\x7fELF"}
        assert {r["path"] for r in manifest["elf"]} == elves
        for rec in manifest["elf"]:
            assert hashlib.sha256(zf.read(rec["path"])).hexdigest() == rec["sha256"]
    assert manifest["platform"] == platform and manifest["wheel"]["filename"] == wheel.name
    plugin = next(r for r in manifest["elf"] if r["path"].startswith("torch_fl/_C"))
    assert "libflagos_hostrt.so" in plugin["needed"]
    if platform == "host-forked":
        assert manifest["x-stand-in"] is True
        assert {r["origin"] for r in manifest["elf"] if r["path"].startswith("torch_fl/vendor_torch/")} == {"bundled"}
        assert manifest["torch"]["requirement"] == "torch==" + manifest["torch"]["version"].split("+")[0]


@pytest.mark.parametrize("platform", ["host", "host-forked"])
def test_installs_on_stock_torch_and_runs(real_wheels: dict[str, Path], stock_env: Path, platform: str,
                                          tmp_path: Path) -> None:
    subprocess.run([str(stock_env), "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps",
                    str(real_wheels[platform])], check=True)
    proc = subprocess.run([str(stock_env), "-c", DEMO], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok flagos")


@pytest.mark.compile
@pytest.mark.slow
def test_two_builds_are_byte_identical(real_wheels: dict[str, Path], tmp_path: Path) -> None:
    """Same commit, same SOURCE_DATE_EPOCH: the same bytes -- built twice here, and once in another checkout."""
    env = build_env()
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    other = checkout_copy(tmp_path / "another" / "checkout")
    digests = []
    for i, source in enumerate((REPO, REPO, other)):
        out = tmp_path / f"out{i}"
        res = run_build(["--platform", "host", "--source", str(source), "--out", str(out)], env=env, cwd=source)
        assert res.rc == 0, res.stderr[-2000:]
        (wheel,) = out.glob("*.whl")
        digests.append(hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert digests[0] == digests[1] == digests[2]
