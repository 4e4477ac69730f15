"""FlagGems' own defects on native CUDA, each in a few lines: plain PyTorch against ``flag_gems.use_gems()``.

No flagos and no torch_fl: CUDA tensors, PyTorch and flag_gems only.  Each defect is a ``make()`` that builds
its inputs and a ``run(*inputs)`` that returns named results (a product, a gradient, an input after the call);
the record's snippet is that code with the harness below, ready for an upstream issue:

    expected = run(*make())
    inputs = make()
    with flag_gems.use_gems():
        got = run(*inputs)

``reproduced`` is whether ``got`` differs from ``expected`` (an error, another shape or dtype, a value beyond
rtol/atol 1e-4, a gradient that is None).  ``attributed`` is the check of the FlagGems function the record
names: the same run under ``flag_gems.use_gems(exclude=[that function])`` matches plain PyTorch.  Each defect
runs in its own interpreter, so that one that corrupts the CUDA context cannot take the others with it.
docs/flaggems-upstream.md is the write-up.

    python benchmarks/device/flaggems_upstream_defects.py --out result.json [--only NAME,NAME]

Exit status: 0 when it ran (whatever it found), 2 with one line when there is no CUDA device or no flag_gems.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A PrivateUse1 backend installed beside torch (torch_fl is one) registers itself at `import torch`, and with
# one registered the autograd engine checks CUDA streams differently (pytorch/pytorch#161129); these
# reproductions are about PyTorch and FlagGems alone.  FLAGOS_NO_STARTUP_HOOK keeps torch_fl's start-up hook
# (a .pth file, run at interpreter start) from preparing torch for it.
CLEAN_ENV = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "FLAGOS_NO_STARTUP_HOOK": "1"}
RTOL = ATOL = 1e-4
CHILD_TIMEOUT_S = 400

HARNESS = """\
expected = run(*make())
inputs = make()
with flag_gems.use_gems():
    got = run(*inputs)
"""
PREAMBLE = "import torch, torch.nn.functional as F, flag_gems\n\n"


@dataclass(frozen=True)
class Defect:
    name: str
    title: str
    op: str
    """The aten operator whose FlagGems function is at fault."""
    source: str
    """Where in FlagGems 5.0.2 (paths inside the flag_gems package)."""
    excluded: tuple[str, ...]
    """The FlagGems function names (``use_gems(exclude=...)``) whose absence should make the run right."""
    code: str
    """``make()`` and ``run(*inputs)``."""
    check: str = "values"
    """``values``: any result differs; ``none``: a result is None where plain PyTorch has one."""

    @property
    def snippet(self) -> str:
        return PREAMBLE + textwrap.dedent(self.code).strip() + "\n\n" + HARNESS


HOPPER_MUL = ("runtime/backend/_nvidia/hopper/ops/mul.py: mul -> mul_all_real_func (registered as aten::mul.Tensor "
              "on compute capability 9.x with Triton >= 3.4, by runtime.replace_customized_ops)")

DEFECTS = (
    Defect("mul_same_rank_broadcast", "mul of two tensors of one rank but different shapes does not broadcast",
           "aten::mul.Tensor", HOPPER_MUL, ("mul",), """
        def make():
            return torch.arange(3.0, device="cuda").reshape(3, 1), torch.ones(3, 9, device="cuda")

        def run(a, b):
            return {"a * b": a * b}
        """),
    Defect("mul_strided_operand", "mul reads a strided operand as if it were contiguous",
           "aten::mul.Tensor", HOPPER_MUL, ("mul",), """
        def make():
            base = torch.arange(40.0, device="cuda").reshape(4, 10)
            return base[:, ::2], torch.ones(4, 5, device="cuda")  # strides (10, 2)

        def run(a, b):
            return {"a * b": a * b}
        """),
    Defect("mul_type_promotion", "mul gives its first operand's dtype instead of the promoted one",
           "aten::mul.Tensor", HOPPER_MUL, ("mul",), """
        def make():
            return torch.arange(4, device="cuda"), torch.full((4,), 0.5, device="cuda")

        def run(a, b):
            return {"a * b": a * b}  # int64 * float32 is float32
        """),
    Defect("logsumexp_backward_shape", "logsumexp's gradient has the reduced shape [3, 1] for an input [3, 9]",
           "aten::mul.Tensor (in PyTorch's logsumexp_backward: grad.unsqueeze(-1) * (self - result).exp())",
           HOPPER_MUL, ("mul",), """
        def make():
            g = torch.Generator().manual_seed(0)
            return torch.randn(3, 9, generator=g).cuda().requires_grad_(), torch.randn(3, generator=g).cuda()

        def run(x, grad):
            torch.logsumexp(x, dim=-1).backward(grad)
            return {"x.grad": x.grad}
        """),
    Defect("prod_backward_shape", "prod's gradient over a dim has the reduced shape [4, 1] for an input [4, 4]",
           "aten::mul.Tensor (in PyTorch's prod_backward: grad.unsqueeze(dim) * (result / input))",
           HOPPER_MUL, ("mul",), """
        def make():
            g = torch.Generator().manual_seed(0)
            x = (torch.rand(4, 4, generator=g) + 0.5).cuda().requires_grad_()
            return x, torch.randn(4, generator=g).cuda()

        def run(x, grad):
            x.prod(dim=1).backward(grad)
            return {"x.grad": x.grad}
        """),
    Defect("batch_norm_case_gradient", "batch norm's gradients differ (the product with the expanded gradient)",
           "aten::mul.Tensor (MulBackward0: the sum's expanded gradient, strides all 0, times the weights)",
           HOPPER_MUL, ("mul",), """
        def make():
            g = torch.Generator().manual_seed(1)
            x, w, b = (torch.randn(*s, generator=g).cuda().requires_grad_() for s in ((4, 3, 5), (3,), (3,)))
            return x, w, b, torch.linspace(0.5, 1.5, 60).reshape(4, 3, 5).cuda()

        def run(x, w, b, weights):
            out = F.batch_norm(x, None, None, w, b, training=True)  # cuDNN here: FlagGems' batch_norm is not used
            (out * weights).sum().backward()
            return {"x.grad": x.grad, "w.grad": w.grad, "b.grad": b.grad}
        """),
    Defect("layer_norm_backward_leading_dims",
           "layer_norm's input gradient is wrong for an input with more than one leading dim",
           "aten::native_layer_norm_backward",
           "ops/layernorm.py: layer_norm_backward (M = input.shape[0], N = input.numel() // M, whatever "
           "normalized_shape says)", ("layer_norm_backward",), """
        def make():
            g = torch.Generator().manual_seed(0)
            x4, g4, x3, g3 = (torch.randn(*s, generator=g).cuda() for s in ((2, 3, 6, 6),) * 2 + ((4, 32, 64),) * 2)
            return x4.requires_grad_(), g4, x3.requires_grad_(), g3

        def run(x4, g4, x3, g3):
            (d4,) = torch.autograd.grad(F.layer_norm(x4, (6, 6)), x4, g4)
            (d3,) = torch.autograd.grad(F.layer_norm(x3, (64,)), x3, g3)
            return {"input [2, 3, 6, 6], normalized_shape (6, 6): grad": d4,
                    "input [4, 32, 64], normalized_shape (64,): grad": d3}
        """),
    Defect("pool_norm_gradient", "pooling after a layer norm: the input gradient differs",
           "aten::native_layer_norm_backward",
           "ops/layernorm.py: layer_norm_backward (M = input.shape[0], N = input.numel() // M, whatever "
           "normalized_shape says)", ("layer_norm_backward",), """
        def make():
            g = torch.Generator().manual_seed(1)
            x = torch.randn(2, 3, 6, 6, generator=g).cuda().requires_grad_()
            return x, torch.linspace(0.5, 1.5, 54).reshape(2, 3, 3, 3).cuda()

        def run(x, weights):
            y = F.max_pool2d(F.layer_norm(x, x.shape[-2:]), 2) + F.avg_pool2d(x, 2)
            y.backward(weights)
            return {"x.grad": x.grad}
        """),
    Defect("batch_norm_without_running_stats_overwrites_input",
           "batch_norm in training without running statistics writes them into the input",
           "aten::native_batch_norm",
           "ops/batch_norm.py: batch_norm (running_mean = input if running_mean is None; the kernel stores "
           "running_mean[f] and running_var[f], then reads the input again)", ("batch_norm",), """
        def make():
            return (torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(0)).cuda(),)

        def run(x):
            out = F.batch_norm(x, None, None, training=True)  # no weight: PyTorch takes native_batch_norm
            return {"output": out, "x after the call": x}
        """),
    Defect("batch_norm_backward_ignores_train",
           "batch_norm's backward applies the training formula in evaluation mode",
           "aten::native_batch_norm_backward",
           "ops/batch_norm.py: batch_norm_backward (the `train` argument is never read; save_mean/save_invstd "
           "are always the statistics)", ("batch_norm_backward",), """
        def make():
            g = torch.Generator().manual_seed(0)
            x, grad = (torch.randn(8, 3, 5, generator=g).cuda() for _ in range(2))
            weight = torch.tensor([0.5, 1.0, 2.0], device="cuda")
            running_mean = torch.tensor([0.5, -1.0, 2.0], device="cuda")
            running_var = torch.tensor([0.25, 4.0, 1.0], device="cuda")
            var, mean = torch.var_mean(x, dim=(0, 2), unbiased=False)
            return grad, x, weight, running_mean, running_var, mean, (var + 1e-5).rsqrt()

        def run(grad, x, weight, running_mean, running_var, save_mean, save_invstd):
            results = torch.ops.aten.native_batch_norm_backward(
                grad, x, weight, running_mean, running_var, save_mean, save_invstd, False, 1e-5,
                [True, True, True])  # train=False: the running statistics count
            return dict(zip(("grad_input", "grad_weight", "grad_bias"), results))
        """),
    Defect("batch_norm_eval_module_backward", "a BatchNorm module's gradients in evaluation mode differ",
           "aten::native_batch_norm_backward (PyTorch's derivative of cudnn_batch_norm outside training)",
           "ops/batch_norm.py: batch_norm_backward (the `train` argument is never read; here save_mean/"
           "save_invstd are cuDNN's evaluation outputs, which hold no statistics)", ("batch_norm_backward",), """
        def make():
            bn = torch.nn.BatchNorm1d(3)
            bn.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
            bn.running_var.copy_(torch.tensor([0.25, 4.0, 1.0]))
            g = torch.Generator().manual_seed(0)
            x, grad = (torch.randn(8, 3, 5, generator=g).cuda() for _ in range(2))
            return bn.cuda().eval(), x.requires_grad_(), grad

        def run(bn, x, grad):
            bn(x).backward(grad)
            return {"x.grad": x.grad, "weight.grad": bn.weight.grad, "bias.grad": bn.bias.grad}
        """),
    Defect("square_cuts_autograd", "square passes no gradient: x.grad stays None",
           "aten::square (CompositeImplicitAutograd)",
           "__init__.py: _FULL_CONFIG ('square', square) -> ops/square.py: square, registered for the CUDA key of "
           "an operator that has no derivative of its own (it decomposes into pow), so autograd records none",
           ("square",), """
        def make():
            g = torch.Generator().manual_seed(0)
            return torch.randn(5, generator=g).cuda().requires_grad_(), torch.randn(5, generator=g).cuda()

        def run(x, grad):
            x.square().backward(grad)
            return {"x.grad": x.grad}
        """, check="none"),
    Defect("transformer_step_loses_gradients",
           "a small transformer's training step: every parameter's .grad stays None",
           "aten::square (CompositeImplicitAutograd), in the loss model(x).square().mean()",
           "__init__.py: _FULL_CONFIG ('square', square) -> ops/square.py: square",
           # layer_norm_backward too: with a weight it writes past dW and dB for these inputs (its own
           # defect), which must not decide whether square is the cause.
           ("square", "layer_norm_backward"), """
        def make():
            torch.manual_seed(0)
            layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=True)
            model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).cuda()
            return model, torch.randn(4, 32, 64, generator=torch.Generator().manual_seed(3)).cuda()

        def run(model, x):
            model(x).float().square().mean().backward()
            return {name + ".grad": p.grad for name, p in model.named_parameters()}
        """, check="none"),
)
BY_NAME = {d.name: d for d in DEFECTS}


class Unusable(Exception):
    """This machine cannot run the reproductions; the message says why and what to do."""


# --- one defect, in its own interpreter ---------------------------------------------------------------------

def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:300]}"


def _run_child(name: str, out: str) -> None:
    import flag_gems
    import torch
    import torch.nn.functional as F

    defect = BY_NAME[name]
    namespace: dict[str, Any] = {"torch": torch, "F": F, "flag_gems": flag_gems}
    exec(compile(textwrap.dedent(defect.code), f"<{name}>", "exec"), namespace)  # noqa: S102 -- the defect's own code
    make, run = namespace["make"], namespace["run"]

    def outcome(exclude: list[str] | None) -> dict[str, Any]:
        """The results, on the CPU (copied after leaving use_gems: FlagGems registers _to_copy too)."""
        try:
            if exclude is None:
                results = run(*make())
            else:
                inputs = make()
                with flag_gems.use_gems(exclude=exclude):
                    results = run(*inputs)
            torch.cuda.synchronize()
            return {"results": {k: None if v is None else v.detach().cpu() for k, v in results.items()}}
        except Exception as e:  # noqa: BLE001 -- an error is an outcome to record
            return {"error": _first_line(e)}

    expected = outcome(None)
    # The exclusion run before the full one: a registration left behind by it cannot then change what the
    # full run is compared with, and a full run that corrupts the CUDA context comes last.
    without = outcome(list(defect.excluded))
    got = outcome([])
    record = {"expected": _describe(expected), "got": _describe(got, expected),
              "reproduced": _differs(expected, got, defect.check),
              "attributed": {"excluded": list(defect.excluded),
                             "matches_plain_pytorch": not _differs(expected, without, defect.check),
                             "got": _describe(without, expected)}}
    if "error" in expected:
        record["reproduced"] = False
        record["attributed"]["matches_plain_pytorch"] = None
        record["note"] = "plain PyTorch failed: the reproduction says nothing"
    Path(out).write_text(json.dumps(record), encoding="utf-8")


def _describe_tensor(t: Any, reference: Any = None) -> str:
    if t is None:
        return "None"
    text = f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"
    if t.numel() <= 12:
        text += f" {[round(v, 4) for v in t.double().flatten().tolist()]}"
    if reference is not None and t.shape == reference.shape and t.dtype == reference.dtype and t.numel():
        diff = (t.double() - reference.double()).abs().max().item()
        text += f", max |got - expected| {diff:.4g}"
    return text


def _describe(outcome: dict[str, Any], expected: dict[str, Any] | None = None) -> dict[str, str]:
    if "error" in outcome:
        return {"error": outcome["error"]}
    reference = (expected or {}).get("results", {})
    described = {k: _describe_tensor(v, reference.get(k)) for k, v in outcome["results"].items()}
    if len(described) > 8:  # a model's gradients: the count that differs, not every name
        none = [k for k, v in outcome["results"].items() if v is None]
        return {"results": f"{len(described)} tensors", "None": f"{len(none)} of {len(described)}"}
    return described


def _differs(expected: dict[str, Any], got: dict[str, Any], check: str) -> bool:
    import torch

    if "error" in expected:
        return False
    if "error" in got:
        return True
    want, have = expected["results"], got["results"]
    if check == "none":
        return any(have.get(k) is None and v is not None for k, v in want.items())
    for k, e in want.items():
        g = have.get(k)
        if (e is None) != (g is None):
            return True
        if e is None:
            continue
        if e.shape != g.shape or e.dtype != g.dtype:
            return True
        if not torch.allclose(g.double(), e.double(), rtol=RTOL, atol=ATOL, equal_nan=True):
            return True
    return False


# --- the parent: environment, one child per defect, the report -----------------------------------------------

class _Recorder:
    """Stands in for the torch.library.Library that flag_gems.enable registers into: nothing is registered."""

    def __init__(self) -> None:
        self.ops: list[str] = []

    def impl(self, op_name: str, *_: Any, **__: Any) -> None:
        self.ops.append(str(op_name))


def _environment() -> dict[str, Any]:
    try:
        import torch
    except ImportError as e:
        raise Unusable(f"torch does not import ({e}); install a CUDA build of torch") from None
    if not torch.cuda.is_available():
        raise Unusable(f"no CUDA device (torch {torch.__version__}, CUDA build: {torch.version.cuda}); run it on a "
                       "machine with an NVIDIA GPU and a CUDA build of torch")
    try:
        import flag_gems
    except Exception as e:  # noqa: BLE001 -- any import failure makes the run pointless
        raise Unusable(f"flag_gems does not import ({_first_line(e)}); pip install flag-gems==5.0.2") from None
    recorder = _Recorder()
    flag_gems.enable(lib=recorder, unused=[])
    # Registered for CUDA over a CompositeImplicitAutograd operator, whose derivative is its decomposition's:
    # each passes no gradient, as square does.
    cut = sorted(op for op in set(recorder.ops) if _decomposes(op))
    package = Path(flag_gems.__file__).resolve().parent
    # On compute capability 9.x the registered mul is the Hopper module's, not flag_gems.ops.mul.
    mul_file = Path(inspect.getsourcefile(flag_gems.mul) or "").resolve()
    capability = torch.cuda.get_device_capability()
    return {
        "gpu": torch.cuda.get_device_name(), "compute_capability": f"{capability[0]}.{capability[1]}",
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": _version("triton"),
        "flag_gems": _version("flag_gems"), "python": platform.python_version(),
        "flag_gems.mul": (mul_file.relative_to(package).as_posix() if mul_file.is_relative_to(package)
                          else flag_gems.mul.__module__),
        "registered_over_a_decomposition": cut,
    }


def _decomposes(op: str) -> bool:
    import torch

    name, _, overload = op.partition(".")
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(  # noqa: SLF001 -- the dispatcher's own answer
            f"aten::{name}.{overload}" if overload else f"aten::{name}", "CompositeImplicitAutograd")
    except RuntimeError:
        return False


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _reproduce(defect: Defect) -> dict[str, Any]:
    record: dict[str, Any] = {"name": defect.name, "title": defect.title, "op": defect.op,
                              "source": f"flag_gems/{defect.source}", "snippet": defect.snippet}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "record.json"
        try:
            done = subprocess.run([sys.executable, __file__, "--child", defect.name, "--child-out", str(out)],
                                  capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                                  env={**os.environ, **CLEAN_ENV}, check=False)
        except subprocess.TimeoutExpired:
            return {**record, "reproduced": False, "note": f"did not finish in {CHILD_TIMEOUT_S} s"}
        if not out.exists():
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            return {**record, "reproduced": False, "note": f"the reproduction process failed: {last[:300]}"}
        return {**record, **json.loads(out.read_text(encoding="utf-8"))}


def _selected(only: str | None) -> list[Defect]:
    if not only:
        return list(DEFECTS)
    chosen = []
    for name in (n.strip() for n in only.split(",") if n.strip()):
        if name not in BY_NAME:
            near = difflib.get_close_matches(name, BY_NAME, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise Unusable(f"--only: no defect {name!r}{hint}; the names: {', '.join(BY_NAME)}")
        chosen.append(BY_NAME[name])
    return chosen


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="also write the JSON report here")
    p.add_argument("--only", help="comma-separated defect names (default: all)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _run_child(args.child, args.child_out)
        return 0
    if any(os.environ.get(k) != v for k, v in CLEAN_ENV.items()):
        # Both must hold before the interpreter starts (the start-up hook runs from a .pth file): start again.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **CLEAN_ENV})
    try:
        defects = _selected(args.only)
        environment = _environment()
    except Unusable as e:
        print(f"flaggems_upstream_defects: {e}", file=sys.stderr)
        return 2
    records = []
    for defect in defects:
        record = _reproduce(defect)
        records.append(record)
        state = "reproduced" if record["reproduced"] else "not reproduced"
        attributed = record.get("attributed", {}).get("matches_plain_pytorch")
        print(f"{defect.name}: {state}" + ("" if attributed is None else f"; attributed: {attributed}"),
              file=sys.stderr, flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import emit_json

    emit_json({"version": 1, "benchmark": "flaggems_upstream_defects", "environment": environment,
               "reproduced": sum(bool(r["reproduced"]) for r in records), "of": len(records),
               "defects": records}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
