"""torch_fl imported from its own source tree (no built extension) says so in one line, with the fix."""

from __future__ import annotations

import os
import subprocess
import sys

from support.paths import REPO

_UNBUILT = (f"torch_fl._source_tree.UnbuiltError: torch_fl is imported from its source tree {REPO}, where its "
            f"extension torch_fl._C is not built; build it (pip install --no-build-isolation -e {REPO}) or run "
            f"Python from another directory to import the installed torch_fl")


def _python(code: str, cwd: os.PathLike[str] | str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTHON", "TORCH_DEVICE"))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env={**clean, **env}, timeout=300, check=False)


def test_import_torch_fl_in_the_source_tree_is_one_line_naming_the_fix() -> None:
    # `python -c` puts the current directory first on sys.path: the checkout's torch_fl/ wins.
    proc = _python("import torch_fl", REPO, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == _UNBUILT, proc.stderr[-2000:]


def test_import_torch_in_the_source_tree_names_it_as_the_cause_of_the_autoload_failure() -> None:
    proc = _python("import torch", REPO)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert _UNBUILT in lines, proc.stderr[-2000:]
    # PyTorch wraps what its autoload raises; the reason comes first, then its wrapper.
    assert lines.index(_UNBUILT) < next(i for i, ln in enumerate(lines) if "Failed to load the backend extension" in ln)


def test_from_another_directory_the_installed_torch_fl_is_imported(tmp_path: os.PathLike[str]) -> None:
    code = "import torch, torch_fl; print(torch_fl.__file__); print(torch.ones(2, device='flagos').sum().item())"
    proc = _python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, total = proc.stdout.split()
    assert where != str(REPO / "torch_fl" / "__init__.py") and "site-packages" in where and total == "2.0"
