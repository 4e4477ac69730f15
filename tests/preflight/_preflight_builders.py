"""Real artifacts for the preflight tests: C libraries compiled with gcc, wheels with a correct
RECORD and a manifest, a synthetic torch installed into a throwaway virtual environment.

Manifests are written with pyelftools (an independent ELF reader, `support.elf`), so the tests do
not check the preflight reader against itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.elf import compile_c, read_dynamic
from support.wheels import PY_TAG, metadata_text, record_hash, write_wheel as write_wheel_file

PLAT = "manylinux_2_28_x86_64"
TORCH_VERSION = "2.13.0+cpu"
TORCH_GIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Natives:
    """Compiled libraries, by role."""

    dir: Path
    torch_lib: Path  # synthetic torch/lib: libc10.so, libtorch_cpu.so
    torch_lib_new: Path  # the "next torch": libtorch_cpu.so without fl_torch_op_v1
    plugin: Path  # the extension: needs libflagos_rt.so ($ORIGIN/lib), libtorch_cpu.so, libc10.so
    runtime: Path  # libflagos_rt.so: needs libflagos_dep.so ($ORIGIN)
    dep: Path  # libflagos_dep.so
    needs_glibcxx99: Path  # references a symbol at GLIBCXX_9.9 of libstdc++.so.6
    needs_missing_lib: Path  # DT_NEEDED libnot_on_this_host.so.1
    undefined_sym: Path  # references a function nothing defines
    abs_rpath: Path  # RUNPATH /opt/elsewhere/lib


def build_natives(root: Path) -> Natives:
    root.mkdir(parents=True, exist_ok=True)
    tl = root / "torch" / "lib"
    # Synthetic torch core: libc10 exports a std::__cxx11 name, as the new-ABI libc10 does.
    compile_c(tl / "libc10.so", "int _ZN3c106detail5cxx11E(void){return 1;}\nint c10_version(void){return 213;}\n",
              soname="libc10.so")
    compile_c(tl / "libtorch_cpu.so", "extern int c10_version(void);\n"
              "int fl_torch_op_v1(void){return c10_version();}\nint fl_torch_op_common(void){return 2;}\n",
              soname="libtorch_cpu.so", libs=["libc10.so"], libdirs=[tl], rpath=["$ORIGIN"])
    tl2 = root / "torch-next" / "lib"
    compile_c(tl2 / "libc10.so", "int _ZN3c106detail5cxx11E(void){return 1;}\nint c10_version(void){return 214;}\n",
              soname="libc10.so")
    compile_c(tl2 / "libtorch_cpu.so", "int fl_torch_op_v2(void){return 3;}\nint fl_torch_op_common(void){return 2;}\n",
              soname="libtorch_cpu.so", libs=["libc10.so"], libdirs=[tl2], rpath=["$ORIGIN"])

    lib = root / "wheel" / "torch_fl" / "lib"
    dep = compile_c(lib / "libflagos_dep.so", "int flagos_dep(void){return 7;}\n", soname="libflagos_dep.so")
    rt = compile_c(lib / "libflagos_rt.so", "extern int flagos_dep(void);\nint flagos_rt_device_count(void)"
                   "{return flagos_dep();}\n", soname="libflagos_rt.so", libs=["libflagos_dep.so"], libdirs=[lib],
                   rpath=["$ORIGIN"])
    plugin = compile_c(root / "wheel" / "torch_fl" / f"_C.{PY_TAG}-x86_64-linux-gnu.so",
                       "extern int flagos_rt_device_count(void);\nextern int fl_torch_op_v1(void);\n"
                       "extern void *PyLong_FromLong(long);\n"
                       "void *flagos_count(void){return PyLong_FromLong(flagos_rt_device_count()+fl_torch_op_v1());}\n",
                       libs=["libflagos_rt.so", "libtorch_cpu.so", "libc10.so"], libdirs=[lib, tl],
                       rpath=["$ORIGIN/lib", "$ORIGIN/../torch/lib"])

    # A stand-in libstdc++.so.6 that defines GLIBCXX_9.9, only to link against; the host's real one lacks it.
    stub = root / "stub"
    compile_c(stub / "libstdc++.so.6", "int fl_future_cxx(void){return 1;}\n", soname="libstdc++.so.6",
              version_script="GLIBCXX_9.9 { global: fl_future_cxx; local: *; };\n")
    g99 = compile_c(root / "bad" / "libneeds_glibcxx99.so", "extern int fl_future_cxx(void);\n"
                    "int use_future(void){return fl_future_cxx();}\n", soname="libneeds_glibcxx99.so",
                    libs=["libstdc++.so.6"], libdirs=[stub])
    compile_c(stub / "libnot_on_this_host.so.1", "int fl_absent(void){return 1;}\n", soname="libnot_on_this_host.so.1")
    miss = compile_c(root / "bad" / "libneeds_missing.so", "extern int fl_absent(void);\nint f(void){return fl_absent();}\n",
                     soname="libneeds_missing.so", libs=["libnot_on_this_host.so.1"], libdirs=[stub])
    undef = compile_c(root / "bad" / "libundefined.so", "extern int fl_defined_nowhere(void);\n"
                      "int g(void){return fl_defined_nowhere();}\n", soname="libundefined.so")
    absr = compile_c(root / "bad" / "libabs_rpath.so", "int h(void){return 1;}\n", soname="libabs_rpath.so",
                     rpath=["/opt/elsewhere/lib"])
    return Natives(root, tl, tl2, plugin, rt, dep, g99, miss, undef, absr)


# --- manifests, from ELF read with pyelftools ---------------------------------------------------------

def elf_record(data: bytes, path: str, origin: str = "built") -> dict[str, Any]:
    fields = read_dynamic(data).record_fields()
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), **fields,
            "origin": origin}


def manifest_for(files: dict[str, bytes], *, name: str = "torch_fl", version: str = "2.13.0+host",
                 tags: list[str], filename: str, requirements: list[str], platform: str = "host",
                 kind: str = "in-wheel-runtime", directory: str | None = "torch_fl/lib",
                 torch_requirement: str = "torch>=2.13,<2.14", **extra: Any) -> dict[str, Any]:
    elf = [elf_record(data, p) for p, data in sorted(files.items()) if data[:4] == b"\x7fELF"]
    m: dict[str, Any] = {
        "schema_version": 1, "platform": platform,
        "wheel": {"name": name, "version": version, "tags": tags, "filename": filename},
        "bundle": {"kind": kind, "directory": directory},
        "torch": {"version": TORCH_VERSION, "git_version": TORCH_GIT, "cxx11_abi": True,
                  "requirement": torch_requirement},
        "sdk": {"name": "host"},
        "requirements": requirements,
        "floors": {"glibc": "2.17", "glibcxx": None},
        "runtime": {"directories": []},
        "elf": elf,
    }
    m.update(extra)
    return m


# --- wheels ---------------------------------------------------------------------------------------------

@dataclass
class WheelSpec:
    files: dict[str, bytes]
    name: str = "torch_fl"
    version: str = "2.13.0+host"
    tag: str = f"{PY_TAG}-{PY_TAG}-{PLAT}"
    requirements: list[str] = field(default_factory=lambda: ["torch>=2.13,<2.14"])
    manifest_extra: dict[str, Any] = field(default_factory=dict)
    manifest_override: dict[str, Any] | None = None
    with_manifest: bool = True
    provides_extra: tuple[str, ...] = ()  # METADATA's Provides-Extra, as a build backend declares an extra

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.tag}.whl"


def write_wheel(out_dir: Path, spec: WheelSpec) -> Path:
    files = dict(spec.files)
    if spec.with_manifest:
        m = spec.manifest_override or manifest_for(files, name=spec.name, version=spec.version, tags=[spec.tag],
                                                    filename=spec.filename, requirements=spec.requirements,
                                                    **spec.manifest_extra)
        files[f"{spec.name}/compatibility.json"] = json.dumps(m, indent=1).encode()
    metadata = metadata_text(spec.name, spec.version, spec.requirements,
                             "".join(f"Provides-Extra: {e}\n" for e in spec.provides_extra))
    return write_wheel_file(out_dir / spec.filename, files, name=spec.name, version=spec.version, tag=spec.tag,
                            metadata=metadata, generator="preflight-tests")


def host_wheel_files(n: Natives) -> dict[str, bytes]:
    return {
        "torch_fl/__init__.py": b"# torch_fl test wheel\n",
        f"torch_fl/{n.plugin.name}": n.plugin.read_bytes(),
        "torch_fl/lib/libflagos_rt.so": n.runtime.read_bytes(),
        "torch_fl/lib/libflagos_dep.so": n.dep.read_bytes(),
    }


def rewrite_wheel(src: Path, dst: Path, edit: Any) -> Path:
    """Copy a wheel member by member; `edit(name, data) -> data | None` changes or drops members.

    RECORD is copied as it was, so edits show up as RECORD mismatches, the way tampering does.
    """
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info, data)
    return dst


# --- a target environment with a synthetic torch -----------------------------------------------------------

def make_target_env(root: Path, torch_lib: Path | None, torch_version: str = TORCH_VERSION,
                    git: str = TORCH_GIT) -> Path:
    """A venv (no pip) with a `torch` distribution whose torch/lib holds the given compiled libraries."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    py = root / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig;print(sysconfig.get_paths()['platlib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    if torch_lib is not None:
        pkg = site / "torch"
        shutil.copytree(torch_lib, pkg / "lib")
        (pkg / "__init__.py").write_text("raise ImportError('synthetic torch: never imported by preflight')\n")
        (pkg / "version.py").write_text(f"__version__ = '{torch_version}'\ngit_version = '{git}'\ncuda = None\n")
        di = site / f"torch-{torch_version}.dist-info"
        di.mkdir()
        (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n")
        (di / "RECORD").write_text("")
        (di / "INSTALLER").write_text("tests\n")
    return py


def real_wheels() -> list[Path]:
    """The project's own wheels, when the environment names them: FLAGOS_TEST_WHEEL (one file) and
    FLAGOS_TEST_WHEEL_DIR (every torch_fl-*.whl there, e.g. ci/build-wheel's dist/)."""
    out: list[Path] = []
    if os.environ.get("FLAGOS_TEST_WHEEL"):
        out.append(Path(os.environ["FLAGOS_TEST_WHEEL"]))
    if os.environ.get("FLAGOS_TEST_WHEEL_DIR"):
        out += sorted(Path(os.environ["FLAGOS_TEST_WHEEL_DIR"]).glob("torch_fl-*.whl"))
    return out


def run_preflight(args: list[str], python: str | None = None, env: dict[str, str] | None = None,
                  timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the command as a user would: a fresh process."""
    exe = [python or sys.executable, "-m", "torch_fl_preflight"]
    e = dict(os.environ)
    e.pop("LD_LIBRARY_PATH", None)
    if env:
        e.update(env)
    return subprocess.run([*exe, *args], capture_output=True, text=True, timeout=timeout, env=e, check=False)


# --- cuda-assets: the real CUDA torch libraries (opt-in, large downloads) --------------------------------

CUDA_ASSET_LIBS = ("libtorch_cuda.so", "libc10_cuda.so", "libtorch_cuda_linalg.so", "libtorch_nvshmem.so",
                   "libcaffe2_nvrtc.so")


def cache_dir() -> Path:
    """Outside the repository: ${XDG_CACHE_HOME:-~/.cache}/torch_fl."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch_fl"


def _pip(*args: str, pypi: bool = False) -> None:
    env = dict(os.environ)
    if pypi:
        # The machine's pip configuration prefers a local wheelhouse with +cpu builds; the CUDA
        # build of torch 2.13.0 and its nvidia-* requirements come from PyPI itself.
        env.pop("PIP_FIND_LINKS", None)
        env.pop("PIP_CONSTRAINT", None)
        env["PIP_CONFIG_FILE"] = os.devnull
        args = (*args, "-i", "https://pypi.org/simple")
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, env=env, capture_output=True, timeout=3600)


def _one(d: Path, pattern: str) -> Path | None:
    found = sorted(d.glob(pattern)) if d.is_dir() else []
    return found[0] if found else None


def download_cuda_inputs() -> dict[str, Any]:
    """torch 2.13.0 CUDA (PyPI), its nvidia-* runtime requirements, torch 2.13.0+cpu and torch 2.14.1
    (the machine's wheelhouse); reused from the cache when present."""
    c = cache_dir()
    cu = c / "cu"
    cuda_whl = _one(cu, "torch-2.13.0-*.whl")
    if cuda_whl is None:
        _pip("download", "--no-deps", "--only-binary=:all:", "torch==2.13.0", "-d", str(cu), pypi=True)
        cuda_whl = _one(cu, "torch-2.13.0-*.whl")
    assert cuda_whl is not None
    with zipfile.ZipFile(cuda_whl) as z:
        meta = z.read("torch-2.13.0.dist-info/METADATA").decode()
    reqs = [ln.split(":", 1)[1].strip() for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    runtime = [r for r in reqs if r.split("[")[0].split("=")[0].split(";")[0].strip().startswith(("nvidia-", "cuda-toolkit"))]
    nv = c / "nv"
    if not (nv / "complete").exists():
        req_file = c / "nv-req.txt"
        req_file.write_text("\n".join(r.split(";")[0].strip() for r in runtime) + "\n")
        _pip("download", "--only-binary=:all:", "-r", str(req_file), "-d", str(nv), pypi=True)
        (nv / "complete").write_text("ok\n")
    cpu_whl = _one(c / "cpu", "torch-2.13.0+cpu-*.whl")
    if cpu_whl is None:
        _pip("download", "--no-deps", "torch==2.13.0", "-d", str(c / "cpu"))
        cpu_whl = _one(c / "cpu", "torch-2.13.0*.whl")
    next_whl = _one(c / "dl", "torch-2.14.1-*.whl")
    if next_whl is None:
        _pip("download", "--no-deps", "torch==2.14.1", "-d", str(c / "dl"))
        next_whl = _one(c / "dl", "torch-2.14.1-*.whl")
    return {"cuda": cuda_whl, "cuda_runtime_reqs": runtime, "nvidia": sorted(nv.glob("*.whl")), "cpu": cpu_whl,
            "next": next_whl}


def cuda_env(name: str, torch_whl: Path, nvidia: list[Path], share_nvidia_from: Path | None = None) -> Path:
    """A venv in the cache holding one torch wheel and the nvidia packages (installed once)."""
    root = cache_dir() / "envs" / name
    py = root / "bin" / "python"
    if (root / "ready").exists():
        return py
    if root.exists():
        shutil.rmtree(root)
    venv.EnvBuilder(with_pip=True, symlinks=True).create(root)
    pkgs = [str(torch_whl)] + ([] if share_nvidia_from else [str(p) for p in nvidia])
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-compile", *pkgs], check=True,
                   capture_output=True, timeout=3600)
    if share_nvidia_from is not None:
        site = Path(subprocess.run([str(py), "-c", "import sysconfig;print(sysconfig.get_paths()['platlib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
        src_site = next((share_nvidia_from / "lib").glob("python*/site-packages"))
        (site / "nvidia").symlink_to(src_site / "nvidia")
    (root / "ready").write_text("ok\n")
    return py


def cuda_assets_wheel(inputs: dict[str, Any], out_dir: Path) -> Path:
    """A stand-in for the cuda-assets torch_fl wheel: the five CUDA libraries of torch 2.13.0 under
    torch_fl/lib, streamed member to member (never whole in memory), exact torch pin, the CUDA
    wheel's runtime requirements, and a manifest; their RPATH is the CUDA wheel's own, which points
    at site-packages/nvidia from torch_fl/lib just as from torch/lib."""
    spec_name, version = "torch_fl", "2.13.0+cuda13.0"
    tag = f"{PY_TAG}-{PY_TAG}-{PLAT}"
    filename = f"{spec_name}-{version}-{tag}.whl"
    path = out_dir / filename
    if path.exists():
        return path
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / (filename + ".part")
    reqs = ["torch==2.13.0", *inputs["cuda_runtime_reqs"]]
    records: list[dict[str, Any]] = []
    rows: list[str] = []
    extract = out_dir / "extract"
    with zipfile.ZipFile(inputs["cuda"]) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        vtext = src.read("torch/version.py").decode()
        git = vtext.split("git_version = '")[1].split("'")[0]
        for lib in CUDA_ASSET_LIBS:
            member = f"torch/lib/{lib}"
            target = f"torch_fl/lib/{lib}"
            h = hashlib.sha256()
            size = 0
            info = zipfile.ZipInfo(target, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o100755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            extract.mkdir(exist_ok=True)
            with src.open(member) as fin, dst.open(info, "w", force_zip64=True) as fout, \
                    open(extract / lib, "wb") as disk:
                for chunk in iter(lambda: fin.read(8 << 20), b""):
                    h.update(chunk)
                    size += len(chunk)
                    fout.write(chunk)
                    disk.write(chunk)
            with open(extract / lib, "rb") as fh:
                head = fh.read(1)
            rec = _elf_record_file(extract / lib, target, "bundled")
            rec["source"] = f"{Path(inputs['cuda']).name}:{member}"
            assert head and rec["sha256"] == h.hexdigest() and rec["size"] == size
            records.append(rec)
            rows.append(f"{target},sha256={base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode()},{size}")
            (extract / lib).unlink()
        small: dict[str, bytes] = {"torch_fl/__init__.py": b"# stand-in cuda-assets payload\n"}
        manifest = {
            "schema_version": 1, "platform": "cuda",
            "wheel": {"name": spec_name, "version": version, "tags": [tag], "filename": filename},
            "bundle": {"kind": "cuda-assets", "directory": "torch_fl/lib"},
            "torch": {"version": "2.13.0+cpu", "git_version": git, "cxx11_abi": True, "requirement": "torch==2.13.0"},
            "sdk": {"name": "cuda", "version": "13.0"},
            "vendor_torch": {"version": "2.13.0+cu130", "source": Path(inputs["cuda"]).name, "git_version": git},
            "requirements": reqs,
            "floors": {"glibc": "2.28", "glibcxx": "3.4.30"},
            "runtime": {"directories": []},
            "elf": records,
        }
        small["torch_fl/compatibility.json"] = json.dumps(manifest, indent=1).encode()
        di = f"{spec_name}-{version}.dist-info"
        small[f"{di}/METADATA"] = (f"Metadata-Version: 2.1\nName: {spec_name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in reqs)).encode()
        small[f"{di}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: preflight-tests\nRoot-Is-Purelib: false\nTag: {tag}\n" \
            .encode()
        for p, d in small.items():
            dst.writestr(zipfile.ZipInfo(p, date_time=(2020, 1, 1, 0, 0, 0)), d, zipfile.ZIP_DEFLATED)
            rows.append(f"{p},{record_hash(d)},{len(d)}")
        rows.append(f"{di}/RECORD,,")
        dst.writestr(zipfile.ZipInfo(f"{di}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(rows) + "\n")
    shutil.rmtree(extract, ignore_errors=True)
    tmp.rename(path)
    return path


def _elf_record_file(path: Path, member: str, origin: str) -> dict[str, Any]:
    """Like elf_record, from a file on disk (pyelftools reads only the parts it needs)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(8 << 20), b""):
            h.update(chunk)
    fields = read_dynamic(path).record_fields()
    return {"path": member, "sha256": h.hexdigest(), "size": path.stat().st_size, **fields, "origin": origin}
