"""The evidence of a calibrated route table: ``<table>.evidence.json`` beside ``<table>.conf``.

It says what the table was measured with (flag_gems, Triton, torch, the device, the command) and what was
found per operator, dtype and size bucket (cases, correctness, median times).  Its JSON Schema is
``route_evidence.schema.json`` in this folder; ``validate`` checks a document against it where ``jsonschema``
is installed (the calibration command and the tests), and ``matches`` compares its versions and device with
this process's for the shipped tables.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import platform
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_PATH", "environment", "load", "matches", "validate"]

SCHEMA_PATH = Path(__file__).with_name("route_evidence.schema.json")
#: The facts of a process that a calibrated table holds only for.
MATCHED = ("platform", "flag_gems", "triton", "device")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def device_name(kernel_type: str) -> str:
    """The kernel device, as the evidence names it: the GPU's name (``NVIDIA H200``), or the host CPU."""
    if kernel_type == "cuda":
        import torch

        return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    return f"{platform.machine()} CPU"


def environment(platform_name: str, kernel_type: str, flag_gems: str) -> dict[str, Any]:
    """This process's facts a table must match (``MATCHED``) and the others the evidence records."""
    import torch

    return {"platform": platform_name, "flag_gems": flag_gems, "triton": _version("triton"),
            "device": device_name(kernel_type), "torch": torch.__version__, "torch_fl": _version("torch_fl"),
            "python": platform.python_version()}


def matches(evidence: dict[str, Any], env: dict[str, Any]) -> list[str]:
    """The facts in which ``evidence`` differs from ``env``, as ``name: table's, here`` (empty: it holds here)."""
    recorded = evidence.get("environment", {})
    return [f"{key} {recorded.get(key)!s} (here {env.get(key)!s})" for key in MATCHED
            if recorded.get(key) != env.get(key)]


@functools.cache
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def validate(document: dict[str, Any]) -> None:
    """Raises jsonschema.ValidationError when ``document`` breaks the schema; nothing without jsonschema."""
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(document, _schema())


@functools.cache
def load(path: str) -> dict[str, Any] | None:
    """The evidence at ``path``, read once; None where it is missing or not JSON."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None
