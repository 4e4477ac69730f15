from __future__ import annotations

from pathlib import Path

import pytest

import _preflight_builders as B
from support.tools import require_tool


@pytest.fixture(scope="session")
def natives(tmp_path_factory: pytest.TempPathFactory) -> B.Natives:
    require_tool("gcc", "it compiles the fixture libraries")
    return B.build_natives(tmp_path_factory.mktemp("natives"))


@pytest.fixture(scope="session")
def host_wheel(natives: B.Natives, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host-platform wheel: plugin + runtime + dependency, real ELF files, RECORD, manifest."""
    return B.write_wheel(tmp_path_factory.mktemp("wheel"), B.WheelSpec(B.host_wheel_files(natives)))


@pytest.fixture(scope="session")
def target_python(natives: B.Natives, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An environment with the synthetic torch 2.13.0 the host wheel was 'built' against."""
    return str(B.make_target_env(tmp_path_factory.mktemp("env213") / "venv", natives.torch_lib))


@pytest.fixture(scope="session")
def target_python_next(natives: B.Natives, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An environment with a synthetic 'next' torch whose libtorch_cpu lacks a symbol the plugin uses."""
    return str(B.make_target_env(tmp_path_factory.mktemp("env214") / "venv", natives.torch_lib_new,
                                 torch_version="2.13.1+cpu", git="fedcba9876543210fedcba9876543210fedcba98"))
