"""The manifest schema: one source of truth, shipped inside preflight, and strict where the design says."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from torch_fl_preflight.errors import ManifestError
from torch_fl_preflight.schema import load_schema, parse_manifest

import _preflight_builders as B
from support.paths import REPO


def test_the_schema_exists_once_in_preflight() -> None:
    packaged = REPO / "preflight/src/torch_fl_preflight/compatibility.schema.json"
    link = REPO / "manifests" / "compatibility.schema.json"
    # manifests/ names the contract, but only points at preflight's copy: there is no second file to drift.
    assert link.is_symlink() and link.resolve() == packaged.resolve()
    assert not packaged.is_symlink()
    # and the installed distribution ships that file
    assert load_schema() == json.loads(packaged.read_text())


def test_packaging_validates_with_preflights_schema() -> None:
    from torch_fl_packaging import manifest

    assert manifest.load_schema() is load_schema()


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(load_schema())


def _good() -> dict[str, Any]:
    files = {"torch_fl/x.py": b"pass\n"}
    return B.manifest_for(files, tags=["cp311-cp311-linux_x86_64"], filename="torch_fl-2.13.0+host-cp311-cp311-"
                          "linux_x86_64.whl", requirements=["torch>=2.13,<2.14"])


def _parse(doc: Any) -> dict[str, Any]:
    return parse_manifest(json.dumps(doc).encode(), "compatibility.json")


def test_good_manifest_validates() -> None:
    assert _parse(_good())["platform"] == "host"


@pytest.mark.parametrize("placeholder", ["unknown", "latest", "any", "*", "", "Unknown", "LATEST"])
def test_sdk_version_placeholders_are_rejected(placeholder: str) -> None:
    doc = _good()
    doc["sdk"]["version"] = placeholder
    with pytest.raises(ManifestError, match="sdk/version"):
        _parse(doc)


def test_absent_sdk_version_means_unknown_and_is_valid() -> None:
    doc = _good()
    doc["sdk"] = {"name": "maca", "version": "3.8.1"}
    assert _parse(doc)["sdk"]["version"] == "3.8.1"
    del doc["sdk"]["version"]
    assert "version" not in _parse(doc)["sdk"]


@pytest.mark.parametrize(("path", "value"), [
    (("schema_version",), 2),
    (("schema_version",), "1"),
    (("bundle", "kind"), "shared-runtime"),
    (("bundle", "directory"), None),  # in-wheel-runtime bundles into a directory
    (("elf", 0, "sha256"), "abc"),
    (("elf", 0, "size"), "12"),
    (("elf", 0, "path"), "../escape.so"),
    (("elf", 0, "path"), "/abs.so"),
    (("elf", 0, "origin"), "downloaded"),
    (("torch", "cxx11_abi"), "yes"),
    (("companions",), {"flaggems": "latest"}),
    (("companions",), {"flaggems": "x.y"}),  # a pin is a released version, not a pattern
    (("companions",), {"flaggems": "5.0.x"}),
    (("companions",), {"flagtree": "v0.3"}),
    (("companions",), {"triton": "3.7.1"}),  # Triton's pin is the flaggems extra's requirement, not a companion
    (("floors", "glibc"), "new"),
    (("wheel", "tags"), []),
])
def test_schema_violations_are_unusable_input(path: tuple[Any, ...], value: Any) -> None:
    doc = _good()
    doc["elf"] = [{"path": "torch_fl/_C.so", "sha256": "0" * 64, "size": 1, "soname": None, "needed": [],
                   "rpath": [], "runpath": ["$ORIGIN/lib"], "origin": "built"}]
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ManifestError):
        _parse(doc)


def test_system_libraries_are_sonames() -> None:
    doc = _good()
    doc["runtime"]["system_libraries"] = ["libcuda.so.1"]
    assert _parse(doc)["runtime"]["system_libraries"] == ["libcuda.so.1"]
    doc["runtime"]["system_libraries"] = ["/usr/lib/libcuda.so.1"]
    with pytest.raises(ManifestError, match="system_libraries"):
        _parse(doc)


def test_native_sdk_bundles_nothing() -> None:
    doc = _good()
    doc["bundle"] = {"kind": "native-sdk", "directory": None}
    _parse(doc)
    doc["bundle"]["directory"] = "torch_fl/lib"
    with pytest.raises(ManifestError, match="bundle"):
        _parse(doc)


def test_unknown_top_level_key_is_rejected_but_x_keys_pass() -> None:
    doc = _good()
    doc["x-note"] = "extension"
    _parse(doc)
    bad = copy.deepcopy(doc)
    bad["platfrom"] = "host"
    with pytest.raises(ManifestError, match="platfrom"):
        _parse(bad)


@pytest.mark.parametrize("raw", [b"{", b"[]", b'{"a": NaN}', b'{"schema_version": 1, "schema_version": 1}',
                                 b"\xff\xfe", b"[" * 100000 + b"]" * 100000])
def test_not_json_is_unusable_input(raw: bytes) -> None:
    with pytest.raises(ManifestError):
        parse_manifest(raw, "compatibility.json")
