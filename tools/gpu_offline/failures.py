"""The two ways a step ends badly, and the file hash every step checks against.

Exit codes (``__main__``): 0 ok, 1 a check failed, 2 unusable input; both errors carry one line:
the problem, then the fix.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20


class UsageError(Exception):
    """Unusable input: exit 2 with one line."""


class CheckFailed(Exception):
    """A check found the result wrong: exit 1 with one line."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()
