"""Fixtures for the torch-fl-publish tests: real wheels and a real authenticated pypiserver."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.publish import PyPIServer, make_wheel, serving


@pytest.fixture
def pypi(tmp_path: Path) -> Iterator[PyPIServer]:
    with serving(tmp_path / "index") as server:
        yield server


@pytest.fixture
def wheels(tmp_path: Path) -> list[Path]:
    """The wheels to publish: FLAGOS_TEST_WHEEL_DIR's, if given, else three built here."""
    out = tmp_path / "dist"
    given = os.environ.get("FLAGOS_TEST_WHEEL_DIR")
    found = sorted(Path(given).glob("*.whl")) if given else []
    if found:
        # The fault tests need three files; pad with small ones of another project.
        padding = [make_wheel(out, name="torch_fl_pad", version=f"0.0.{i}", tag="py3-none-any") for i in range(3)]
        return found + padding[: max(0, 3 - len(found))]
    return [
        make_wheel(out, version="2.13.0+host", payload_size=300_000),
        make_wheel(out, version="2.13.0+host.forked", payload_size=200_000),
        make_wheel(out, name="torch_fl_demo", version="2.13.0", tag="py3-none-any"),
    ]
