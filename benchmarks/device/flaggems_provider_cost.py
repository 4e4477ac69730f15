"""The flaggems provider's own cost per call: a routed op on flagos tensors against its function called directly.

The function routed here is the kernel device's own operator (``torch.ops.aten.<op>``), so nothing of FlagGems is
needed and the difference is the provider alone: the dispatcher's way to its kernel, the kernel views, the call
into Python and the adoption of the result.  Sides, each a PrivateUse1 kernel registered the way the provider
registers one (``torch_fl._C._FlagGemsLibrary``):

* ``provider``: the C++ kernel's plain-call path, the one every call of tensors and scalars takes;
* ``python kernel``: the provider's Python kernel for every call (what calls with lists of tensors, size rules,
  adapters or the dispatch log take);
* ``direct``: the function called on the kernel views (CPU tensors on the host platform, CUDA on cuda).

Goal: provider - direct <= 3 us.  Runs on every platform: on cuda
the launches queue up while the host issues them, so the time per call is the host's.

    python benchmarks/device/flaggems_provider_cost.py [--out result.json]
"""

from __future__ import annotations

import platform
from collections.abc import Callable

import torch
from _report import emit_json
from dispatch_overhead import per_call_us, timing_args

import torch_fl  # noqa: F401  (the flagos device)
from torch_fl import _C
from torch_fl.flaggems import provider
from torch_fl.flaggems.kernels import own_op_kernel, plan_for

OPS = {"neg": (1,), "add.Tensor": (2,), "mul.Tensor": (2,)}


def main() -> int:
    args = timing_args(__doc__.splitlines()[0], number=20000, repeats=7)

    def timed(call: Callable[[], object]) -> float:
        median, _ = per_call_us(call, args.number, args.repeats)
        torch.flagos.synchronize()
        return median

    rows = {}
    for op, (arity,) in OPS.items():
        overload = plan_for(op).overload
        flagos = [torch.randn(1024, device="flagos") for _ in range(arity)]
        views = [_C._kernel_view(t) for t in flagos]
        sides: dict[str, float] = {"direct": timed(lambda: overload(*views))}
        for side, plain in (("provider", True), ("python kernel", False)):
            library = own_op_kernel(op, provider.fallback_provider(), provider.kernel_device_type() or "cpu", plain)
            try:
                sides[side] = timed(lambda: overload(*flagos))
            finally:
                library.close()
        rows[op] = {**{k: round(v, 3) for k, v in sides.items()},
                    "provider_cost": round(sides["provider"] - sides["direct"], 3),
                    "python_kernel_cost": round(sides["python kernel"] - sides["direct"], 3)}
    emit_json({
        "version": 1,
        "benchmark": "flaggems_provider_cost",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "platform": torch_fl.build_config.PLATFORM,
        "per_call_us": rows,
        "ratio_of": "median per-call times",
        "goal_us": 3.0,
    }, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
