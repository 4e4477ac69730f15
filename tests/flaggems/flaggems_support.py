"""Helpers shared by the flaggems provider tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

STATUS = """
    import json, torch, torch_fl
    from torch_fl import flaggems
    print(json.dumps(flaggems.status()))
    """


def status_of(run_flagos: Callable[..., Any], env: dict[str, str]) -> dict[str, Any]:
    """``torch_fl.flaggems.status()`` in a fresh interpreter with ``env``."""
    result = run_flagos(STATUS, env)
    return json.loads(result.stdout.splitlines()[-1])  # type: ignore[no-any-return]
