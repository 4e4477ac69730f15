"""The bootstrap's own record of compatibility.json (standard library only, so it cannot import preflight)
reads a subset of preflight's typed model: the same fields, under the same types, with the same values."""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
import zipfile
from pathlib import Path
from typing import Any

import pytest
from support.bootstrap import load_bootstrap

from torch_fl_preflight.compatibility import Compatibility

load_bootstrap()
from torch_fl_bootstrap import manifest as startup  # noqa: E402

#: Each field of the bootstrap's Manifest, and the path in the model it is read from.
READS: dict[str, tuple[str, ...]] = {
    "kind": ("bundle", "kind"),
    "platform": ("platform",),
    "wheel_version": ("wheel", "version"),
    "bundle_directory": ("bundle", "directory"),
    "torch_requirement": ("torch", "requirement"),
    "requirements": ("requirements",),
    "libraries": ("elf",),
    "sdk_name": ("sdk", "name"),
    "sdk_root": ("sdk", "root", "default"),
    "runtime_prefixes": ("runtime", "prefixes"),
    "runtime_directories": ("runtime", "directories"),
}
#: Not read from the document: the file the record was read from.
NOT_FROM_THE_DOCUMENT = {"path"}
#: Optional arrays the bootstrap reads as empty when absent, where the model keeps None.
ABSENT_AS_EMPTY = {"runtime_prefixes"}
#: The bootstrap's record classes, and the model's class each one is a subset of.
RECORDS = {startup.Library: "ElfRecord", startup.RuntimeDirectory: "RuntimeDirectory"}


def _alternatives(annotation: Any) -> tuple[Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def _model_type(path: tuple[str, ...]) -> Any:
    """The model's annotation at ``path``; None joins it when a step on the way may be absent."""
    cls: Any = Compatibility
    optional = False
    annotation: Any = None
    for step in path:
        annotation = typing.get_type_hints(cls)[step]
        parts = _alternatives(annotation)
        inner = [p for p in parts if dataclasses.is_dataclass(p)]
        if inner:
            optional = optional or type(None) in parts
            cls = inner[0]
    if optional and type(None) not in _alternatives(annotation):
        annotation = annotation | None
    return annotation


def _item(annotation: Any) -> Any | None:
    if typing.get_origin(annotation) is tuple:
        item, _ = typing.get_args(annotation)
        return item
    return None


def _mismatches(mine: Any, model: Any, where: str) -> list[str]:
    item, model_item = _item(mine), _item(model)
    if item in RECORDS:
        if model_item is None or model_item.__name__ != RECORDS[item]:
            return [f"{where}: {mine} vs the model's {model}"]
        hints, model_hints = typing.get_type_hints(item), typing.get_type_hints(model_item)
        out = []
        for f in dataclasses.fields(item):
            if f.name not in model_hints:
                out.append(f"{where}[].{f.name}: not a field of the model's {model_item.__name__}")
            elif hints[f.name] != model_hints[f.name]:
                out.append(f"{where}[].{f.name}: {hints[f.name]} vs the model's {model_hints[f.name]}")
        return out
    return [] if mine == model else [f"{where}: {mine} vs the model's {model}"]


def test_every_field_the_bootstrap_reads_is_the_models() -> None:
    hints = typing.get_type_hints(startup.Manifest)
    assert set(hints) == set(READS) | NOT_FROM_THE_DOCUMENT, "name the model path of a new field in READS"
    problems = []
    for name, path in READS.items():
        model = _model_type(path)
        if name in ABSENT_AS_EMPTY:
            model = typing.Union[tuple(a for a in _alternatives(model) if a is not type(None))]
        problems += _mismatches(hints[name], model, f"{name} ({'.'.join(path)})")
    assert problems == []


def test_the_check_bites() -> None:
    assert _mismatches(str, str | None, "x")
    assert _mismatches(tuple[startup.Library, ...], _model_type(("runtime", "directories")), "x")
    assert _mismatches(tuple[str, ...], _model_type(("requirements",)), "x") == []


def _value(model: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        if model is None:
            return None
        model = getattr(model, step)
    return model


def _documents() -> list[tuple[str, dict[str, Any]]]:
    wheels = sorted(Path(os.environ["FLAGOS_TEST_WHEEL_DIR"]).glob("torch_fl-*.whl")) \
        if os.environ.get("FLAGOS_TEST_WHEEL_DIR") else []
    docs = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            docs.append((wheel.name, json.loads(zf.read("torch_fl/compatibility.json"))))
    return docs


def test_the_bootstrap_reads_what_the_model_reads(tmp_path: Path) -> None:
    docs = _documents()
    if not docs:
        pytest.skip("set FLAGOS_TEST_WHEEL_DIR to the torch_fl wheels to run this")
    # and one that moves every optional part the bootstrap reads: an SDK root, runtime folders and prefixes
    name, doc = docs[0]
    doc = {**doc, "sdk": {"name": "cann", "root": {"env": "ASCEND_TOOLKIT_HOME", "default": "/opt/cann"}},
           "runtime": {"directories": [{"path": "/opt/cann/lib64", "env": "ASCEND_TOOLKIT_HOME",
                                        "libraries": ["libascendcl.so"]}], "prefixes": ["/opt"]}}
    docs.append((f"{name} with an SDK", doc))
    for where, doc in docs:
        model = Compatibility.from_json(doc)
        mine = startup.from_document(str(tmp_path / "compatibility.json"), doc)
        for field, path in READS.items():
            value, expected = getattr(mine, field), _value(model, path)
            if field in ABSENT_AS_EMPTY and expected is None:
                expected = ()
            if field in {"libraries", "runtime_directories"}:
                value = [dataclasses.asdict(v) for v in value]
                expected = [{k: getattr(e, k) for k in d} for e, d in zip(expected, value)] \
                    if len(expected) == len(value) else expected
            assert value == expected, f"{where}: {field}"
