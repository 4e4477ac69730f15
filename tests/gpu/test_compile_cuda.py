"""torch.compile on the cuda platform: inductor's Triton backend on flagos against inductor on native CUDA.

The models of tests/compile (an MLP, a small CNN, a transformer block with SDPA, a
Hugging Face tiny Llama), compiled with inductor on flagos: outputs of two calls
and every gradient equal inductor on native ``cuda`` (the reference interpreter,
reference.py: same weights and inputs, passed in) and eager on flagos.  Also: the
kernels are Triton kernels launched on flagos's stream, a CPU scalar tensor keeps
the kernel on flagos, and CUDA graphs (``mode="reduce-overhead"``) are switched
off with one note.

Inductor's Triton backend needs a CUDA build of torch and Triton in the flagos
process; where torch is stock torch+cpu with the cuda-assets wheel, these tests
skip (the first inductor compile there raises that fix, tested below).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

COMPILE_DIR = Path(__file__).resolve().parents[1] / "compile"
sys.path.insert(0, str(COMPILE_DIR))

import reference  # noqa: E402
from compile_support import (  # noqa: E402
    CASES,
    TORCH_OWN_WARNINGS,
    assert_same,
    example_inputs,
    from_plain,
    initial_state,
    step,
)

pytestmark = [pytest.mark.gpu, pytest.mark.compile, TORCH_OWN_WARNINGS]

# Both sides run the same Triton kernels and the same cuBLAS/cuDNN calls; what differs is only what
# may differ between two inductor compiles of one graph (reduction splits chosen by autotuning).
TOL = {"atol": 1e-4, "rtol": 1e-3}


def _inductor_can_run() -> None:
    if torch.version.cuda is None:
        pytest.skip("inductor's Triton backend needs a CUDA build of torch in this process (this torch is "
                    f"{torch.__version__}); the torch_fl wheel built against the CUDA torch runs these tests")
    if importlib.util.find_spec("triton") is None:
        pytest.skip("inductor's Triton backend needs triton")


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(CASES))
def test_inductor_on_flagos_equals_inductor_on_native_cuda(name: str) -> None:
    _inductor_can_run()
    if name == "llama":
        pytest.importorskip("transformers", reason="the Llama case needs transformers")
    state, inputs = initial_state(name), example_inputs(name)
    native = from_plain(reference.call("compile_support:step_plain", name, "cuda", "inductor", state, inputs,
                                       paths=[COMPILE_DIR]))
    compiled = step(name, "flagos", "inductor", state, inputs)
    assert_same(compiled, native, f"{name}: inductor on flagos vs inductor on cuda", **TOL)
    torch._dynamo.reset()
    assert_same(compiled, step(name, "flagos", None, state, inputs), f"{name}: inductor vs eager on flagos", **TOL)


def test_kernels_are_triton_kernels_launched_on_the_flagos_stream() -> None:
    from torch._inductor.utils import run_and_get_code

    _inductor_can_run()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * 2).sum(dim=1)

    x = torch.randn(64, 128, device="flagos")
    side = torch.flagos.Stream()
    side.wait_stream(torch.flagos.current_stream())
    with torch.flagos.stream(side):
        out, (code, *_) = run_and_get_code(torch.compile(fn), x)
    torch.flagos.current_stream().wait_stream(side)
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), fn(x.cpu()), **TOL)
    assert "@triton.jit" in code and "torch.accelerator.current_stream(index).native_handle" in code
    assert "DeviceProperties(type='cuda'" in code  # Triton compiles and launches through its CUDA driver


def test_a_cpu_scalar_tensor_stays_a_kernel_argument() -> None:
    _inductor_can_run()

    def scaled(s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return (s * x).sin() + s

    s, x = torch.tensor(2.5), torch.randn(8, 4)
    out = torch.compile(scaled, fullgraph=True)(s, x.to("flagos"))
    assert out.device.type == "flagos"
    torch.testing.assert_close(out.cpu(), scaled(s, x), **TOL)


def test_cuda_graphs_are_switched_off_with_a_note(caplog: pytest.LogCaptureFixture) -> None:
    from torch_fl.compile import cuda_graphs

    _inductor_can_run()
    cuda_graphs._note.cache_clear()
    x = torch.randn(32, 16, device="flagos")
    compiled = torch.compile(lambda t: torch.relu(t @ t.T).sum(), mode="reduce-overhead")
    with caplog.at_level("WARNING", logger="torch_fl.compile"):
        for _ in range(3):
            torch.testing.assert_close(compiled(x).cpu(), torch.relu(x.cpu() @ x.cpu().T).sum(), **TOL)
    assert [r.getMessage() for r in caplog.records if "CUDA graphs are off" in r.getMessage()]


def test_without_a_cuda_build_of_torch_inductor_names_the_fix() -> None:
    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build: inductor runs (the tests above)")
    compiled = torch.compile(lambda t: t.sin() + 1)
    with pytest.raises(Exception, match="needs a CUDA build of torch"):
        compiled(torch.randn(4, device="flagos"))
