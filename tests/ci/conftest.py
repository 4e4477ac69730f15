"""Fixtures for the release-CI tests: a real authenticated pypiserver for the publish step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.publish import PyPIServer, serving


@pytest.fixture
def pypi(tmp_path: Path) -> Iterator[PyPIServer]:
    with serving(tmp_path / "index") as server:
        yield server
