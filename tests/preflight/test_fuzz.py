"""Property-based fuzzing of the two readers that take untrusted bytes: the ELF reader and the
manifest parser. They must either return or raise their own error type, never anything else.
Bounded (max_examples, deadline) so that CI stays fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_fl_preflight.elf_capture import ElfCapture
from torch_fl_preflight.elf_reader import read_elf
from torch_fl_preflight.elf_source import NotCaptured, SparseSource
from torch_fl_preflight.errors import ElfError, ManifestError
from torch_fl_preflight.schema import parse_manifest

import _preflight_builders as B
from support.elf import compile_c

pytestmark = pytest.mark.fuzz

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _parse(data: bytes) -> None:
    try:
        read_elf(SparseSource("fuzz.so", len(data), [(0, data)]))  # every byte at hand
    except ElfError:
        pass
    cap = ElfCapture("fuzz.so", len(data))
    cap.feed(data)
    src = cap.source()
    if src is not None:
        try:
            read_elf(src)
        except (ElfError, NotCaptured):
            pass


@pytest.fixture(scope="module")
def seed_elf(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    d = tmp_path_factory.mktemp("fuzzseed")
    return compile_c(d / "libseed.so", "extern int dep(void);\nint f(void){return dep();}\n", soname="libseed.so",
                     rpath=["$ORIGIN"]).read_bytes()


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(data: bytes) -> None:
    _parse(b"\x7fELF" + data)


@FUZZ
@given(data=st.data())
def test_mutated_real_library(seed_elf: bytes, data: st.DataObject) -> None:
    b = bytearray(seed_elf)
    for _ in range(data.draw(st.integers(1, 16))):
        # bias mutations to the front, where headers and dynamic tables live
        at = data.draw(st.integers(0, min(len(b) - 1, 8192)))
        b[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del b[data.draw(st.integers(0, len(b))):]
    _parse(bytes(b))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)


@FUZZ
@given(json_values)
def test_manifest_parser_on_any_json(value: object) -> None:
    try:
        parse_manifest(json.dumps(value).encode(), "fuzz.json")
    except ManifestError:
        pass


@FUZZ
@given(st.binary(max_size=256))
def test_manifest_parser_on_any_bytes(data: bytes) -> None:
    try:
        parse_manifest(data, "fuzz.json")
    except ManifestError:
        pass


@FUZZ
@given(data=st.data())
def test_manifest_parser_on_mutated_manifest(data: st.DataObject, tmp_path: Path) -> None:
    files = {"torch_fl/x.py": b""}
    doc = B.manifest_for(files, tags=["cp311-cp311-linux_x86_64"], filename="t.whl", requirements=["torch"])
    key = data.draw(st.sampled_from(sorted(doc)))
    doc[key] = data.draw(json_values)
    try:
        parse_manifest(json.dumps(doc).encode(), "fuzz.json")
    except ManifestError:
        pass


@pytest.mark.compile
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_wheel_never_crashes(host_wheel: Path, tmp_path_factory: pytest.TempPathFactory,
                                     data: st.DataObject) -> None:
    """Whatever bytes a wheel holds, the command ends with 0, 1 or 2, never a traceback."""
    import contextlib
    import io as _io

    from torch_fl_preflight.main import main

    raw = bytearray(host_wheel.read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("fuzzwheel") / host_wheel.name
    path.write_bytes(bytes(raw))
    err = _io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(_io.StringIO()):
        code = main(["--wheel", str(path)])
    assert code in (0, 1, 2)
    assert "Traceback" not in err.getvalue()
