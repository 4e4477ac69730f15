"""The torch_fl_bootstrap package on synthetic installations: the view, its key and cache rules, ordering,
messages.

The package is imported from the source tree (it never imports torch); the
"installed torch" here is a directory tree that looks like one, enough for the
parts that never load a library.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from support.bootstrap import load_bootstrap
from support.tools import require_tool

bootstrap = load_bootstrap()
from torch_fl_bootstrap import cuda_assets, forked_libtorch, native_sdk  # noqa: E402
from torch_fl_bootstrap.manifest import Library, Manifest, from_document  # noqa: E402
from torch_fl_bootstrap.manifest import load as load_manifest  # noqa: E402

BootstrapError = bootstrap.BootstrapError


def _manifest(kind: str = "forked-libtorch", directory: str | None = "torch_fl/vendor_torch",
              libs: tuple[str, ...] = ("libc10.so", "libtorch_cpu.so"), **extra: object) -> dict:
    elf = [{"path": f"{directory}/{name}", "soname": name, "needed": [], "origin": "bundled", "sha256": "0" * 64,
            "size": 1, "rpath": ["$ORIGIN"], "runpath": []} for name in libs] if directory else []
    base = {"schema_version": 1, "platform": "host-forked", "bundle": {"kind": kind, "directory": directory},
            "wheel": {"version": "2.13.0+host.forked"},
            "torch": {"version": "2.13.0+cpu", "requirement": "torch==2.13.0"},
            "sdk": {"name": "host"}, "requirements": ["torch==2.13.0"], "runtime": {"directories": []}, "elf": elf}
    base.update(extra)
    return base


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A site-packages with a look-alike torch and a torch_fl holding a manifest and its bundled files."""
    site = tmp_path / "site-packages"
    torch = site / "torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "__init__.py").write_text("")
    (torch / "version.py").write_text("__version__ = '2.13.0+cpu'\ngit_version = 'abc1234'\n")
    (torch / "_inductor").mkdir()
    for name in ("libc10.so", "libtorch_cpu.so", "libtorch_python.so"):
        (torch / "lib" / name).write_bytes(b"stock " + name.encode())
    pkg = site / "torch_fl"

    def make(manifest: dict | None = None) -> Path:
        manifest = manifest or _manifest()
        for rec in manifest["elf"]:
            path = site / rec["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"vendor " + path.name.encode())
        pkg.mkdir(exist_ok=True)
        (pkg / "compatibility.json").write_text(json.dumps(manifest))
        return pkg

    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    monkeypatch.setenv("FLAGOS_CACHE_DIR", str(tmp_path / "cache"))
    make.site = site  # type: ignore[attr-defined]
    make.cache = tmp_path / "cache"  # type: ignore[attr-defined]
    return make


def _view(pkg: Path) -> Path:
    return Path(forked_libtorch.view_of_torch(str(pkg), load_manifest(str(pkg))))


def test_the_view_is_the_installed_torch_with_the_bundled_core_libraries(install) -> None:
    pkg = install()
    entry = _view(pkg)
    torch = install.site / "torch"
    assert os.readlink(entry / "torch" / "__init__.py") == str(torch.resolve() / "__init__.py")
    assert os.readlink(entry / "torch" / "_inductor") == str(torch.resolve() / "_inductor")
    assert os.readlink(entry / "torch" / "lib" / "libc10.so") == str((pkg / "vendor_torch" / "libc10.so").resolve())
    # A stock library the fork does not replace stays the stock one.
    assert os.readlink(entry / "torch" / "lib" / "libtorch_python.so") == str(torch.resolve() / "lib" /
                                                                               "libtorch_python.so")
    for d in (install.cache, entry.parent, entry):
        assert d.stat().st_mode & 0o777 == 0o700
    # The installed torch is untouched: still regular files, same bytes.
    assert (torch / "lib" / "libc10.so").read_bytes() == b"stock libc10.so"


def test_a_valid_entry_is_reused_and_the_key_follows_torch_and_the_wheel(install) -> None:
    pkg = install()
    first = _view(pkg)
    inode = first.stat().st_ino
    assert _view(pkg) == first and first.stat().st_ino == inode
    # Another torch build at the same place: its libraries change size.
    (install.site / "torch" / "lib" / "libtorch_cpu.so").write_bytes(b"another torch build")
    second = _view(pkg)
    assert second != first
    # Another wheel: its manifest changes.
    install(_manifest(libs=("libc10.so", "libtorch_cpu.so", "libshm.so")))
    third = _view(pkg)
    assert third not in (first, second)
    assert os.readlink(third / "torch" / "lib" / "libshm.so").endswith("vendor_torch/libshm.so")


def test_a_damaged_entry_is_rebuilt_in_place(install) -> None:
    pkg = install()
    entry = _view(pkg)
    (entry / "torch" / "lib" / "libc10.so").unlink()
    (entry / "torch" / "lib" / "libc10.so").symlink_to(install.site / "torch" / "lib" / "libc10.so")
    assert _view(pkg) == entry
    assert os.readlink(entry / "torch" / "lib" / "libc10.so").endswith("vendor_torch/libc10.so")
    assert sorted(p.name for p in entry.parent.iterdir()) == [".lock", entry.name]


def test_foreign_or_writable_cache_directories_are_refused(install) -> None:
    pkg = install()
    cache = install.cache
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    with pytest.raises(BootstrapError, match=r"writable by group or others \(mode 777\); chmod 700"):
        _view(pkg)
    cache.chmod(0o700)
    if os.geteuid() == 0:
        os.chown(cache, 65534, 65534)
        with pytest.raises(BootstrapError, match="owned by uid 65534, not by you"):
            _view(pkg)


def test_exact_torch_is_required_and_named(install) -> None:
    pkg = install()
    (install.site / "torch" / "version.py").write_text("__version__ = '2.12.1+cpu'\n")
    with pytest.raises(BootstrapError) as err:
        _view(pkg)
    assert "needs torch==2.13.0 exactly" in str(err.value)
    assert "torch 2.12.1+cpu is installed" in str(err.value)
    assert str(err.value).endswith("install it: pip install torch==2.13.0")


def test_a_missing_bundled_library_is_named_with_the_reinstall(install) -> None:
    pkg = install()
    (pkg / "vendor_torch" / "libtorch_cpu.so").unlink()
    with pytest.raises(BootstrapError) as err:
        _view(pkg)
    assert "missing its bundled library torch_fl/vendor_torch/libtorch_cpu.so" in str(err.value)
    assert "pip install --force-reinstall --no-deps torch_fl==2.13.0+host.forked" in str(err.value)


def test_a_damaged_manifest_is_named(install) -> None:
    pkg = install()
    (pkg / "compatibility.json").write_text("{not json")
    with pytest.raises(BootstrapError, match="compatibility.json is damaged"):
        load_manifest(str(pkg))


def test_no_manifest_is_a_development_build(tmp_path: Path) -> None:
    assert load_manifest(str(tmp_path)) is None
    bootstrap.ensure(str(tmp_path))  # nothing to do, nothing raised


def test_the_hook_never_raises_and_import_torch_fl_reports_why(install) -> None:
    pkg = install()
    install.cache.mkdir(mode=0o700)
    install.cache.chmod(0o775)
    assert bootstrap.on_torch_import(str(pkg)) is None
    assert "writable by group or others" in str(bootstrap._errors.pop(str(pkg)))


def test_load_order_puts_dependencies_first() -> None:
    recs = [Library(f"d/{n}", n, tuple(needs), "bundled") for n, needs in [
        ("libtorch_cuda.so", ["libc10_cuda.so", "libcudart.so.13", "libtorch_cpu.so"]),
        ("libtorch_cuda_linalg.so", ["libtorch_cuda.so"]),
        ("libc10_cuda.so", ["libc10.so"]),
        ("libcaffe2_nvrtc.so", ["libnvrtc.so.13"]),
    ]]
    order = [r.soname for r in cuda_assets.load_order(recs)]
    assert order.index("libc10_cuda.so") < order.index("libtorch_cuda.so") < order.index("libtorch_cuda_linalg.so")
    assert sorted(order) == sorted(r.soname for r in recs)
    cyclic = [Library("a", "a", ("b",), "bundled"), Library("b", "b", ("a",), "bundled")]
    assert [r.soname for r in cuda_assets.load_order(cyclic)] == ["b", "a"]


def test_a_missing_dependency_is_read_from_the_loader_message() -> None:
    msg = "libnvJitLink.so.13: cannot open shared object file: No such file or directory"
    assert cuda_assets.missing_dependency(msg) == "libnvJitLink.so.13"
    assert cuda_assets.missing_dependency("/x/libfoo.so: undefined symbol: bar") is None


def _native(tmp_path: Path) -> Manifest:
    doc = _manifest(kind="native-sdk", directory=None, platform="ascend",
                    sdk={"name": "cann", "root": {"env": "ASCEND_TOOLKIT_HOME", "default": "/opt/flagos-absent"}},
                    runtime={"directories": [{"path": "/opt/flagos-absent/lib64", "env": "ASCEND_TOOLKIT_HOME",
                                              "libraries": ["libascendcl.so"]}]})
    return from_document(str(tmp_path / "compatibility.json"), doc)


def test_native_sdk_runtime_directories_move_with_their_variable(tmp_path: Path) -> None:
    m = _native(tmp_path)
    (rd,) = m.runtime_directories
    assert (rd.path, rd.env, rd.libraries) == ("/opt/flagos-absent/lib64", "ASCEND_TOOLKIT_HOME", ("libascendcl.so",))
    assert native_sdk.runtime_directories(m, {}) == [("/opt/flagos-absent/lib64", rd)]
    moved = native_sdk.runtime_directories(m, {"ASCEND_TOOLKIT_HOME": str(tmp_path / "cann")})
    assert moved[0][0] == str(tmp_path / "cann" / "lib64")


def test_native_sdk_failures_name_the_directory_the_library_and_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _native(tmp_path)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    with pytest.raises(BootstrapError) as err:
        native_sdk.check(m)
    assert str(err.value) == ("torch_fl (ascend) needs the vendor runtime directory /opt/flagos-absent/lib64, which "
                              "does not exist; install the cann runtime, or set ASCEND_TOOLKIT_HOME to the prefix "
                              "where the cann runtime is installed")
    (tmp_path / "cann" / "lib64").mkdir(parents=True)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path / "cann"))
    with pytest.raises(BootstrapError, match=rf"needs libascendcl.so in the vendor runtime directory "
                                             rf"{tmp_path}/cann/lib64, which does not have it; .* set "
                                             rf"ASCEND_TOOLKIT_HOME"):
        native_sdk.check(m)


def test_the_key_does_not_read_whole_libraries(install, monkeypatch: pytest.MonkeyPatch) -> None:
    """Import-time cost: only the manifest is hashed, never a (500 MB) library."""
    pkg = install()
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(data: bytes = b"", **kw: object):
        hashed.append(len(data))
        return real(data, **kw)

    monkeypatch.setattr(hashlib, "sha256", counting)
    _view(pkg)
    assert hashed and max(hashed) < 1 << 20


def test_entries_of_a_torch_that_is_gone_are_pruned_when_a_view_is_built(install, tmp_path: Path) -> None:
    pkg = install()
    entry = _view(pkg)
    views = entry.parent
    gone = views / ("0" * 32)
    (gone / "torch").mkdir(parents=True)
    (gone / "torch" / "__init__.py").symlink_to(tmp_path / "uninstalled-torch" / "__init__.py")
    crashed = views / ".tmp-crashed-1-ab"
    crashed.mkdir()
    (install.site / "torch" / "lib" / "libtorch_python.so").write_bytes(b"torch reinstalled")
    new = _view(pkg)
    assert new != entry
    assert sorted(p.name for p in views.iterdir()) == sorted([".lock", entry.name, new.name])


@pytest.mark.compile
def test_native_sdk_with_the_prefix_moved_loads_the_runtime_from_there(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's RPATH names the default prefix; loaded first from the moved one, the runtime wins by SONAME."""
    import subprocess

    cc = require_tool("gcc", "a C compiler")
    lib = tmp_path / "cann" / "lib64" / "libascendcl.so"
    lib.parent.mkdir(parents=True)
    src = tmp_path / "acl.c"
    src.write_text("int aclInit(const char *config) { (void)config; return 0; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libascendcl.so", "-o", str(lib), str(src)], check=True)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path / "cann"))
    native_sdk.check(_native(tmp_path))
    with open("/proc/self/maps") as f:
        assert str(lib) in f.read()
