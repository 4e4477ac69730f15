"""FlagGems on the GPU, in one run: native cuda, flagos -> cuda, flagos -> flaggems and flagos -> verified routes.

flagos -> cuda is the packaged routing (PyTorch's CUDA kernels on kernel views); flagos -> flaggems routes
every operator the installed flag_gems offers to it, unverified (`default = flaggems`); flagos -> verified
routes is `FLAGOS_USE_FLAGGEMS=1` with a calibrated route table (the shipped one whose evidence matches this
flag_gems, Triton and GPU, or `--routes FILE`): FlagGems only where calibration found it correct and
faster.  The flagos sides are switched in this process by reinstalling the routing table between
measurements.  Native cuda runs in the reference interpreter (`--reference-python`, _gpu_common.py says
why); all sides take turns, repeat by repeat, pinned to the same two cores.  Workloads:

* first call of each workload, synchronised, before any warm-up: for flagos -> flaggems that is Triton's
  compile (and FlagGems' autotuning) of its kernels, in a fresh TRITON_CACHE_DIR unless
  `--keep-triton-cache`; reported apart from the steady state;
* small ops (add, mul, relu, sum on 1024 float32 elements): microseconds per call, which is the host-side
  dispatch cost at that size; also FlagGems' own function called directly on the CUDA tensors beneath
  (``flaggems_direct``), whose difference from flagos -> flaggems is the provider's own cost per call;
* a bf16 matmul 4096 x 4096 x 4096: milliseconds and TFLOP/s;
* softmax (4096 x 4096), layer norm (8 x 512 x 1024) and causal scaled-dot-product attention
  (8 x 16 x 512 x 64), bf16, forward: milliseconds;
* a small transformer training step (4 layers, d_model 512, 8 heads, feed-forward 2048, batch 8 x 256,
  bf16 autocast, AdamW): milliseconds per step.

Without a calibrated table the verified side is left out, and the report says so.

    python benchmarks/device/gpu_flaggems.py [--out gpu_flaggems.json] [--reference-python PY] [--steps 10]
                                             [--routes ROUTES.conf]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from _gpu_common import (NativeChild, device_api, emit, event_timer, median_ms, parser, reference_python,
                         require_flagos, serve, share_cores)

SMALL = ("add", "mul", "relu", "sum")
KERNELS = ("matmul_bf16", "softmax_bf16", "layer_norm_bf16", "attention_bf16")
REPEATS, WARMUP, INNER, KERNEL_INNER = 9, 100, 500, 20
LAYERS, D_MODEL, HEADS, FF, BATCH, SEQ = 4, 512, 8, 2048, 8, 256


def workloads(device: str) -> dict[str, Callable[[], object]]:
    """Every timed call on `device`, its inputs made once."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    a, b = randn(1024), randn(1024)
    m1, m2 = randn(4096, 4096, dtype=torch.bfloat16), randn(4096, 4096, dtype=torch.bfloat16)
    s = randn(4096, 4096, dtype=torch.bfloat16)
    x, w, bias = randn(8, 512, 1024, dtype=torch.bfloat16), randn(1024, dtype=torch.bfloat16), randn(
        1024, dtype=torch.bfloat16)
    q, k, v = (randn(8, 16, 512, 64, dtype=torch.bfloat16) for _ in range(3))
    return {
        "add": lambda: a + b, "mul": lambda: a * b, "relu": lambda: torch.relu(a), "sum": lambda: a.sum(),
        "matmul_bf16": lambda: m1 @ m2,
        "softmax_bf16": lambda: torch.softmax(s, -1),
        "layer_norm_bf16": lambda: F.layer_norm(x, (1024,), w, bias),
        "attention_bf16": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }


# The aten operator of each small op, whose FlagGems function is also called directly: the provider's own cost
# per call is flagos -> flaggems less that direct call on the same tensors' kernel views (CUDA tensors).
DIRECT = {"add": "add.Tensor", "mul": "mul.Tensor", "relu": "relu", "sum": "sum"}


def direct_calls() -> dict[str, Callable[[], object]]:
    """The small ops as calls of FlagGems' own functions on CUDA tensors, without flagos in between."""
    from torch_fl import _C
    from torch_fl.flaggems import provider

    functions = {e.op: e.function for e in provider.table().routable}
    g = torch.Generator().manual_seed(0)
    a, b = (_C._kernel_view(torch.randn(1024, generator=g).to("flagos")) for _ in range(2))
    one, two = (lambda name: lambda: functions[DIRECT[name]](a)), (lambda name: lambda: functions[DIRECT[name]](a, b))
    return {name: (two if name in ("add", "mul") else one)(name) for name in SMALL if DIRECT[name] in functions}


class Bench:
    """The workloads and a training model on `device`; first calls, warm timers and steps on request."""

    def __init__(self, device: str) -> None:
        self.device, self.api = device, device_api(device)
        self.calls = workloads(device)
        self.warm: dict[str, Callable[[], float]] = {}
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True, norm_first=True)
        self.model = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.x = torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(1)).to(device)

    def first(self, name: str) -> float:
        """Milliseconds of one synchronised call (the first one, if called first)."""
        fn = self.calls[name] if name != "step" else self.step_once
        self.api.synchronize()
        start = time.perf_counter()
        fn()
        self.api.synchronize()
        return (time.perf_counter() - start) * 1000

    def time(self, name: str) -> float:
        """Milliseconds per call in the steady state (device events around a batch of calls)."""
        if name not in self.warm:
            for _ in range(WARMUP if name in SMALL else 3):
                self.calls[name]()
            self.warm[name] = event_timer(self.device, self.calls[name], INNER if name in SMALL else KERNEL_INNER)
        return self.warm[name]()

    def step_once(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device, dtype=torch.bfloat16):
            loss = self.model(self.x).float().square().mean()
        loss.backward()
        self.optimizer.step()

    def step(self) -> float:
        return self.first("step")


class Routes:
    """flagos's routing in this process: the packaged table (flagos -> cuda), every op FlagGems offers (flagos ->
    flaggems) and, where there is one, a calibrated table (flagos -> verified routes)."""

    def __init__(self, verified: str | None) -> None:
        from torch_fl import routing

        env = {k: v for k, v in os.environ.items() if k not in ("FLAGOS_USE_FLAGGEMS", "FLAGOS_BACKEND_CONFIG")}
        packaged = str(Path(routing.__file__).parent / "configs" / "backends_cuda.conf")
        self.routing = routing
        self.tables = {"flagos_cuda": routing.load("cuda", environ=env),
                       # A table of the user's keeps the shipped one out: every op FlagGems offers goes to it.
                       "flagos_flaggems": routing.load("cuda", environ={**env, "FLAGOS_USE_FLAGGEMS": "1",
                                                                         "FLAGOS_BACKEND_CONFIG": packaged})}
        chosen = routing.load("cuda", environ={**env, "FLAGOS_USE_FLAGGEMS": "1",
                                               **({"FLAGOS_BACKEND_CONFIG": verified} if verified else {})})
        self.verified_source = chosen.source if chosen.evidence else None
        if self.verified_source:
            self.tables["flagos_routes"] = chosen
        self.current = ""

    def use(self, side: str) -> bool:
        """Installs `side`'s table; whether that changed the routing."""
        if side == self.current:
            return False
        self.routing.install(self.tables[side], log_dispatch=False)
        self.current = side
        return True


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--keep-triton-cache", action="store_true", help="first calls with the existing Triton cache")
    p.add_argument("--routes", help="a calibrated route table for the verified side (default: the shipped one that "
                   "matches this flag_gems, Triton and GPU)")
    args = p.parse_args()
    if args.native_child:
        native_bench = Bench("cuda")
        serve({"first": lambda name: {"ms": native_bench.first(name)},
               "time": lambda name: {"ms": native_bench.time(name)}, "step": lambda: {"ms": native_bench.step()}})
        return 0
    require_flagos()
    if not args.keep_triton_cache:  # before flag_gems (and Triton) are imported: at the first use of its routes
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")
    from torch_fl import flaggems

    cores = share_cores()
    routes = Routes(args.routes)
    if args.routes and routes.verified_source is None:
        print(f"--routes {args.routes}: not a calibrated route table (no evidence beside it) — give a table "
              "`python -m torch_fl.flaggems calibrate` wrote", file=sys.stderr)
        return 2
    sides = [s for s in ("flagos_cuda", "flagos_flaggems", "flagos_routes") if s in routes.tables]
    routes.use("flagos_flaggems")
    status = flaggems.status()
    if not status["available"]:
        print(f"the flaggems provider is unavailable: {status['reason']}", file=sys.stderr)
        return 2
    native = NativeChild(reference_python(args.reference_python), __file__)
    try:
        flagos = Bench("flagos")

        def on(side: str, fn: Callable[[], float], warm: Callable[[], object]) -> Callable[[], float]:
            # Reinstalling a table re-registers up to every FlagGems kernel: the first calls after it pay for
            # that, and so did whichever side came after flagos -> flaggems, so a switch is followed by untimed calls.
            def timed() -> float:
                if routes.use(side):
                    for _ in range(3):
                        warm()
                    flagos.api.synchronize()
                return fn()
            return timed

        first: dict[str, dict[str, float]] = {}
        for name in (*SMALL, *KERNELS, "step"):
            first[name] = {"native": round(native.ask("first", name)["ms"], 3)}
            for side in sides:
                routes.use(side)
                first[name][side] = round(flagos.first(name), 3)
        # FlagGems' own function on the same tensors takes its turn among the sides, repeat by repeat: the
        # provider's cost is a difference of a few microseconds, which the machine's drift between two
        # measurements made one after the other would swamp.
        direct = {}
        for name, call in direct_calls().items():
            for _ in range(WARMUP):
                call()
            direct[name] = event_timer("flagos", call, INNER)
        steady: dict[str, dict[str, float]] = {}
        for name in (*SMALL, *KERNELS):
            timers = {"native": lambda name=name: native.ask("time", name)["ms"],
                      **{side: on(side, lambda name=name: flagos.time(name), flagos.calls[name]) for side in sides}}
            if name in direct:
                timers["flaggems_direct"] = direct[name]
            ms = median_ms(timers, repeats=REPEATS)
            steady[name] = {side: round(t * 1000, 2) if name in SMALL else round(t, 4) for side, t in ms.items()}
        steps = median_ms({"native": lambda: native.ask("step")["ms"],
                           **{side: on(side, flagos.step, flagos.step_once) for side in sides}}, repeats=args.steps)
        native_env = native.ask("environment")
    finally:
        native.close()
    verified: dict[str, object] = {"table": None}
    if "flagos_routes" in routes.tables:
        routes.use("flagos_routes")
        found = flaggems.status()
        verified = {"table": Path(str(routes.verified_source)).name, "routed_ops": len(found["routed"]),
                    "size_rules": len(found["size_rules"]),
                    "step_vs_cuda": round(steps["flagos_cuda"] / steps["flagos_routes"], 3)}
    flops = 2 * 4096**3
    return emit({
        "benchmark": "gpu_flaggems",
        "flag_gems": status["flag_gems"], "routed_ops": len(status["routed"]), "verified_routes": verified, "cores": cores,
        "triton_cache": "existing" if args.keep_triton_cache else "fresh",
        "first_call_ms": first,
        "small_ops_us": {name: {**steady[name], "flaggems_vs_cuda": round(steady[name]["flagos_flaggems"] /
                                                                         steady[name]["flagos_cuda"], 3)}
                         for name in SMALL},
        # What the provider adds to a FlagGems call (views, routing, adoption), per small op.
        "provider_cost_us": {name: round(steady[name]["flagos_flaggems"] - steady[name]["flaggems_direct"], 2)
                             for name in SMALL if "flaggems_direct" in steady[name]},
        "kernels_ms": {name: steady[name] for name in KERNELS},
        "matmul_bf16_tflops": {side: round(flops / (ms / 1000) / 1e12, 1) for side, ms in
                               steady["matmul_bf16"].items()},
        "transformer_step_ms": {side: round(ms, 2) for side, ms in steps.items()},
        "config": {"transformer": {"layers": LAYERS, "d_model": D_MODEL, "heads": HEADS, "ff": FF, "batch": BATCH,
                                   "seq": SEQ, "autocast": "bfloat16", "optimizer": "AdamW", "steps": args.steps},
                   "repeats": REPEATS, "small_inner": INNER, "kernel_inner": KERNEL_INNER},
    }, args.out, native_env)


if __name__ == "__main__":
    sys.exit(main())
