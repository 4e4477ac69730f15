"""A payload folder cut into pieces of at most a given size, and the pieces put back together.

Pieces are consecutive slices of the payload's files concatenated in sorted order (no archive format
in between, so reassembly is one pass: every piece is hashed before one byte is written, then its
bytes go to the files it covers, each file checked against its own sha256).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from failures import CHUNK, CheckFailed, UsageError, sha256_file

MANIFEST = "manifest.json"


def payload_files(payload: Path) -> list[Path]:
    files = sorted(p for p in payload.rglob("*") if p.is_file() and not p.is_symlink())
    if not files:
        raise UsageError(f"the payload folder holds no files ({payload}) — run tools/gpu-offline-pack.sh to fill it")
    return files


def split(payload: Path, out: Path, piece_size: int) -> dict[str, object]:
    """Cut the payload's files, concatenated in sorted order, into pieces of at most piece_size bytes."""
    if not payload.is_dir():
        raise UsageError(f"no payload folder at {payload} — give the folder tools/gpu-offline-pack.sh assembled")
    if piece_size < 1:
        raise UsageError(f"piece size must be positive ({piece_size}) — give --piece-mib 1 or more")
    files = payload_files(payload)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("payload.part-*"):
        old.unlink()
    records: list[dict[str, object]] = []
    pieces: list[dict[str, object]] = []
    piece_h = hashlib.sha256()
    piece_f = None
    piece_len = 0

    def close_piece() -> None:
        nonlocal piece_f, piece_h, piece_len
        if piece_f is not None:
            piece_f.close()
            pieces.append({"name": Path(piece_f.name).name, "size": piece_len, "sha256": piece_h.hexdigest()})
        piece_f, piece_h, piece_len = None, hashlib.sha256(), 0

    for path in files:
        file_h = hashlib.sha256()
        size = 0
        with path.open("rb") as src:
            while True:
                if piece_f is None:
                    piece_f = (out / f"payload.part-{len(pieces):03d}").open("wb")
                block = src.read(min(CHUNK, piece_size - piece_len))
                if not block:
                    break
                piece_f.write(block)
                piece_h.update(block)
                file_h.update(block)
                piece_len += len(block)
                size += len(block)
                if piece_len == piece_size:
                    close_piece()
        records.append({"path": path.relative_to(payload).as_posix(), "size": size, "sha256": file_h.hexdigest()})
    close_piece()
    manifest = {"version": 1, "piece_size": piece_size, "total_size": sum(int(r["size"]) for r in records),  # type: ignore[call-overload]
                "files": records, "pieces": pieces}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


# ------------------------------------------------------------------------------------------ reassemble
def load_manifest(pieces_dir: Path) -> dict[str, object]:
    path = pieces_dir / MANIFEST
    if not path.is_file():
        raise UsageError(f"no {MANIFEST} in {pieces_dir} — carry the manifest with the pieces (it is small)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UsageError(f"{path} is not JSON ({e}) — carry it again") from e
    if not isinstance(manifest, dict) or manifest.get("version") != 1:
        raise UsageError(f"{path} is not a version-1 piece manifest — pack again with this checkout's tools/gpu-offline-pack.sh")
    return manifest


def verify_pieces(pieces_dir: Path, manifest: dict[str, object]) -> None:
    """Every piece present, of its size and hash, before one byte is written."""
    for piece in manifest["pieces"]:  # type: ignore[attr-defined]
        path = pieces_dir / piece["name"]
        if not path.is_file():
            raise UsageError(f"piece {piece['name']} is missing from {pieces_dir} — carry it (see tools/gpu-offline-pack.sh)")
        size = path.stat().st_size
        if size != piece["size"]:
            raise UsageError(f"piece {piece['name']} has {size} bytes, the manifest says {piece['size']} — carry it again")
        digest = sha256_file(path)
        if digest != piece["sha256"]:
            raise UsageError(f"piece {piece['name']} is corrupt (sha256 {digest[:16]}…, manifest {piece['sha256'][:16]}…)"
                             " — carry it again")


def reassemble(pieces_dir: Path, dest: Path) -> dict[str, object]:
    manifest = load_manifest(pieces_dir)
    verify_pieces(pieces_dir, manifest)
    dest.mkdir(parents=True, exist_ok=True)
    files = iter(manifest["files"])  # type: ignore[call-overload]
    current = None
    remaining = 0
    out_f = None
    file_h = hashlib.sha256()

    def next_file() -> None:
        nonlocal current, remaining, out_f, file_h
        current = next(files, None)
        if current is None:
            out_f = None
            return
        rel = Path(current["path"])
        if rel.is_absolute() or ".." in rel.parts:
            raise UsageError(f"manifest names a path outside the payload ({rel}) — pack again")
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        out_f = target.open("wb")
        remaining = int(current["size"])
        file_h = hashlib.sha256()

    def finish_file() -> None:
        assert out_f is not None and current is not None
        out_f.close()
        if file_h.hexdigest() != current["sha256"]:
            raise CheckFailed(f"{current['path']} does not match its sha256 after reassembly — carry the pieces again")

    next_file()
    while current is not None and remaining == 0:  # empty files
        finish_file()
        next_file()
    for piece in manifest["pieces"]:  # type: ignore[attr-defined]
        with (pieces_dir / piece["name"]).open("rb") as src:
            while True:
                if current is None:
                    if src.read(1):
                        raise CheckFailed(f"piece {piece['name']} holds bytes past the last file — pack again")
                    break
                block = src.read(min(CHUNK, remaining))
                if not block:
                    break
                assert out_f is not None
                out_f.write(block)
                file_h.update(block)
                remaining -= len(block)
                while current is not None and remaining == 0:
                    finish_file()
                    next_file()
    if current is not None:
        raise CheckFailed(f"the pieces end inside {current['path']} — pack again")
    return manifest
