"""No code compares bundle-kind or platform names outside the tables that define them.

Bundle-kind rules live in one policy table (``torch_fl_preflight/kinds.py``, copied byte for byte to
``torch_fl_bootstrap/kinds.py``); platform facts live in the recipes (``bundlers/*.toml``), loaded by
``torch_fl_packaging/recipe.py`` and handed to CMake and torch_fl's build config.  Everything else asks
those tables (``policy(kind).pins_torch``, ``_build_config.DISTRIBUTED``), so a new kind or platform is a
table entry, never a hunt for ``== "cuda-assets"``.

The scan reads the sources' syntax trees (comments, docstrings and messages that mention a name are
fine) of the three distributions, the bootstrap and torch_fl, and reports:
- any string literal that is a bundle kind's name (the kinds' names are unique words);
- a comparison (``==``, ``!=``, ``in``, ``match``) or a dict key with a platform's name.  ``"cuda"`` and
  ``"cpu"`` are also torch device types: a comparison of a device type (``tensor.device.type == "cuda"``)
  is not about platforms, so those two count only where the compared expression names a platform or
  runtime.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO

SCANNED = ("packaging/src", "preflight/src", "publish/src", "startup", "torch_fl")
#: The tables themselves (and the files generated from them).
TABLES = {
    "preflight/src/torch_fl_preflight/kinds.py",  # the bundle-kind policy table
    "startup/torch_fl_bootstrap/kinds.py",  # its byte-for-byte copy (tests/bootstrap/test_kinds_copy.py)
    "packaging/src/torch_fl_packaging/recipe.py",  # the platform table's model and loader
}
KIND_NAMES = frozenset({"in-wheel-runtime", "cuda-assets", "forked-libtorch", "native-sdk"})
PLATFORM_NAMES = frozenset(p.stem for p in (REPO / "bundlers").glob("*.toml"))
#: Platform names that are also torch device types.
DEVICE_TYPES = frozenset({"cuda", "cpu"})


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    if isinstance(node, ast.Call) and node.args:  # frozenset({...}), tuple([...])
        return _strings(node.args[0])
    return []


def _names_platforms(source: str) -> bool:
    lowered = source.lower()
    return "platform" in lowered or "runtime" in lowered


def _platform_hits(names: list[str], other: str) -> list[str]:
    return [n for n in names if n in PLATFORM_NAMES and (n not in DEVICE_TYPES or _names_platforms(other))]


def violations(path: Path, rel: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and node.value in KIND_NAMES and id(node) not in docstrings:
            found.append(f"{where}: bundle kind {node.value!r}")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, operand in enumerate(operands):
                others = " ".join(ast.get_source_segment(text, o) or "" for j, o in enumerate(operands) if j != i)
                found += [f"{where}: compares platform {n!r}" for n in _platform_hits(_strings(operand), others)]
        elif isinstance(node, ast.Match):
            subject = ast.get_source_segment(text, node.subject) or ""
            for case in node.cases:
                for sub in ast.walk(case.pattern):
                    if isinstance(sub, ast.MatchValue):
                        found += [f"{where}: matches platform {n!r}" for n in _platform_hits(_strings(sub.value), subject)]
        elif isinstance(node, ast.Dict):
            keys = [k for key in node.keys if key is not None for k in _strings(key)]
            platform_keys = [k for k in keys if k in PLATFORM_NAMES]
            # A dict keyed by "cuda" alone may be a device type's or a version field's; two platform keys
            # (or one that is no device type) make it a per-platform table.
            if len(platform_keys) > 1 or any(k not in DEVICE_TYPES for k in platform_keys):
                found += [f"{where}: a dict keyed by platform {k!r}" for k in platform_keys]
    return found


def scan() -> list[str]:
    found: list[str] = []
    for part in SCANNED:
        for path in sorted((REPO / part).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in TABLES or "/build/" in rel or path.name == "_build_config.py":
                continue
            found += violations(path, rel)
    return found


def test_no_kind_or_platform_name_is_compared_outside_the_tables() -> None:
    found = scan()
    assert found == [], "compare through the tables (kinds.policy(), the recipe, _build_config):\n" + "\n".join(found)


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    # The scan is only as good as its patterns: each one, written as the code it forbids, is found.
    sample = tmp_path / "sample.py"
    sample.write_text(
        'if manifest.kind == "cuda-assets":\n    pass\n'
        'RULE = ("forked-libtorch", "native-sdk")\n'
        'if _C._platform() == "cuda":\n    pass\n'
        'if platform in ("host", "metax"):\n    pass\n'
        'ENGINES = {"host": "gloo", "cuda": "nccl"}\n'
        'if tensor.device.type == "cuda":\n    pass\n'  # a device type: not a platform comparison
        'STAT = {"cuda": version.cuda}\n'  # one device-type key: not a platform table
    )
    found = violations(sample, "sample.py")
    assert len(found) == 8, found
    assert not any(f.startswith(("sample.py:9:", "sample.py:11:")) for f in found), found
