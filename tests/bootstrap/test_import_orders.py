"""Every import order, for the host wheel and the host-forked STAND-IN wheel, each in a fresh stock-torch venv.

After the imports, ``/proc/self/maps`` of the process that did them must show
the wheel's libraries (forked: the bundled core libraries, and not one of the
stock torch/lib copies), the flagos device must compute, and no file of the
installed torch may have changed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.bootstrap import Venv, torch_tree_hashes
from orders import ORDERS, run_order

pytestmark = [pytest.mark.wheel, pytest.mark.compile, pytest.mark.slow]

def run(venv: Venv, order: str, tmp_path: Path, **env: str) -> dict:
    return run_order(venv.python, order, tmp_path, venv.env(**env))


def assert_forked_maps(venv: Venv, maps: list[str]) -> None:
    mapped = set(maps)
    for lib in venv.bundled():
        assert os.path.realpath(lib) in mapped, f"bundled {lib.name} is not mapped"
        stock = os.path.realpath(venv.site / "torch" / "lib" / lib.name)
        assert stock not in mapped, f"the stock {stock} is mapped"


@pytest.mark.parametrize("order", list(ORDERS))
def test_forked_every_import_order_maps_the_bundled_core_libraries(forked: Venv, order: str, tmp_path: Path) -> None:
    result = run(forked, order, tmp_path)
    assert result["sum"] == 12.0 and result["device"] == "flagos:0"
    assert_forked_maps(forked, result["maps"])
    # torch came from the private view, never from a modified installation.
    assert result["torch_file"].startswith(str(forked.cache / "torch-views")), result["torch_file"]


@pytest.mark.parametrize("order", list(ORDERS))
def test_host_every_import_order_works(host: Venv, order: str, tmp_path: Path) -> None:
    result = run(host, order, tmp_path)
    assert result["sum"] == 12.0 and result["device"] == "flagos:0"
    assert os.path.realpath(host.site / "torch_fl" / "lib" / "libflagos_hostrt.so") in result["maps"]
    assert result["torch_file"] == str(host.site / "torch" / "__init__.py")
    assert not host.cache.exists(), "the in-wheel-runtime kind has nothing to cache"


def test_the_wheel_installs_the_startup_hook_at_its_root(forked: Venv, host: Venv) -> None:
    import csv
    import zipfile

    for venv in (forked, host):
        with zipfile.ZipFile(venv.wheel) as zf:
            names = set(zf.namelist())
            record = next(n for n in names if n.endswith(".dist-info/RECORD"))
            listed = {row[0] for row in csv.reader(zf.read(record).decode().splitlines()) if row}
        bootstrap = {"__init__", "errors", "manifest", "installed_torch", "cache", "forked_libtorch", "cuda_assets",
                     "native_sdk", "after_torch", "kinds"}
        for member in ("torch_fl_startup.pth", "_torch_fl_startup.py",
                       *(f"torch_fl_bootstrap/{name}.py" for name in sorted(bootstrap))):
            assert member in names and member in listed, member
        assert not [n for n in names if n.startswith("torch_fl_bootstrap/") and n.endswith(".py")
                    and n[len("torch_fl_bootstrap/"):-3] not in bootstrap], "a bootstrap module this test does not know"
        assert (venv.site / "torch_fl_startup.pth").is_file()


def test_the_hook_does_no_work_until_torch_is_imported(forked: Venv) -> None:
    proc = forked.run("""
        import json, sys
        print(json.dumps({"hook": [type(f).__name__ for f in sys.meta_path],
                          "loaded": sorted(m for m in sys.modules if "torch" in m or m in ("json", "hashlib"))}))
    """)
    seen = json.loads(proc.stdout)
    assert seen["hook"][0] == "TorchImportHook"
    assert seen["loaded"] == ["_torch_fl_startup", "json"], seen  # json: this script's own import
    off = forked.run("import sys; print([type(f).__name__ for f in sys.meta_path])",
                     env=forked.env(FLAGOS_NO_STARTUP_HOOK="1"))
    assert "TorchImportHook" not in off.stdout


@pytest.mark.parametrize(("kind", "modules"), [
    ("host", ["torch_fl_bootstrap", "torch_fl_bootstrap.errors", "torch_fl_bootstrap.kinds",
              "torch_fl_bootstrap.manifest"]),
    # after_torch: torch's autoload imports torch_fl while torch is importing, which then checks the maps.
    ("host-forked", ["torch_fl_bootstrap", "torch_fl_bootstrap.after_torch", "torch_fl_bootstrap.cache",
                     "torch_fl_bootstrap.errors",
                     "torch_fl_bootstrap.forked_libtorch", "torch_fl_bootstrap.installed_torch",
                     "torch_fl_bootstrap.kinds", "torch_fl_bootstrap.manifest"]),
])
def test_only_the_bundle_kind_in_use_is_imported(make_venv: Callable[[str], Venv], kind: str,
                                                 modules: list[str]) -> None:
    venv = make_venv(kind)
    proc = venv.run("""
        import sys, torch
        print(" ".join(sorted(m for m in sys.modules if m.startswith("torch_fl_bootstrap"))))
        print(sys.modules["torch_fl_bootstrap"].__file__)
    """)
    imported, where = proc.stdout.split("\n")[:2]
    assert imported.split() == modules
    assert where == str(venv.site / "torch_fl_bootstrap" / "__init__.py")


def test_forked_without_the_hook_import_torch_fl_first_still_works(forked: Venv, tmp_path: Path) -> None:
    result = run(forked, "torch_fl then torch", tmp_path, FLAGOS_NO_STARTUP_HOOK="1")
    assert_forked_maps(forked, result["maps"])


def test_forked_python_S_with_torch_first_is_an_import_error_naming_the_fix(forked: Venv) -> None:
    code = f"import sys; sys.path.append({str(forked.site)!r}); import torch; import torch_fl"
    proc = forked.run(code, check=False, python_args=("-S",), env=forked.env(TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("torch_fl_bootstrap.errors.BootstrapError: torch_fl (forked-libtorch) must prepare"), last
    assert "python -S" in last and "Import torch_fl before torch" in last
    # ...and in that interpreter, importing torch_fl first works.
    first = f"import sys; sys.path.append({str(forked.site)!r}); import torch_fl, torch; print(torch.__file__)"
    ok = forked.run(first, python_args=("-S",))
    assert "torch-views" in ok.stdout


def test_forked_hook_off_and_import_torch_alone_fails_naming_the_switch(forked: Venv) -> None:
    proc = forked.run("import torch", check=False, env=forked.env(FLAGOS_NO_STARTUP_HOOK="1"))
    assert proc.returncode != 0
    assert "FLAGOS_NO_STARTUP_HOOK=1" in proc.stderr and "is mapped" in proc.stderr


def test_privateuse1_claimed_by_another_backend_is_named(host: Venv) -> None:
    proc = host.run("import torch; torch.utils.rename_privateuse1_backend('otherdev'); import torch_fl",
                    check=False, env=host.env(TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert proc.returncode != 0
    assert "already claimed by 'otherdev'" in proc.stderr.strip().splitlines()[-1]


def test_zz_installed_torch_is_byte_identical(forked: Venv, host: Venv) -> None:
    """Runs last in this module: every import above left every file of the installed torch as it was."""
    for venv in (forked, host):
        after = torch_tree_hashes(venv.site)
        changed = sorted(k for k in set(after) | set(venv.torch_hashes) if after.get(k) != venv.torch_hashes.get(k))
        assert not changed, f"{venv.kind}: {changed[:5]}"
    assert sys.version_info >= (3, 10)
