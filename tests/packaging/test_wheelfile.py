"""The final wheel writer: valid zip, correct RECORD, byte-identical for the same inputs."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest
from support.wheels import record_hash
from torch_fl_packaging.wheelfile import CHUNK, write_wheel

DIST = "torch_fl-2.13.0+host.dist-info"


def _tree(root: Path) -> Path:
    (root / "torch_fl" / "lib").mkdir(parents=True)
    (root / DIST).mkdir()
    rng = os.urandom(1 << 20)
    # Larger than several chunks, partly compressible, partly not: exercises the
    # dictionary-primed chunk boundaries.
    (root / "torch_fl" / "lib" / "libbig.so").write_bytes((b"\x7fELF" + b"abc" * 700_000 + rng) * 4)
    (root / "torch_fl" / "lib" / "libbig.so").chmod(0o755)
    (root / "torch_fl" / "__init__.py").write_text("x = 1\n")
    (root / "torch_fl" / "empty.txt").write_bytes(b"")
    (root / DIST / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_fl\nVersion: 2.13.0+host\n")
    (root / DIST / "WHEEL").write_text("Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n")
    (root / DIST / "RECORD").write_text("stale\n")
    return root


@pytest.mark.parametrize("level", [0, 1, 6])
def test_written_wheel_is_valid_and_recorded(tmp_path: Path, level: int) -> None:
    root = _tree(tmp_path / "t")
    assert (root / "torch_fl/lib/libbig.so").stat().st_size > 2 * CHUNK
    whl = tmp_path / "a.whl"
    write_wheel(root, DIST, whl, level=level, epoch=1_700_000_000, workers=2)
    with zipfile.ZipFile(whl) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        assert names[-1] == f"{DIST}/RECORD" and names[0].startswith("torch_fl/")
        rows = list(csv.reader(io.StringIO(zf.read(f"{DIST}/RECORD").decode())))
        for name, digest, size in rows:
            if name.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = zf.read(name)
            assert data == (root / name).read_bytes()
            assert digest == record_hash(data) and size == str(len(data))
        info = zf.getinfo("torch_fl/lib/libbig.so")
        assert (info.external_attr >> 16) & 0o777 == 0o755
        assert info.date_time[:3] == (2023, 11, 14)


def test_same_input_same_bytes(tmp_path: Path) -> None:
    root = _tree(tmp_path / "t")
    a, b = tmp_path / "a.whl", tmp_path / "b.whl"
    write_wheel(root, DIST, a, level=6, epoch=1_700_000_000, workers=2)
    write_wheel(root, DIST, b, level=6, epoch=1_700_000_000, workers=1)
    assert a.read_bytes() == b.read_bytes()
    c = tmp_path / "c.whl"
    write_wheel(root, DIST, c, level=6, epoch=1_800_000_000, workers=2)
    assert c.read_bytes() != a.read_bytes()


def test_symlinks_are_refused(tmp_path: Path) -> None:
    from torch_fl_packaging.errors import WheelWriteError

    root = _tree(tmp_path / "t")
    (root / "torch_fl" / "link.so").symlink_to("lib/libbig.so")
    with pytest.raises(WheelWriteError, match="symlink"):
        write_wheel(root, DIST, tmp_path / "x.whl")


def _zip64_tree(root: Path, size: int) -> Path:
    """A member of `size` bytes as a sparse file (zeros), plus a small one after it."""
    (root / "torch_fl").mkdir(parents=True)
    (root / DIST).mkdir()
    with (root / "torch_fl" / "huge.bin").open("wb") as f:
        f.truncate(size)
    (root / "torch_fl" / "zz_after.py").write_text("x = 1\n")
    (root / DIST / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_fl\nVersion: 2.13.0+host\n")
    (root / DIST / "WHEEL").write_text("Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n")
    return root


@pytest.mark.slow
def test_member_past_4_gib_is_zip64(tmp_path: Path) -> None:
    size = (4 << 30) + (1 << 20)  # 4 GiB + 1 MiB of zeros: deflates to a few MiB
    root = _zip64_tree(tmp_path / "t", size)
    whl = tmp_path / "big.whl"
    write_wheel(root, DIST, whl, level=1, workers=2)
    assert whl.stat().st_size < 64 << 20
    with zipfile.ZipFile(whl) as zf:
        info = zf.getinfo("torch_fl/huge.bin")
        assert info.file_size == size
        assert zf.read("torch_fl/zz_after.py") == b"x = 1\n"
        left = size
        with zf.open(info) as member:  # inflates and checks the CRC at the end
            while chunk := member.read(64 << 20):
                left -= len(chunk)
        assert left == 0
        record = zf.read(f"{DIST}/RECORD").decode()
    digest = hashlib.sha256()
    zeros = bytes(64 << 20)
    for _ in range(size // len(zeros)):
        digest.update(zeros)
    digest.update(bytes(size % len(zeros)))
    b64 = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    assert f"torch_fl/huge.bin,sha256={b64},{size}" in record


def test_more_than_65535_members_is_zip64(tmp_path: Path) -> None:
    root = _zip64_tree(tmp_path / "t", 0)
    many = root / "torch_fl" / "many"
    many.mkdir()
    for i in range(70_000):
        (many / f"{i}.txt").write_bytes(b"%d" % i)
    whl = tmp_path / "many.whl"
    write_wheel(root, DIST, whl, level=1, workers=2)
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
        assert len(names) == 70_000 + 5  # + huge.bin, zz_after.py, METADATA, WHEEL, RECORD
        assert zf.read("torch_fl/many/69999.txt") == b"69999"
        assert zf.testzip() is None
