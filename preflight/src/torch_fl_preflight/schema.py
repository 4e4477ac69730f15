"""The compatibility.json schema, and reading a manifest safely.

The schema exists once: compatibility.schema.json in this package, shipped with this distribution
(the one definition of a valid wheel).  torch-fl-build validates the manifests it writes with
load_schema() from here, and manifests/compatibility.schema.json is a symbolic link to this file.
The typed model of a manifest is compatibility.py, whose from_json validates with validate_manifest().
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema

from torch_fl_preflight.errors import ManifestError

SCHEMA_VERSION = 1
MANIFEST_PATH_IN_PACKAGE = "compatibility.json"
# A manifest with a record for each of a few dozen ELF files is tens of kilobytes.
MAX_MANIFEST_BYTES = 4 << 20
_FIX = "rebuild the wheel with torch-fl-build, which writes a valid compatibility.json"


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    text = resources.files("torch_fl_preflight").joinpath("compatibility.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@lru_cache(maxsize=1)
def validator() -> jsonschema.protocols.Validator:
    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    v: jsonschema.protocols.Validator = cls(schema)
    return v


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def decode_manifest(data: bytes, where: str) -> dict[str, Any]:
    """Decode a compatibility.json into a JSON object, not yet validated; ManifestError (exit 2) on any problem."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{where} is {len(data)} bytes (limit {MAX_MANIFEST_BYTES})", _FIX)
    try:
        text = data.decode("utf-8")
        doc = json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestError(f"{where} is not valid JSON ({str(exc)[:160]})", _FIX) from exc
    if not isinstance(doc, dict):
        raise ManifestError(f"{where} is a JSON {type(doc).__name__}, not an object", _FIX)
    return doc


def validate_manifest(doc: Mapping[str, Any], where: str) -> None:
    """Check a decoded compatibility.json against the schema; ManifestError (exit 2) when it is not valid."""
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ManifestError(
            f"{where} has schema_version {version!r}; this preflight reads {SCHEMA_VERSION}",
            "upgrade torch-fl-preflight, or rebuild the wheel",
        )
    try:
        error = jsonschema.exceptions.best_match(validator().iter_errors(doc))
    except RecursionError as exc:
        raise ManifestError(f"{where} nests too deeply", _FIX) from exc
    if error is not None:
        at = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ManifestError(f"{where} violates the schema at {at}: {error.message[:200]}", _FIX)


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """Decode and schema-validate a compatibility.json, as a JSON object (``compatibility.read_compatibility``
    models it); ManifestError (exit 2) on any problem."""
    doc = decode_manifest(data, where)
    validate_manifest(doc, where)
    return doc
