"""The FLAGOS_* registry, the unknown-variable warning and bad runtime configuration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torch_fl import _env


# How the project's sources read an environment variable: Python and C++,
# CMake ($ENV{...}; its ${...} are CMake variables), shell.
_ENV_READS = re.compile(
    r"""environ(?:\.get)?[\[(]\s*["'](FLAGOS_[A-Z0-9_]+)"""
    r"""|getenv\(\s*["'](FLAGOS_[A-Z0-9_]+)"""
    r"""|\$ENV\{(FLAGOS_[A-Z0-9_]+)\}"""
)
_SHELL_READS = re.compile(r"\$\{(FLAGOS_[A-Z0-9_]+)(?::-|\})")


def test_registry_knows_every_variable_the_project_reads() -> None:
    import torch_fl

    repo = Path(__file__).resolve().parents[2]
    sources = [Path(torch_fl.__file__).parent.rglob("*.py"), repo.glob("CMakeLists.txt"), repo.glob("csrc/**/*.cpp"),
               repo.glob("ci/**/*"), repo.glob("packaging/src/**/*.py"), repo.glob("preflight/src/**/*.py"),
               repo.glob("startup/**/*")]
    read: set[str] = set()
    for group in sources:
        for path in group:
            if path.is_file():
                text = path.read_text(errors="replace")
                for match in _ENV_READS.finditer(text):
                    read.add(next(g for g in match.groups() if g))
                if path.name != "CMakeLists.txt":
                    read |= set(_SHELL_READS.findall(text))
    assert "FLAGOS_HOST_DEVICES" in read and "FLAGOS_CUDA_TORCH_DIR" in read  # the scan finds reads
    assert not {name for name in read if _env.unknown_variables({name: ""})}


def test_unknown_variables_are_listed_with_prefix_families() -> None:
    env = {"FLAGOS_OP_mm": "cpu", "FLAGOS_HOST_DEVICE": "3", "FLAGOS_LOG_DISPATCH": "1", "OTHER": "x"}
    assert _env.unknown_variables(env) == ["FLAGOS_HOST_DEVICE"]


def test_unknown_variable_warns_once_at_import_with_a_suggestion(run_python) -> None:
    result = run_python(
        """
        import warnings
        warnings.simplefilter("always")
        import torch, torch_fl
        import importlib; importlib.reload(torch_fl._env); torch_fl._env._warned = True
        """,
        env={"FLAGOS_HOST_DEVICE": "3"},
    )
    lines = [line for line in result.stderr.splitlines() if "FlagosEnvWarning" in line]
    assert len(lines) == 1
    assert "unknown environment variable FLAGOS_HOST_DEVICE is ignored; did you mean FLAGOS_HOST_DEVICES?" in lines[0]


def test_markdown_table_lists_every_variable() -> None:
    table = _env.markdown_table()
    for var in _env.REGISTRY:
        assert var.name in table


def test_readme_table_is_the_generated_one() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert _env.render_into(readme) == readme, "regenerate it: python -m torch_fl._env --update README.md"


@pytest.mark.parametrize("value", ["two", "0", "-1", "65", "2x"])
def test_malformed_host_devices_is_one_line_naming_the_value(run_python, value: str) -> None:
    result = run_python("import torch; torch.ones(1, device='flagos')", env={"FLAGOS_HOST_DEVICES": value},
                        check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: FLAGOS_HOST_DEVICES=") and f"'{value}'" in last, result.stderr
    assert "whole number from 1 to 64" in last


@pytest.mark.parametrize(("env", "expected"), [
    ({"FLAGOS_HOST_DEVICES": "two"}, "FLAGOS_HOST_DEVICES='two' is not a device count"),
    ({"FLAGOS_HOST_MEMORY_LIMIT": "lots"}, "FLAGOS_HOST_MEMORY_LIMIT='lots' is not a memory size"),
])
def test_malformed_runtime_setting_warns_once_at_import_and_torch_works(run_python, env: dict[str, str],
                                                                        expected: str) -> None:
    result = run_python("import torch; print('cpu', torch.ones(3).sum().item())", env=env)
    assert result.stdout == "cpu 3.0\n"
    line, = result.stderr.strip().splitlines()
    assert line.startswith("torch_fl:0: FlagosSettingWarning: ") and expected in line
    assert line.endswith("; flagos is unusable in this process")


def test_unknown_variable_warning_is_one_line(run_python) -> None:
    result = run_python("import torch", env={"FLAGOS_HOST_DEVICE": "3"})
    line, = result.stderr.strip().splitlines()
    assert line == ("torch_fl:0: FlagosEnvWarning: unknown environment variable FLAGOS_HOST_DEVICE is ignored; "
                    "did you mean FLAGOS_HOST_DEVICES?")


def test_malformed_memory_limit_names_the_value(run_python) -> None:
    result = run_python("import torch; torch.ones(1, device='flagos')", env={"FLAGOS_HOST_MEMORY_LIMIT": "lots"},
                        check=False)
    assert "FLAGOS_HOST_MEMORY_LIMIT='lots' is not a memory size" in result.stderr.strip().splitlines()[-1]


def test_host_devices_sets_the_count(run_python) -> None:
    result = run_python("import torch; print(torch.flagos.device_count(), torch.ones(1, device='flagos:3').device)",
                        env={"FLAGOS_HOST_DEVICES": "4"})
    assert result.stdout.split() == ["4", "flagos:3"]


def test_unknown_device_index_is_one_line_naming_it(run_python) -> None:
    result = run_python("import torch; torch.ones(1, device='flagos:5')", check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert last == "RuntimeError: invalid flagos device index 5; valid indices are 0..1"
