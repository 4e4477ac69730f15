"""preflight's FlagGems/Triton checks on real wheels installed with real pip.

A torch_fl wheel (real ELF files, RECORD, manifest) whose METADATA declares the cuda recipe's
``flaggems`` extra; stand-in ``flag_gems`` and ``triton`` wheels with the real distribution names
and versions, whose packages raise on import (preflight reads their metadata, never imports them);
pip installs them into a target environment with a synthetic torch, as a user's ``pip install
'torch_fl[flaggems]'`` would.  Then ``torch-fl-preflight`` runs as a user runs it: exit codes
0/1/2, one-line messages with the fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import _preflight_builders as B
from support.wheels import write_wheel

pytestmark = [pytest.mark.wheel, pytest.mark.compile]

FLAGGEMS = "5.0.2"
TRITON = "3.7.1"
EXTRA = [f'flag-gems=={FLAGGEMS}; extra == "flaggems"',
         f'triton=={TRITON}; platform_system == "Linux" and python_version < "3.15" and extra == "flaggems"']
COMPANIONS = {"flaggems": FLAGGEMS, "flagtree": "0.3.0", "flagcx": "0.5.0"}
BASE = ["torch>=2.13,<2.14"]


def _stand_in(links: Path, dist: str, version: str) -> None:
    """A pure-Python wheel named like the real one; importing its package fails loudly."""
    pkg = dist.replace("-", "_")
    write_wheel(links / f"{pkg}-{version}-py3-none-any.whl",
                {f"{pkg}/__init__.py": f"raise ImportError('stand-in {dist} {version}: never imported')\n".encode()},
                name=pkg, version=version, tag="py3-none-any")


@pytest.fixture(scope="module")
def links(natives: B.Natives, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --find-links directory: the torch_fl wheel with the extra, flag_gems and triton at two versions each."""
    d = tmp_path_factory.mktemp("links")
    B.write_wheel(d, B.WheelSpec(B.host_wheel_files(natives), requirements=BASE + EXTRA, provides_extra=("flaggems",),
                                 manifest_extra={"companions": COMPANIONS}))
    for version in (FLAGGEMS, "5.0.1"):
        _stand_in(d, "flag-gems", version)
    for version in (TRITON, "3.6.0"):
        _stand_in(d, "triton", version)
    return d


def _wheel(links: Path) -> Path:
    return next(links.glob("torch_fl-*.whl"))


def _pip(target: str, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # the machine's wheelhouse and constraints stay out
    r = subprocess.run([sys.executable, "-m", "pip", "--python", target, *args], capture_output=True, text=True,
                       env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def _target(natives: B.Natives, root: Path, links: Path, *specs: str) -> str:
    py = str(B.make_target_env(root / "venv", natives.torch_lib))
    if specs:
        _pip(py, "install", "--quiet", "--no-index", "--find-links", str(links), *specs)
    return py


def _line(out: str, check: str) -> str:
    return next(ln.strip() for ln in out.splitlines() if f" {check}:" in ln)


def test_the_extra_installs_the_pinned_pair_and_preflight_passes(natives: B.Natives, links: Path,
                                                                 tmp_path: Path) -> None:
    py = _target(natives, tmp_path, links, "torch_fl[flaggems]")
    r = B.run_preflight(["--installed", "--check-installed", "--python", py, "--no-elf-gates"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert _line(r.stdout, "host.flaggems") == \
        f"ok   host.flaggems: flag_gems {FLAGGEMS} is the release the wheel's flaggems routes are made for"
    assert _line(r.stdout, "host.triton") == f"ok   host.triton: triton {TRITON} satisfies the flaggems extra's " \
        f"triton=={TRITON}"
    assert "ok   manifest.companions" in r.stdout
    # --check-installed holds the base requirements only: an extra is the user's choice.
    assert "ok   host.requirements: all 3 requirement(s) are installed" in r.stdout
    # The wheel itself, before installing it, against the same environment.
    r = B.run_preflight(["--wheel", str(_wheel(links)), "--python", py, "--no-elf-gates", "--json"])
    doc = json.loads(r.stdout)
    status = {f["id"]: f["status"] for f in doc["subjects"][0]["findings"]}
    assert r.returncode == 0 and status["host.flaggems"] == status["host.triton"] == "pass"


def test_without_flag_gems_the_provider_is_off(natives: B.Natives, links: Path, tmp_path: Path) -> None:
    py = _target(natives, tmp_path, links, "torch_fl")
    r = B.run_preflight(["--installed", "--check-installed", "--python", py, "--no-elf-gates", "-v"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert _line(r.stdout, "host.flaggems") == "ok   host.flaggems: flag_gems is not installed: the flaggems " \
        "provider is off; pip install 'torch_fl[flaggems]' turns it on"
    assert _line(r.stdout, "host.triton").startswith("skip host.triton: flag_gems is not installed")


@pytest.mark.parametrize(("triton", "message"), [
    ("3.6.0", f"triton 3.6.0 is installed, the wheel's flaggems extra pins triton=={TRITON}"),
    (None, f"flag_gems {FLAGGEMS} is installed but triton is not (the wheel pins triton=={TRITON})"),
])
def test_a_triton_other_than_the_pin_fails_before_import(natives: B.Natives, links: Path, tmp_path: Path,
                                                         triton: str | None, message: str) -> None:
    specs = ["torch_fl", f"flag-gems=={FLAGGEMS}"] + ([f"triton=={triton}"] if triton else [])
    py = _target(natives, tmp_path, links, *specs)
    for mode in (["--installed"], ["--wheel", str(_wheel(links))]):
        r = B.run_preflight([*mode, "--python", py, "--no-elf-gates"])
        assert r.returncode == 1, r.stdout + r.stderr
        lines = r.stdout.splitlines()
        at = lines.index(f"  FAIL host.triton: {message}")
        assert lines[at + 1].strip() == f"fix: pip install 'triton=={TRITON}'"
        assert r.stdout.rstrip().endswith("skipped") and "FAILED: " in r.stdout


def test_another_flag_gems_release_warns_and_fails_when_strict(natives: B.Natives, links: Path,
                                                               tmp_path: Path) -> None:
    py = _target(natives, tmp_path, links, "torch_fl", "flag-gems==5.0.1", f"triton=={TRITON}")
    r = B.run_preflight(["--installed", "--python", py, "--no-elf-gates"])
    assert r.returncode == 0, r.stdout + r.stderr
    msg = f"flag_gems 5.0.1 is installed, the wheel's flaggems routes are made for FlagGems {FLAGGEMS}"
    assert _line(r.stdout, "host.flaggems") == f"WARN host.flaggems: {msg}"
    assert f"fix: pip install 'flag-gems=={FLAGGEMS}'" in r.stdout
    r = B.run_preflight(["--installed", "--python", py, "--no-elf-gates", "--strict-tested"])
    assert r.returncode == 1 and _line(r.stdout, "host.flaggems") == f"FAIL host.flaggems: {msg}"


def test_a_manifest_whose_pin_is_not_the_extras_fails(natives: B.Natives, tmp_path: Path,
                                                      target_python: str) -> None:
    whl = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), requirements=BASE + EXTRA,
                                              provides_extra=("flaggems",),
                                              manifest_extra={"companions": {**COMPANIONS, "flaggems": "5.0.1"}}))
    r = B.run_preflight(["--wheel", str(whl), "--python", target_python, "--no-elf-gates"])
    assert r.returncode == 1
    assert _line(r.stdout, "manifest.companions") == \
        f"FAIL manifest.companions: the flaggems extra requires flag-gems=={FLAGGEMS}, but companions.flaggems is 5.0.1"


def test_a_wheel_without_the_extra_checks_flag_gems_only(natives: B.Natives, links: Path, tmp_path: Path,
                                                         host_wheel: Path) -> None:
    """The host wheel records the FlagGems release but pins no Triton (its platform has no flaggems extra)."""
    whl = B.write_wheel(tmp_path, B.WheelSpec(B.host_wheel_files(natives), manifest_extra={"companions": COMPANIONS}))
    py = _target(natives, tmp_path, links, f"flag-gems=={FLAGGEMS}")
    r = B.run_preflight(["--wheel", str(whl), "--python", py, "--no-elf-gates", "-v"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert _line(r.stdout, "host.flaggems").startswith("ok   host.flaggems: flag_gems 5.0.2 is the release")
    assert _line(r.stdout, "host.triton") == "skip host.triton: the wheel's platform host pins no Triton for FlagGems"
    assert "manifest.companions" not in r.stdout
    # A wheel that records no FlagGems release at all (the fixture host wheel) has nothing to hold flag_gems to.
    r = B.run_preflight(["--wheel", str(host_wheel), "--python", py, "--no-elf-gates", "-v"])
    assert r.returncode == 0 and _line(r.stdout, "host.flaggems").startswith("skip host.flaggems: flag_gems 5.0.2")
