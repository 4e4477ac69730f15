"""Tensors of another device beside flagos tensors: refused where CUDA refuses them, taken where CUDA takes them.

PyTorch's CUDA kernels of operators with the default ``device_check`` refuse a CPU tensor among their positional
and out= tensors (the wrapper torchgen generates); operators marked ``NoCheck`` decide themselves, and
TensorIterator's take CPU scalars.  The host platform runs CPU kernels, which would take anything on the CPU, so
it applies CUDA's rule itself (csrc/aten/device_check/SameDeviceCheck.cpp, table from torch's native_functions.yaml).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

GENERATOR = Path(__file__).resolve().parents[2] / "csrc" / "aten" / "device_check" / "generate_same_device_ops.py"
SAME_DEVICE = "Expected all tensors to be on the same device"


def _x() -> torch.Tensor:
    return torch.randn(3, 3, device="flagos")


# (operation, the argument the check names, or None where TensorIterator refuses it: lerp is NoCheck).  mm,
# bmm, addmm, cat and index_select have unboxed kernels; dot, acosh's out= form, gather and lerp go through
# the boxed fallback.
REFUSED: dict[str, tuple[Callable[[], object], str | None]] = {
    "mm": (lambda: torch.mm(_x(), torch.randn(3, 3)), "mat2"),
    "bmm": (lambda: torch.bmm(_x()[None], torch.randn(1, 3, 3)), "mat2"),
    "addmm cpu bias": (lambda: torch.addmm(torch.randn(3, 3), _x(), _x()), "mat1"),
    "cat": (lambda: torch.cat([_x(), torch.randn(3, 3)]), "tensors"),
    "index_select cpu index": (lambda: torch.index_select(_x(), 0, torch.tensor([0, 2])), "index"),
    "dot": (lambda: torch.dot(_x()[0], torch.randn(3)), "tensor"),
    "out on the cpu": (lambda: torch.acosh(_x(), out=torch.empty(3, 3)), "out"),
    "gather cpu index": (lambda: torch.gather(_x(), 1, torch.zeros(3, 1, dtype=torch.long)), "index"),
    "lerp cpu weight tensor": (lambda: torch.lerp(_x(), _x(), torch.full((3, 3), 0.5)), None),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_cpu_tensor_is_refused_where_cuda_refuses_it(case: str) -> None:
    operation, argument = REFUSED[case]
    with pytest.raises(RuntimeError, match=SAME_DEVICE) as refused:
        operation()
    if argument is not None:
        assert f"got {argument} is on" in str(refused.value)


def test_the_cpu_provider_refuses_as_the_kernel_device_does(run_python) -> None:
    result = run_python(
        """
        import torch
        try:
            torch.mm(torch.randn(2, 2, device="flagos"), torch.randn(2, 2))
            print("taken")
        except RuntimeError as e:
            print(str(e).splitlines()[0])
        """,
        env={"FLAGOS_OP_mm": "cpu"},
    )
    assert SAME_DEVICE in result.stdout and "mat2" in result.stdout


# What CUDA's kernels take: CPU scalars in TensorIterator operators, CPU indices in indexing, copies between devices.
TAKEN: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "add cpu scalar tensor": lambda x: x + torch.tensor(2.0),
    "mul cpu scalar tensor": lambda x: torch.mul(x, torch.tensor(3.0)),
    "where cpu scalar": lambda x: torch.where(x > 0, x, torch.tensor(0.0)),
    "index cpu indices": lambda x: x[torch.tensor([0, 2])],
    "index_put_ cpu indices": lambda x: x.clone().index_put_((torch.tensor([1]),), torch.tensor(5.0)),
    "copy_ from cpu": lambda x: x.clone().copy_(torch.ones(3, 3)),
}


@pytest.mark.parametrize("case", list(TAKEN))
def test_what_cuda_takes_is_taken_and_computes_as_on_the_cpu(case: str) -> None:
    x = torch.randn(3, 3)
    out = TAKEN[case](x.to("flagos"))
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), TAKEN[case](x))


def test_one_device_everywhere_still_computes() -> None:
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(torch.mm(a.to("flagos"), b.to("flagos")).cpu(), torch.mm(a, b))
    torch.testing.assert_close(torch.cat([a.to("flagos"), b.to("flagos")]).cpu(), torch.cat([a, b]))


def test_the_table_is_current_for_this_torch() -> None:
    # The generated table must list what this torch's native_functions.yaml says; a stale one exits 1.
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    table = (GENERATOR.parent / "generated" / "SameDeviceOps.inc").read_text().splitlines()
    assert '"mm",' in table and '"cat",' in table
    assert '"add.Tensor",' not in table  # device_check: NoCheck (TensorIterator)


def test_a_stale_table_is_named_with_the_fix(tmp_path: Path) -> None:
    # The generator run on a copy of itself beside a table missing an operator.
    copy = tmp_path / "generate_same_device_ops.py"
    copy.write_text(GENERATOR.read_text())
    (tmp_path / "generated").mkdir()
    lines = (GENERATOR.parent / "generated" / "SameDeviceOps.inc").read_text().splitlines(keepends=True)
    (tmp_path / "generated" / "SameDeviceOps.inc").write_text("".join(line for line in lines if line != '"mm",\n'))
    result = subprocess.run([sys.executable, str(copy), "--check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "stale" in result.stderr
    assert "generate_same_device_ops.py" in result.stderr
