"""Where the tests find the project: one definition of the repository root."""

from __future__ import annotations

from pathlib import Path

#: The repository root (tests/support/paths.py -> two folders up).
REPO = Path(__file__).resolve().parents[2]
