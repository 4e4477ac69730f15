"""FP8 emulation against FP8 kernels: a torchao Float8Linear training step, loss curves side by side, and the
error of one `_scaled_mm` against a float64 product.

Three sides, each in a process of its own (FLAGOS_FP8 is read at import):
- `kernel device`: the same step on the platform's kernel device without flagos (the CPU's float8 kernels
  on the host platform; on the cuda platform native CUDA, cuBLASLt's FP8 GEMM, in the reference interpreter
  given by `--reference-python`);
- `flagos native`: flagos with FLAGOS_FP8=native, `_scaled_mm` on the kernel device's kernel;
- `flagos emulated`: flagos with FLAGOS_FP8=emulated, torch_fl/fp8's float32 emulation.

The model is an MLP of `--layers` Float8Linear layers of width `--width` (bf16 weights, tensorwise scaling,
torchao's default recipe), trained `--steps` AdamW steps from the same weights and data.  The report gives
each side's loss per step, and per flagos side the largest relative difference of its losses from the
kernel device's; then, for K in 64 and 4096, each side's `_scaled_mm` (e4m3fn operands, float32 out, with
and without use_fast_accum) relative error against float64.

    python benchmarks/device/fp8_emulation.py [--out fp8_emulation.json] [--reference-python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from _report import emit_json

sys.path.append(str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
from reference import child_env  # noqa: E402


def _child(device: str, args: argparse.Namespace) -> dict:
    import torch
    from torchao.float8 import convert_to_float8_training

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers[:-1]).to(torch.bfloat16)
    convert_to_float8_training(model)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    teacher = torch.randn(args.width, args.width, generator=gen) / args.width**0.5  # a target the MLP can learn
    losses = []
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.width, generator=gen)
        target = (x @ teacher).to(device, torch.bfloat16)
        x = x.to(device, torch.bfloat16)
        loss = torch.nn.functional.mse_loss(model(x).float(), target.float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    errors = {}
    for k in (64, 4096):
        a = torch.randn(128, k, generator=gen)
        b = torch.randn(256, k, generator=gen)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        exact = a8.double() @ b8.double().t()
        one = torch.tensor(1.0)
        for fast in (False, True):
            got = torch._scaled_mm(a8.to(device), b8.to(device).t(), one.to(device), one.to(device),
                                   out_dtype=torch.float32, use_fast_accum=fast)
            rel = ((got.cpu().double() - exact).abs().max() / exact.abs().max()).item()
            errors[f"K={k}{' fast_accum' if fast else ''}"] = rel
    return {"losses": losses, "scaled_mm_rel_error": errors, "torch": torch.__version__}


def _run_side(python: str, device: str, fp8: str | None, argv: list[str]) -> dict:
    env = child_env() if fp8 is None else {**os.environ, "FLAGOS_FP8": fp8}
    done = subprocess.run([python, __file__, "--child", device, *argv], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {device} side (FLAGOS_FP8={fp8}) failed:\n{done.stderr[-3000:]}")
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--reference-python", default=sys.executable,
                   help="the interpreter of the kernel-device side (cuda: one whose torch is a CUDA build)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        if args.child.startswith("flagos"):
            import torch_fl  # noqa: F401  (registers flagos where autoloading is off)
        print(json.dumps(_child(args.child, args)))
        return 0

    import torch_fl

    argv = ["--steps", str(args.steps), "--layers", str(args.layers), "--width", str(args.width),
            "--batch", str(args.batch)]
    kernel_device = torch_fl.build_config.KERNEL_DEVICE
    sides = {"kernel device": _run_side(args.reference_python, kernel_device, None, argv),
             "flagos native": _run_side(sys.executable, "flagos", "native", argv),
             "flagos emulated": _run_side(sys.executable, "flagos", "emulated", argv)}
    reference = sides["kernel device"]["losses"]
    for name in ("flagos native", "flagos emulated"):
        losses = sides[name]["losses"]
        sides[name]["max_rel_loss_difference"] = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
    emit_json({"version": 1, "benchmark": "fp8_emulation", "platform": torch_fl.build_config.PLATFORM,
               "kernel_device": kernel_device, "platform_fp8": torch_fl.build_config.FP8,
               "model": {"layers": args.layers, "width": args.width, "batch": args.batch, "steps": args.steps},
               "sides": sides}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
