"""Operator routing: which kernel provider runs each operator on flagos.

The table comes from ``torch_fl/configs/backends_<platform>.conf`` (or the file
named by ``FLAGOS_BACKEND_CONFIG``), then ``FLAGOS_USE_FLAGGEMS=1`` makes
``flaggems`` the default and ``FLAGOS_OP_<op>`` overrides single operators.  It
is validated here and installed into the C++ dispatcher, which resolves it per
operator call; operators routed to ``flaggems`` get their kernels from
``torch_fl.flaggems``.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from torch_fl._env import warn_setting
from torch_fl.flaggems.size_rules import SizeRule, SizeRuleError
from torch_fl.flaggems.size_rules import parse as parse_rule

__all__ = ["RoutingError", "RoutingTable", "Route", "evidence_path", "load", "install", "install_from_env", "installed_table",
           "check_usable", "unusable", "route", "provider_for", "count_boxed_calls"]

_CONFIG_DIR = Path(__file__).with_name("configs")
_OP_PREFIX = "FLAGOS_OP_"
_USE_FLAGGEMS = "FLAGOS_USE_FLAGGEMS"
_BACKEND_CONFIG = "FLAGOS_BACKEND_CONFIG"


class RoutingError(ValueError):
    """A routing file or FLAGOS_OP_* variable that cannot be used."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting
        """The environment variable to fix (None: the packaged routing file, a broken installation)."""

    def fix(self) -> str:
        if self.setting is None:
            return "the packaged routing file is damaged: reinstall torch_fl"
        return f"fix or unset {self.setting}, then start the program again"




class _RouteFields(NamedTuple):
    requested: str
    """The provider the routing table names."""
    effective: str
    """The provider that runs the op (``cpu`` when the requested one is not built here)."""


class Route(_RouteFields):
    """Where an operator goes; ``reason`` says why (kept out of the tuple, its equality and its repr)."""

    reason: str = ""
    """Why: the calibration's finding (correct and faster, wrong, slower, below size), not offered, ..."""

    def __new__(cls, requested: str, effective: str, reason: str = "") -> Route:
        self = super().__new__(cls, requested, effective)
        self.reason = reason
        return self


@dataclass(frozen=True)
class RoutingTable:
    default: str
    """Provider of every operator not listed."""
    per_op: dict[str, str] = field(default_factory=dict)
    """``op`` or ``op.overload`` -> provider."""
    source: str = ""
    """Where the table came from, for messages."""
    rules: dict[str, tuple[SizeRule, ...]] = field(default_factory=dict)
    """``op`` -> the calls it sends to ``flaggems`` (``op = flaggems if ...`` lines); an op routed to flaggems
    without rules sends every call.  The C++ routing sees ``flaggems``; the op's kernel checks the rules."""
    evidence: str | None = None
    """The calibration evidence beside the file (``<name>.evidence.json``), when there is one."""


def _suggest(value: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(value, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_provider(provider: str, where: str, providers: list[str], setting: str | None) -> None:
    if provider not in providers:
        raise RoutingError(
            f"{where}: unknown provider {provider!r}{_suggest(provider, providers)}; use one of {', '.join(providers)}",
            setting,
        )


def _check_op(op: str, where: str, op_names: set[str] | None, setting: str | None) -> None:
    if op_names is None:
        op_names = _all_op_names()
    name = op.removeprefix("aten::")
    if name in op_names or f"aten::{name}" in op_names:
        return
    raise RoutingError(f"{where}: unknown operator {op!r}{_suggest(f'aten::{name}', sorted(op_names))}", setting)


@functools.cache
def _all_op_names() -> set[str]:
    """Every operator the dispatcher knows; listed on first need, not at every import."""
    import torch

    names: set[str] = set()
    for full in torch._C._dispatch_get_all_op_names():
        names.add(full)
        names.add(full.split(".", 1)[0])
    return names


def parse_file(path: Path, providers: list[str], op_names: set[str] | None = None,
               setting: str | None = None) -> RoutingTable:
    """``op_names``: the operators to check entries against (default: the dispatcher's); ``setting``: the
    variable that named the file, for errors (None: the packaged file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RoutingError(f"cannot read routing file {path}: {e.strerror}", setting) from None
    default = "host"
    per_op: dict[str, str] = {}
    rules: dict[str, tuple[SizeRule, ...]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{number}"
        op, sep, provider = (part.strip() for part in line.partition("="))
        provider, has_rule, condition = (part.strip() for part in provider.partition(" if "))
        if not sep or not op or not provider:
            raise RoutingError(f"{where}: expected 'op = provider', got {raw.strip()!r}", setting)
        _check_provider(provider, where, providers, setting)
        if op == "default":
            if has_rule:
                raise RoutingError(f"{where}: 'default' takes no condition, got {raw.strip()!r}", setting)
            default = provider
            continue
        _check_op(op, where, op_names, setting)
        op = op.removeprefix("aten::")
        if not has_rule:  # replaces every earlier line of the op
            per_op[op] = provider
            rules.pop(op, None)
            continue
        if provider != "flaggems":
            raise RoutingError(f"{where}: only provider flaggems takes a condition (the other calls run on the kernel "
                               f"device's provider), got {raw.strip()!r}", setting)
        try:
            rule = parse_rule(condition)
        except SizeRuleError as e:
            raise RoutingError(f"{where}: {e}", setting) from None
        # `if` lines of one op add up (any of them); they replace an earlier line without a condition.
        rules[op] = (*rules.get(op, ()), rule)
        per_op[op] = "flaggems"
    return RoutingTable(default, per_op, str(path), rules, _evidence_of(path))


def evidence_path(path: Path) -> Path:
    """Where the calibration evidence of routing file ``path`` lives: ``routes.conf`` -> ``routes.evidence.json``."""
    return path.with_name(path.name.removesuffix(".conf") + ".evidence.json")


def _evidence_of(path: Path) -> str | None:
    sidecar = evidence_path(path)
    return str(sidecar) if sidecar.is_file() else None


def load(platform: str, environ: dict[str, str] | None = None) -> RoutingTable:
    """Reads the routing table for ``platform`` and applies FLAGOS_OP_* overrides."""
    from torch_fl import _C

    env = os.environ if environ is None else environ
    providers = list(_C._provider_names())
    configured = env.get(_BACKEND_CONFIG)
    use_flaggems = env.get(_USE_FLAGGEMS, "0")
    if use_flaggems not in ("0", "1"):
        raise RoutingError(f"{_USE_FLAGGEMS}: expected 0 or 1, got {use_flaggems!r}; set {_USE_FLAGGEMS}=1 to route "
                           "every operator FlagGems offers to it", _USE_FLAGGEMS)
    path = Path(configured) if configured else _CONFIG_DIR / f"backends_{platform}.conf"
    if use_flaggems == "1" and not configured:
        # No table of the user's: the shipped route table whose evidence matches this flag_gems, Triton and
        # device, if there is one (else one warning, and every op FlagGems offers goes to it, unverified).
        from torch_fl.flaggems import shipped

        path = shipped.select(platform) or path
    table = parse_file(path, providers, setting=_BACKEND_CONFIG if configured else None)
    default = table.default
    if use_flaggems == "1" and table.evidence is None:
        # Every op FlagGems offers goes to it; per-op entries keep their providers, the rest runs as by default.
        # A calibrated table (one with evidence) already says where each op goes: it is used as it is.
        default = "flaggems"
    per_op = dict(table.per_op)
    rules = dict(table.rules)
    for name, provider in sorted(env.items()):
        if not name.startswith(_OP_PREFIX):
            continue
        op = name[len(_OP_PREFIX):].replace("__", ".")
        _check_provider(provider, name, providers, name)
        _check_op(op, name, None, name)
        per_op[op] = provider
        rules.pop(op.removeprefix("aten::"), None)
    return RoutingTable(default, per_op, table.source, rules, table.evidence)


#: The table installed last (``python -m torch_fl`` shows it).
_installed: RoutingTable | None = None


def install(table: RoutingTable, log_dispatch: bool) -> None:
    global _installed
    from torch_fl import _C
    from torch_fl.flaggems import provider

    _C._set_routing(table.default, table.per_op, log_dispatch)
    provider.install("flaggems" in (table.default, *table.per_op.values()), log_dispatch, table.rules)
    _installed = table


def installed_table() -> RoutingTable | None:
    """The routing table in effect; None before one is installed or where the settings are unusable."""
    return _installed


#: Why flagos cannot be used in this process: the routing settings it was started with are unusable.
_unusable: RoutingError | None = None


def install_from_env(platform: str, log_dispatch: bool) -> None:
    """Loads and installs the table at import; a bad setting must not break ``import torch``.

    torch imports torch_fl through its ``torch.backends`` entry point, so an exception here would end
    every program that imports torch, including those that never touch flagos.  A bad setting is
    instead one warning line now, and the error itself on the first flagos use (``check_usable``).
    """
    global _unusable
    from torch_fl import fp8

    try:
        table = load(platform)
        fp8_mode = fp8.mode_from_env()
    except RoutingError as exc:
        _unusable = exc
        warn_setting(f"{exc}; flagos is unusable in this process ({exc.fix()})")
        return
    _unusable = None
    install(table, log_dispatch)
    fp8.install(fp8_mode)


def unusable() -> RoutingError | None:
    """Why the routing settings this process started with cannot be used, or None."""
    return _unusable


def check_usable() -> None:
    """Raises the routing setting's error, in one line with its fix, when flagos cannot be used."""
    if _unusable is not None:
        raise RoutingError(f"flagos cannot be used: {_unusable} — {_unusable.fix()}", _unusable.setting)


def route(op: str) -> Route:
    """The provider ``op`` (``add.Tensor``, ``aten::add.Tensor`` or ``add``) is routed to."""
    from torch_fl import _C

    from torch_fl.flaggems.report import reason_for

    requested, effective = _C._route(op)
    return Route(requested, effective, reason_for(op.removeprefix("aten::"), requested, effective, _installed))


def provider_for(op: str) -> str:
    """The provider that runs ``op`` on flagos in this process."""
    return route(op).effective


@contextlib.contextmanager
def count_boxed_calls() -> Iterator[Counter[str]]:
    """Counts, by operator, the calls inside the block that take the boxed path: the routed fallback, where the
    dispatcher packs an operator's arguments into a stack for it (several microseconds a call on a GPU's host,
    against about one for an unboxed kernel).  The counter it yields is filled when the block ends::

        with torch_fl.routing.count_boxed_calls() as boxed:
            model(x).sum().backward()
        print(boxed.most_common(10))  # {"aten::logaddexp.out": 12, ...}: candidates for an unboxed kernel

    Every thread's calls count (autograd's device threads too); blocks do not nest."""
    from torch_fl import _C

    counts: Counter[str] = Counter()
    _C._boxed_calls(True)
    _C._count_boxed_calls(True)
    try:
        yield counts
    finally:
        _C._count_boxed_calls(False)
        counts.update(_C._boxed_calls(True))
