"""Why an operator goes where it goes: the calibration's finding, the table's entry, or FlagGems' table.

``torch_fl.route(op).reason`` and ``python -m torch_fl.flaggems`` (its ``reasons``) say it in words:
``calibrated: correct and faster``, ``wrong``, ``slower``, ``below size``, ``not offered by flag_gems``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_fl.flaggems import evidence

if TYPE_CHECKING:
    from torch_fl.routing import RoutingTable

__all__ = ["reason_for"]


def _flaggems_reason(op: str) -> str:
    """Why FlagGems does not run ``op`` although the routing asks for it."""
    from torch_fl.flaggems import provider
    from torch_fl.flaggems.op_table import FlagGemsUnavailable

    try:
        offered = provider.table()
    except FlagGemsUnavailable as e:
        return f"provider flaggems is unavailable: {e}"
    if op in offered.skipped:
        return f"flag_gems {offered.version} offers it, flagos does not route it: {offered.skipped[op]}"
    return f"not offered by flag_gems {offered.version}"


def reason_for(op: str, requested: str, effective: str, table: RoutingTable | None) -> str:
    """Why ``op`` (``add.Tensor``) runs on ``effective`` under ``table`` (the installed routing)."""
    if table is None:
        return ""
    found = None
    if table.evidence is not None:
        document = evidence.load(table.evidence)
        ops = document.get("ops", {}) if document else {}
        found = ops.get(op) or ops.get(op.partition(".")[0])
    if effective == "flaggems":
        from torch_fl.flaggems import provider

        rules = provider.rules_for(op, table.rules)
        reason = f"calibrated: {found['reason']}" if found else f"routed to flaggems by {table.source}, not calibrated"
        if rules:
            reason += (f"; flaggems runs calls with {' or '.join(str(r) for r in rules)}, the others (below size) run "
                       f"on {provider.fallback_provider()}")
        return reason
    named = op in table.per_op or op.partition(".")[0] in table.per_op
    if requested == "flaggems" or (table.default == "flaggems" and not named):
        return _flaggems_reason(op)
    if found:
        return f"calibrated: {found['reason']}"
    from torch_fl.flaggems import provider

    offered = provider._table  # read only where flag_gems was loaded already
    if offered is not None and op in offered.skipped:
        return f"flag_gems {offered.version} offers it, flagos does not route it: {offered.skipped[op]}"
    where = f"named in {table.source}" if named else f"the default of {table.source}"
    return f"{where}; not calibrated" if offered is not None and op in offered.ops else where
