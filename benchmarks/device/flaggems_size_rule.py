"""Per-call cost of the flaggems provider's size rules (``op = flaggems if dtype in ... and numel >= N``).

A kernel routed with a condition checks each call's dtype and size (``call_size``: the first tensor
argument's dtype, the largest tensor argument's element count) against ranges compiled once per op.  This
measures that check alone for typical argument lists, and a whole provider kernel call on flagos tensors
with and without a rule (its function is the kernel device's own op, so the difference is the rule's cost).
Goal: <= 0.5 us per call.  Runs on the host platform (no FlagGems needed).

    python benchmarks/device/flaggems_size_rule.py [--out result.json]
"""

from __future__ import annotations

import platform

import torch
from _report import emit_json
from dispatch_overhead import per_call_us, timing_args

import torch_fl  # noqa: F401  (the flagos device)
from torch_fl.flaggems import provider
from torch_fl.flaggems.kernels import _Kernel, plan_for
from torch_fl.flaggems.op_table import FlagGemsEntry
from torch_fl.flaggems.size_rules import parse


def main() -> int:
    args = timing_args(__doc__.splitlines()[0], number=20000, repeats=7)
    kernel_type = provider.kernel_device_type() or "cpu"
    rules = (parse("dtype in float32,bfloat16 and numel >= 512"), parse("dtype in float16 and numel >= 4096"))
    a, b = torch.randn(1024, device="flagos"), torch.randn(1024, device="flagos")
    out = torch.empty(1024, device="flagos")

    def kernel(op: str, with_rules: bool) -> _Kernel:
        plan = plan_for(op)
        return _Kernel(FlagGemsEntry(op, plan.overload), plan, provider.fallback_provider(), kernel_type, False, set(),
                       rules if with_rules else None)

    checked = kernel("add.Tensor", True)
    calls = {
        "unary (self)": ((a,), {}),
        "binary (self, other, alpha=)": ((a, b), {"alpha": 1}),
        "list of 4 (cat)": (([a, b, a, b], 0), {}),
        "out= keyword": ((a, b), {"out": out}),
    }
    check = {name: per_call_us(lambda c=call: checked._in_rules(*c), args.number, args.repeats)
             for name, call in calls.items()}
    plain, ruled = kernel("add.Tensor", False), kernel("add.Tensor", True)
    whole = {"without rule": per_call_us(lambda: plain(a, b), args.number // 10, args.repeats),
             "with rule": per_call_us(lambda: ruled(a, b), args.number // 10, args.repeats)}
    report = {
        "version": 1,
        "benchmark": "flaggems_size_rule",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "platform": torch_fl.build_config.PLATFORM,
        "rule_check_us": {k: {"median": round(m, 3), "best": round(b_, 3)} for k, (m, b_) in check.items()},
        "kernel_call_us": {k: {"median": round(m, 3), "best": round(b_, 3)} for k, (m, b_) in whole.items()},
        "rule_cost_in_kernel_us": round(whole["with rule"][1] - whole["without rule"][1], 3),
        "ratio_of": "best per-call times",
        "goal_us": 0.5,
    }
    emit_json(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
