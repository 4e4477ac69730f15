"""The forked-libtorch view in the private cache: concurrency, damage, permissions, read-only site-packages.

Runs the real host-forked STAND-IN wheel (stock torch+cpu core libraries copied
into the wheel as a vendor fork would ship them) in a fresh stock-torch venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.bootstrap import Venv, torch_tree_hashes

pytestmark = [pytest.mark.wheel, pytest.mark.compile, pytest.mark.slow]

_REPORT = r"""
import json, os, torch
x = torch.ones(4, device="flagos")
maps = {l.split(None, 5)[5].strip() for l in open("/proc/self/maps") if l.count(" ") >= 5 and ".so" in l}
print(json.dumps({"torch_file": torch.__file__, "sum": (x * 3).sum().item(),
                  "c10": sorted(m for m in maps if m.endswith("/libc10.so"))}))
"""


def _views(cache: Path) -> Path:
    return cache / "torch-views"


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in _views(cache).iterdir() if not p.name.startswith("."))


def _report(venv: Venv, cache: Path, **env: str) -> dict:
    proc = venv.run(_REPORT, env=venv.env(FLAGOS_CACHE_DIR=str(cache), **env))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _vendor_c10(venv: Venv) -> str:
    return os.path.realpath(venv.site / "torch_fl" / "vendor_torch" / "libc10.so")


@pytest.mark.parametrize(("start", "processes"), [("empty cache", 16), ("damaged entry", 6)])
def test_processes_importing_at_once_all_succeed_and_agree(forked: Venv, tmp_path: Path, start: str,
                                                           processes: int) -> None:
    cache = tmp_path / "cache"
    if start == "damaged entry":
        _report(forked, cache)
        (entry,) = _entries(cache)
        (entry / "torch" / "lib" / "libtorch_cpu.so").unlink()
    procs = [subprocess.Popen([str(forked.python), "-c", _REPORT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path, env=forked.env(FLAGOS_CACHE_DIR=str(cache)))
             for _ in range(processes)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert {r["torch_file"] for r in results} == {results[0]["torch_file"]}
    assert all(r["c10"] == [_vendor_c10(forked)] and r["sum"] == 12.0 for r in results)
    entries = _entries(cache)
    assert len(entries) == 1 and results[0]["torch_file"] == str(entries[0] / "torch" / "__init__.py")
    leftovers = [p.name for p in _views(cache).iterdir() if p.name.startswith((".tmp-", ".trash-"))]
    assert not leftovers
    for d in (cache, _views(cache), entries[0]):
        assert d.stat().st_mode & 0o777 == 0o700, d


@pytest.mark.parametrize("damage", ["symlink removed", "symlink to the stock library", "stamp truncated",
                                    "entry is a file"])
def test_a_damaged_entry_is_rebuilt(forked: Venv, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    first = _report(forked, cache)
    (entry,) = _entries(cache)
    lib = entry / "torch" / "lib" / "libc10.so"
    if damage == "symlink removed":
        lib.unlink()
    elif damage == "symlink to the stock library":
        lib.unlink()
        lib.symlink_to(forked.site / "torch" / "lib" / "libc10.so")
    elif damage == "stamp truncated":
        (entry / "view.json").write_text("{")
    else:
        shutil.rmtree(entry)
        entry.write_text("not a view")
    again = _report(forked, cache)
    assert again == first and again["c10"] == [_vendor_c10(forked)]
    assert os.readlink(lib) == _vendor_c10(forked)
    assert not [p for p in _views(cache).iterdir() if p.name.startswith((".tmp-", ".trash-"))]


@pytest.mark.parametrize("which", ["cache root", "views directory"])
def test_a_cache_directory_owned_by_another_user_is_refused(forked: Venv, tmp_path: Path, which: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to hand a directory to another user")
    cache = tmp_path / "cache"
    _report(forked, cache)
    target = cache if which == "cache root" else _views(cache)
    os.chown(target, 65534, 65534)
    proc = forked.run("import torch_fl", check=False, env=forked.env(FLAGOS_CACHE_DIR=str(cache)))
    assert proc.returncode != 0
    assert f"torch_fl refuses its cache directory {target}: it is owned by uid 65534" in proc.stderr
    assert "FLAGOS_CACHE_DIR" in proc.stderr


def test_a_group_writable_cache_directory_is_refused(forked: Venv, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cache.chmod(0o770)
    proc = forked.run("import torch", check=False, env=forked.env(FLAGOS_CACHE_DIR=str(cache)))
    assert proc.returncode != 0
    assert f"torch_fl refuses its cache directory {cache}: it is writable by group or others (mode 770)" \
        in proc.stderr
    assert not _views(cache).exists()


def _open_folder_of_another_user(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root to hand a directory to another user")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 65534, 65534)
    shared.chmod(0o777)
    return shared


def test_the_default_cache_under_another_users_open_folder_is_not_used(forked: Venv, tmp_path: Path) -> None:
    """XDG_CACHE_HOME in a folder nobody owns and everyone writes: whoever writes it could swap the view."""
    shared = _open_folder_of_another_user(tmp_path)
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir(mode=0o700)
    env = forked.env(XDG_CACHE_HOME=str(shared), TMPDIR=str(private_tmp))
    del env["FLAGOS_CACHE_DIR"]
    proc = forked.run(_REPORT, env=env)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    fallback = private_tmp / f"torch_fl-{os.geteuid()}"
    assert result["torch_file"].startswith(str(fallback / "torch-views") + "/"), result["torch_file"]
    assert result["c10"] == [_vendor_c10(forked)] and result["sum"] == 12.0
    warning = [line for line in proc.stderr.splitlines() if "torch_fl does not use the cache directory" in line]
    assert warning == [f"torch_fl:0: BootstrapWarning: torch_fl does not use the cache directory {shared}/torch_fl: "
                       f"{shared} is owned by uid 65534, neither you (uid 0) nor root, so someone else could put "
                       f"their own torch in its place; using {fallback} instead (set FLAGOS_CACHE_DIR to a directory "
                       f"that only you can write, below folders that only you or root can write to choose another)"]
    assert not list(shared.iterdir())


def test_an_explicit_cache_under_another_users_open_folder_is_refused(forked: Venv, tmp_path: Path) -> None:
    shared = _open_folder_of_another_user(tmp_path)
    proc = forked.run("import torch_fl", check=False, env=forked.env(FLAGOS_CACHE_DIR=str(shared / "cache")))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"torch_fl_bootstrap.errors.BootstrapError: torch_fl refuses its cache directory "
                           f"{shared}/cache: {shared} is owned by uid 65534"), last
    assert "set FLAGOS_CACHE_DIR to a directory that only you can write" in last
    assert not list(shared.iterdir())


def test_read_only_site_packages_works(forked: Venv, tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare") or \
            subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs a private mount namespace (unshare -m) to make site-packages read-only")
    site = str(forked.site)
    check = ("import os, errno\n"
             f"try:\n    open(os.path.join({site!r}, 'probe'), 'w')\nexcept OSError as e:\n"
             "    assert e.errno == errno.EROFS\nelse:\n    raise SystemExit('site-packages is writable')\n") + _REPORT
    script = tmp_path / "ro.py"
    script.write_text(check)
    cache = tmp_path / "cache"
    cmd = ["unshare", "-m", "sh", "-c",
           'mount --make-rprivate / && mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" "$3"',
           "sh", site, str(forked.python), str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path,
                          env=forked.env(FLAGOS_CACHE_DIR=str(cache)), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["c10"] == [_vendor_c10(forked)] and result["sum"] == 12.0


def test_zz_installed_torch_is_byte_identical(forked: Venv) -> None:
    after = torch_tree_hashes(forked.site)
    changed = sorted(k for k in set(after) | set(forked.torch_hashes) if after.get(k) != forked.torch_hashes.get(k))
    assert not changed, changed[:5]
