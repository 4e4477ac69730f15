"""The bootstrap's copy of the bundle-kind policy table is preflight's table, byte for byte, and the
manifest schema's kinds are the table's."""

from __future__ import annotations

import json

from support.paths import REPO

TABLE = REPO / "preflight" / "src" / "torch_fl_preflight" / "kinds.py"
COPY = REPO / "startup" / "torch_fl_bootstrap" / "kinds.py"


def test_the_bootstrap_copy_is_the_table() -> None:
    assert COPY.read_bytes() == TABLE.read_bytes(), f"copy {TABLE.relative_to(REPO)} to {COPY.relative_to(REPO)}"


def test_the_table_is_standard_library_only() -> None:
    imports = [line for line in TABLE.read_text().splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["from __future__ import annotations", "from dataclasses import dataclass"]


def test_the_schema_names_the_tables_kinds() -> None:
    from torch_fl_preflight import kinds
    schema = json.loads((REPO / "manifests" / "compatibility.schema.json").read_text())
    bundle = schema["properties"]["bundle"]
    assert set(bundle["properties"]["kind"]["enum"]) == set(kinds.KINDS)
    # The schema's conditional on the bundle directory follows the table's bundles_libraries.
    conditions = {frozenset(rule["if"]["properties"]["kind"]["enum"]): rule for rule in bundle["allOf"]}
    with_dir = {name for name, p in kinds.KINDS.items() if p.bundles_libraries}
    assert frozenset(with_dir) in conditions and frozenset(set(kinds.KINDS) - with_dir) in conditions
    for name, rules in kinds.KINDS.items():
        assert rules.name == name
        assert rules.library_source in (None, *kinds.LIBRARY_SOURCES)
        assert not (rules.global_preload or rules.replaces_torch_libraries) or rules.loads_before_torch
        assert bool(rules.loaded_canaries) == rules.loads_before_torch
