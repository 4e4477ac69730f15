"""The typed model of compatibility.json: it round-trips real manifests, and its fields are the schema's."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
import zipfile
from typing import Any

import pytest

from torch_fl_preflight import compatibility
from torch_fl_preflight.compatibility import Compatibility, read_compatibility
from torch_fl_preflight.errors import ManifestError
from torch_fl_preflight.schema import load_schema

import _preflight_builders as B

# sdk.root.env: the schema lets it be absent or null with one meaning; the model reads both as None and
# writes null (what torch-fl-build has always written), so it is a field without a default although the
# schema does not require the key.
READ_AS_NULL = {("SdkRoot", "env")}

JSON_TYPES: dict[str, type] = {"string": str, "boolean": bool, "integer": int, "null": type(None),
                               "array": tuple, "object": dict}


def _canonical(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True)


def _full() -> dict[str, Any]:
    """A manifest with every optional key the schema has."""
    doc = B.manifest_for({}, tags=["cp311-cp311-linux_x86_64"], filename="torch_fl-2.13.0+metax-cp311-cp311-"
                         "linux_x86_64.whl", requirements=["torch==2.13.0", 'flag-gems==4.2.0; extra == "flaggems"'],
                         platform="metax", kind="forked-libtorch", directory="torch_fl/vendor_torch",
                         version="2.13.0+metax", torch_requirement="torch==2.13.0")
    doc["sdk"] = {"name": "maca", "version": "3.0.0.8", "root": {"env": "MACA_PATH", "default": "/opt/maca"},
                  "version_file": "Version.txt", "version_pattern": r"Version:\s*(\S+)"}
    doc["vendor_torch"] = {"version": "2.13.0+metax3.0.0.8", "source": "torch-2.13.0+metax.whl",
                           "git_version": "0123456789abcdef"}
    doc["companions"] = {"flaggems": "4.2.0", "flagtree": "0.3.0", "flagcx": "0.4.0"}
    doc["runtime"] = {"directories": [{"path": "/opt/maca/lib", "env": "MACA_PATH", "libraries": ["libmcruntime.so"]},
                                      {"path": "/usr/lib/extra", "env": None, "libraries": []}],
                      "prefixes": ["/opt/maca"], "system_libraries": ["libmxdriver.so.1"]}
    doc["elf"] = [{"path": "torch_fl/vendor_torch/libc10.so", "sha256": "0" * 64, "size": 12, "soname": "libc10.so",
                   "needed": ["libc.so.6"], "rpath": [], "runpath": ["$ORIGIN"], "origin": "bundled",
                   "source": "torch-2.13.0+metax.whl"},
                  {"path": "torch_fl/_C.so", "sha256": "1" * 64, "size": 34, "soname": None, "needed": [],
                   "rpath": ["$ORIGIN/vendor_torch"], "runpath": [], "origin": "built"}]
    doc["floors"] = {"glibc": "2.28", "glibcxx": "3.4.30"}
    doc["x-stand-in"] = True
    return doc


def _real_manifests() -> list[tuple[str, bytes]]:
    out = []
    for wheel in B.real_wheels():
        with zipfile.ZipFile(wheel) as zf:
            out.append((wheel.name, zf.read("torch_fl/compatibility.json")))
    return out


def test_real_manifests_round_trip() -> None:
    manifests = _real_manifests()
    if not manifests:
        pytest.skip("set FLAGOS_TEST_WHEEL or FLAGOS_TEST_WHEEL_DIR to the torch_fl wheels to run this")
    for name, data in manifests:
        model = read_compatibility(data, name)
        assert _canonical(model.to_json()) == _canonical(json.loads(data)), name
        assert Compatibility.from_json(model.to_json()) == model


def test_every_optional_key_round_trips() -> None:
    doc = _full()
    model = Compatibility.from_json(doc)
    assert _canonical(model.to_json()) == _canonical(doc)
    assert model.sdk.root is not None and model.sdk.root.env == "MACA_PATH"
    assert model.runtime.directories[1].env is None
    assert model.elf[1].soname is None and model.elf[1].source is None
    assert model.companion_pins() == doc["companions"]
    assert model.extensions == {"x-stand-in": True}


def test_absent_optional_keys_stay_absent() -> None:
    doc = _full()
    for key in ("vendor_torch", "companions", "x-stand-in"):
        del doc[key]
    del doc["torch"]["git_version"], doc["sdk"]["version"], doc["runtime"]["prefixes"], doc["elf"][0]["source"]
    doc["companions"] = {}  # present and empty is not absent
    model = Compatibility.from_json(doc)
    assert model.vendor_torch is None and model.torch.git_version is None and model.runtime.prefixes is None
    assert model.companions == compatibility.Companions() and model.companion_pins() == {}
    assert _canonical(model.to_json()) == _canonical(doc)


def test_sdk_root_env_absent_reads_as_null() -> None:
    doc = _full()
    del doc["sdk"]["root"]["env"]
    model = Compatibility.from_json(doc)
    assert model.sdk.root is not None and model.sdk.root.env is None
    assert model.to_json()["sdk"]["root"] == {"env": None, "default": "/opt/maca"}


def test_from_json_validates_first() -> None:
    doc = _full()
    doc["sdk"]["version"] = "unknown"
    with pytest.raises(ManifestError, match="sdk/version"):
        Compatibility.from_json(doc)
    doc = _full()
    doc["wheel"]["extra"] = 1
    with pytest.raises(ManifestError, match="wheel"):
        Compatibility.from_json(doc)


def test_the_model_is_frozen() -> None:
    model = Compatibility.from_json(_full())
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.platform = "host"  # type: ignore[misc]


# --- the fields are the schema's ----------------------------------------------------------------------

def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    defs = load_schema()["$defs"]
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _schema_types(node: dict[str, Any]) -> set[type]:
    node = _resolve(node)
    if "const" in node:
        return {type(node["const"])}
    if "enum" in node:
        return {type(v) for v in node["enum"]}
    if "oneOf" in node:
        return set().union(*(_schema_types(n) for n in node["oneOf"]))
    kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
    return {JSON_TYPES[k] for k in kinds}


def _alternatives(annotation: Any) -> list[Any]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return list(typing.get_args(annotation))
    return [annotation]


def _python_type(annotation: Any) -> type:
    if dataclasses.is_dataclass(annotation):
        return dict
    origin = typing.get_origin(annotation)
    return origin if isinstance(origin, type) else annotation


def _element(annotation: Any) -> Any:
    """The item type of ``tuple[X, ...]`` (alone or in ``tuple[X, ...] | None``)."""
    (tup,) = [a for a in _alternatives(annotation) if typing.get_origin(a) is tuple]
    item, ellipsis = typing.get_args(tup)
    assert ellipsis is Ellipsis
    return item


def _object_class(annotation: Any) -> type | None:
    found = [a for a in _alternatives(annotation) if dataclasses.is_dataclass(a)]
    return found[0] if found else None


def _check_object(cls: type, node: dict[str, Any], where: str) -> list[str]:
    node = _resolve(node)
    problems: list[str] = []
    props: dict[str, Any] = node["properties"]
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if not (cls is Compatibility and f.name == "extensions")]
    if set(names) != set(props):
        problems.append(f"{where} ({cls.__name__}): fields {sorted(names)} vs schema {sorted(props)}")
        return problems
    required = set(node.get("required", ()))
    for f in dataclasses.fields(cls):
        if f.name not in props:
            continue
        at = f"{where}.{f.name}".lstrip(".")
        optional = f.default is None
        if optional == (f.name in required) and (cls.__name__, f.name) not in READ_AS_NULL:
            problems.append(f"{at}: {'optional' if optional else 'required'} in the model, not in the schema")
        annotation = hints[f.name]
        have = {_python_type(a) for a in _alternatives(annotation)}
        want = _schema_types(props[f.name]) | ({type(None)} if optional else set())
        if have != want:
            problems.append(f"{at}: model {sorted(t.__name__ for t in have)} vs schema "
                            f"{sorted(t.__name__ for t in want)}")
            continue
        sub = _resolve(props[f.name])
        if tuple in have:
            item = _element(annotation)
            if dataclasses.is_dataclass(item):
                problems += _check_object(item, sub["items"], f"{at}[]")
            elif {_python_type(item)} != _schema_types(sub["items"]):
                problems.append(f"{at}[]: model {item} vs schema {sub['items']}")
        elif (inner := _object_class(annotation)) is not None:
            problems += _check_object(inner, sub, at)
    return problems


def test_the_fields_are_the_schemas_properties() -> None:
    schema = load_schema()
    assert _check_object(Compatibility, schema, "") == []
    # the one field that is no property holds the schema's pattern properties
    assert list(schema["patternProperties"]) == [f"^{compatibility.EXTENSION_PREFIX}"]


def test_the_check_bites() -> None:
    # A field the schema lacks, and a type the schema does not allow, are both reported.
    @dataclasses.dataclass(frozen=True)
    class Floors:
        glibc: str | None
        glibcxx: int | None
        musl: str | None = None

    schema = load_schema()["properties"]["floors"]
    assert _check_object(Floors, schema, "floors")
    assert _check_object(compatibility.Floors, schema, "floors") == []


def test_every_class_is_reached_from_the_document() -> None:
    # Every dataclass of the module is reached from Compatibility, so none is left over from an old schema.
    reached: set[type] = set()

    def walk(cls: type) -> None:
        reached.add(cls)
        for annotation in typing.get_type_hints(cls).values():
            for a in _alternatives(annotation):
                inner = _element(a) if typing.get_origin(a) is tuple else a
                if dataclasses.is_dataclass(inner) and inner not in reached:
                    walk(inner)

    walk(Compatibility)
    declared = {getattr(compatibility, n) for n in compatibility.__all__}
    assert {c for c in declared if dataclasses.is_dataclass(c)} == reached
