"""``python -m torch_fl``: what torch_fl is here, and whether it is healthy (``torch.utils.collect_env``'s role).

It reports the platform, the versions (torch_fl, torch, Python), the bundle kind, the bootstrap's cache
directory, the devices, the routing in effect (file, overrides, providers, or why it is unusable) and,
where ``torch-fl-preflight`` is importable, a preflight of the installed wheel (``--installed``, in
process: preflight never imports torch).  ``--json`` prints the same as one JSON document.

Exit status: 0 healthy; 1 a check failed (an unusable setting, a failed preflight check); 2 usage.
Python imports the ``torch_fl`` package before this module runs, so a plugin that cannot load at all
ends in its own ImportError, which names the fix; ``torch-fl-preflight --installed`` explains it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform as _platform_module
import sys
from collections.abc import Callable
from typing import Any

import torch

import torch_fl
from torch_fl import _C, _env, routing
from torch_fl.installation import installation

#: Version of the --json document (its "version" key).
DOCTOR_VERSION = 1
EXIT_OK, EXIT_CHECK_FAILED = 0, 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m torch_fl",
        description="Describe this torch_fl installation (platform, versions, bundle kind, cache directory, "
        "devices, routing) and check it: its settings, and a preflight of the installed wheel where "
        "torch-fl-preflight is installed. Exit 0 healthy, 1 a check failed.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--no-preflight", action="store_true", help="skip the preflight of the installed wheel")
    return p


def _cache_dir() -> dict[str, Any]:
    """The bootstrap's private cache (the forked-libtorch kind keeps its view of torch there)."""
    from torch_fl_bootstrap import BootstrapError, cache

    try:
        return {"path": cache.cache_root(), "error": None}
    except BootstrapError as exc:
        return {"path": None, "error": str(exc)}


def _routing() -> dict[str, Any]:
    unusable = routing.unusable()
    overrides = {name: value for name, value in sorted(os.environ.items())
                 if name.startswith(("FLAGOS_OP_", "FLAGOS_BACKEND_CONFIG", "FLAGOS_USE_FLAGGEMS"))}
    out: dict[str, Any] = {"usable": unusable is None, "error": None if unusable is None else str(unusable),
                           "settings": overrides, "providers": list(_C._provider_names()),
                           "available_providers": list(_C._available_providers())}
    table = routing.installed_table()
    if table is not None:
        out.update({"source": table.source, "default": table.default, "per_op": dict(sorted(table.per_op.items())),
                    "flaggems": torch_fl.is_flaggems_enabled()})
    return out


def _devices() -> dict[str, Any]:
    problem = _C._configuration_error()
    devices = []
    for i in range(torch.flagos.device_count()):
        free, total = torch.flagos.mem_get_info(i)
        devices.append({"index": i, "name": torch.flagos.get_device_name(i), "total_memory": total,
                        "free_memory": free})
    return {"count": len(devices), "runtime_error": problem or None, "devices": devices}


def _preflight(has_manifest: bool) -> dict[str, Any]:
    if not has_manifest:
        return {"ran": False, "reason": "a development install (no compatibility.json): preflight checks the wheels "
                "torch-fl-build makes"}
    try:
        from torch_fl_preflight import __version__ as preflight_version
        from torch_fl_preflight.checker import Options, check_installed
        from torch_fl_preflight.errors import PreflightError
        from torch_fl_preflight.host_env import HostProbe
        from torch_fl_preflight.report import Status, counts
    except ImportError:
        return {"ran": False, "reason": "torch-fl-preflight is not installed here (pip install torch-fl-preflight, "
                "or run it from its own environment with --installed --python " + sys.executable + ")"}
    probe = HostProbe(None)
    try:
        report = check_installed(probe.result, Options())
    except PreflightError as exc:
        return {"ran": True, "version": preflight_version, "ok": False, "error": exc.one_line()}
    failed = [f"{f.id}: {f.message}" + (f" — {f.fix}" if f.fix else "")
              for f in report.findings if f.status is Status.FAIL]
    return {"ran": True, "version": preflight_version, "ok": not report.failed, "counts": counts([report]),
            "failed": failed}


def collect(*, preflight: bool = True) -> dict[str, Any]:
    inst = installation()
    return {
        "version": DOCTOR_VERSION,
        "platform": _C._platform(),
        "bundle_kind": inst.bundle_kind,
        "versions": {"torch_fl": inst.version, "torch": torch.__version__, "python": _platform_module.python_version(),
                     "build_torch": torch_fl.build_config.TORCH_VERSION},
        "location": inst.location,
        "manifest": None if inst.manifest is None else "compatibility.json",
        "manifest_error": inst.manifest_error,
        "cache_dir": _cache_dir(),
        "devices": _devices(),
        "routing": _routing(),
        "unknown_variables": _env.unknown_variables(),
        "preflight": _preflight(inst.manifest is not None) if preflight else {"ran": False, "reason": "--no-preflight"},
    }


def healthy(doc: dict[str, Any]) -> bool:
    pre = doc["preflight"]
    return (doc["routing"]["usable"] and doc["devices"]["runtime_error"] is None and doc["manifest_error"] is None
            and doc["cache_dir"]["error"] is None and (not pre["ran"] or pre["ok"]))


def to_text(doc: dict[str, Any]) -> str:
    v, r, d, pre = doc["versions"], doc["routing"], doc["devices"], doc["preflight"]
    rows: list[tuple[str, str]] = [
        ("platform", doc["platform"] + (f" ({doc['bundle_kind']})" if doc["bundle_kind"] else
                                        " (development install: no compatibility.json)")),
        ("torch_fl", f"{v['torch_fl'] or 'not installed by pip'} at {doc['location']}"),
        ("torch", f"{v['torch']} (built against {v['build_torch']})"),
        ("python", v["python"]),
        ("cache dir", doc["cache_dir"]["path"] or f"UNUSABLE: {doc['cache_dir']['error']}"),
        ("devices", f"{d['count']}" + (f"; UNUSABLE: {d['runtime_error']}" if d["runtime_error"] else "")),
    ]
    rows += [("", f"{dev['index']}: {dev['name']}, {dev['total_memory'] / 2**30:.1f} GiB") for dev in d["devices"]]
    if "default" in r:
        per_op = ", ".join(f"{op}={p}" for op, p in r["per_op"].items()) or "none"
        rows += [("routing", f"default {r['default']} ({r['source']})"), ("", f"per operator: {per_op}")]
    else:
        rows.append(("routing", f"UNUSABLE: {r['error']}"))
    rows.append(("", "providers available: " + ", ".join(r["available_providers"])))
    if r["settings"]:
        rows.append(("", "settings: " + " ".join(f"{k}={val}" for k, val in r["settings"].items())))
    if doc["unknown_variables"]:
        rows.append(("unknown", ", ".join(doc["unknown_variables"])))
    if not pre["ran"]:
        rows.append(("preflight", f"not run: {pre['reason']}"))
    elif "error" in pre:
        rows.append(("preflight", f"FAILED: {pre['error']}"))
    else:
        c = pre["counts"]
        verdict = "ok" if pre["ok"] else "FAILED"
        rows.append(("preflight", f"{verdict}: {c['pass']} passed, {c['fail']} failed, {c['warn']} warned "
                                  f"(torch-fl-preflight {pre['version']} --installed)"))
        rows += [("", f"FAIL {line}") for line in pre["failed"]]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {val}" for k, val in rows]
    lines.append("OK" if healthy(doc) else "FAILED: see the lines marked UNUSABLE or FAIL")
    return "\n".join(lines)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    args = parser().parse_args(argv)
    doc = collect(preflight=not args.no_preflight)
    doc["ok"] = healthy(doc)
    out(json.dumps(doc, indent=2) if args.json else to_text(doc))
    return EXIT_OK if doc["ok"] else EXIT_CHECK_FAILED


if __name__ == "__main__":
    sys.exit(main())
