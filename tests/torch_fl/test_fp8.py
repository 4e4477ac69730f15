"""FP8 on the host platform, whose table says ``fp8 = "emulated"``: flagos's emulated ``_scaled_mm`` held to the
CPU's own float8 kernel, float8 casts held bit for bit to the CPU's, FLAGOS_FP8, and torchao's Float8Linear
training step on flagos against the same step on the CPU."""

from __future__ import annotations

import pytest
import torch

import torch_fl

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def test_the_host_platform_emulates_float8_matmuls() -> None:
    assert torch_fl.build_config.FP8 == "emulated"
    assert torch_fl.fp8.active_mode() == "emulated"
    assert {"_scaled_mm", "_scaled_mm.out"} <= set(torch_fl.get_registered_ops())


def _operands(a_dtype: torch.dtype, b_dtype: torch.dtype, m: int = 24, k: int = 64, n: int = 40):
    gen = torch.Generator().manual_seed(0)
    a = (torch.randn(m, k, generator=gen) * 4).to(a_dtype)
    # The CPU kernel, like cuBLAS, takes the second operand column-major.
    b = (torch.randn(n, k, generator=gen) * 4).to(b_dtype).t()
    return a, b, gen


def _tolerance(out_dtype: torch.dtype) -> dict[str, float]:
    # The emulation scales the float32 product, the CPU kernel scales the operands before its matmul: the two
    # agree to float32 rounding, and then round once to the output dtype, where a tie may go either way (one ulp).
    ulp = {torch.float32: 2**-20, torch.bfloat16: 2**-7, torch.float16: 2**-10}.get(out_dtype, 2**-2)
    return {"rtol": ulp, "atol": 1e-3}


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
@pytest.mark.parametrize(("a_dtype", "b_dtype"), [(torch.float8_e4m3fn, torch.float8_e4m3fn),
                                                  (torch.float8_e4m3fn, torch.float8_e5m2),
                                                  (torch.float8_e5m2, torch.float8_e4m3fn),
                                                  (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz)])
@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
def test_scaled_mm_matches_the_cpus_float8_kernel(a_dtype: torch.dtype, b_dtype: torch.dtype,
                                                  out_dtype: torch.dtype, scaling: str) -> None:
    a, b, gen = _operands(a_dtype, b_dtype)
    if scaling == "tensorwise":
        scale_a, scale_b = torch.tensor(0.25), torch.tensor(1.5)
    else:
        scale_a = torch.rand(a.shape[0], 1, generator=gen) + 0.5
        scale_b = torch.rand(1, b.shape[1], generator=gen) + 0.5
    bias = None if out_dtype in (torch.float8_e4m3fn, torch.float32) else torch.randn(b.shape[1], generator=gen).to(out_dtype)
    try:
        expected = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)
    except RuntimeError as e:
        # On CPUs with FP16 units PyTorch's CPU kernel is oneDNN's, which takes e4m3fn and e5m2 only
        # ("itensor_view_from_dense expects ... fp8"); elsewhere its reference kernel takes every float8 type.
        # Where it refuses, the product in float64 is the reference, rounded once to the output dtype.
        assert "itensor_view_from_dense" in str(e)
        product = (a.double() * scale_a.double()) @ (b.double() * scale_b.double())
        expected = (product if bias is None else product + bias.double()).to(out_dtype)
    got = torch._scaled_mm(*(t.to("flagos") for t in (a, b, scale_a, scale_b)),
                           bias=None if bias is None else bias.to("flagos"), out_dtype=out_dtype)
    assert got.device.type == "flagos" and got.dtype == out_dtype
    torch.testing.assert_close(got.cpu().float(), expected.float(), **_tolerance(out_dtype))


def test_scaled_mm_out_writes_the_given_tensor() -> None:
    a, b, _ = _operands(torch.float8_e4m3fn, torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    out = torch.empty(0, dtype=torch.bfloat16, device="flagos")
    result = torch._scaled_mm(a.to("flagos"), b.to("flagos"), one.to("flagos"), one.to("flagos"),
                              out_dtype=torch.bfloat16, out=out)
    assert result is out and out.shape == (a.shape[0], b.shape[1])
    torch.testing.assert_close(out.cpu(), torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16),
                               **_tolerance(torch.bfloat16))


@pytest.mark.parametrize(("change", "message"), [
    ("b = b[:8]", "mat1 and mat2 shapes cannot be multiplied"),
    ("a = a.to(torch.bfloat16)", "Expected both inputs to be fp8 types"),
    ("scale_a = scale_a.to(torch.bfloat16)", "scale_a must be float32"),
    ("scale_b = torch.ones(3)", "Invalid scaling configuration: scale_b has shape"),
])
def test_scaled_mm_refuses_what_the_cpu_kernel_refuses(change: str, message: str) -> None:
    a, b, _ = _operands(torch.float8_e4m3fn, torch.float8_e4m3fn)
    names = {"a": a.to("flagos"), "b": b.to("flagos"), "scale_a": torch.tensor(1.0, device="flagos"),
             "scale_b": torch.tensor(1.0, device="flagos"), "torch": torch}
    exec(change, {}, names)
    with pytest.raises(RuntimeError, match=message):
        torch._scaled_mm(names["a"], names["b"], names["scale_a"], names["scale_b"], out_dtype=torch.float32)


@pytest.mark.parametrize("dtype", [*FLOAT8, torch.float8_e8m0fnu])
def test_float8_casts_round_as_the_cpus_do(dtype: torch.dtype) -> None:
    # Every float32 a float8 value can round from: both sides of each rounding boundary, overflow, subnormals,
    # infinities and NaN.  Casts are the kernel device's own rounding; flagos must give the same bits.
    gen = torch.Generator().manual_seed(0)
    values = torch.cat([torch.randn(20000, generator=gen) * 10.0 ** torch.randint(-6, 6, (20000,), generator=gen),
                        torch.tensor([0.0, -0.0, 448.0, 449.0, 464.0, 480.0, 57344.0, 61440.0, 1e6, 2.0**-9, 2.0**-10,
                                      float("inf"), float("-inf"), float("nan")])])
    expected = values.to(dtype)
    got = values.to("flagos").to(dtype)
    assert got.dtype == dtype
    assert torch.equal(got.cpu().view(torch.uint8), expected.view(torch.uint8))
    # ...and back to float32, exactly.
    torch.testing.assert_close(got.to(torch.float32).cpu(), expected.to(torch.float32), rtol=0, atol=0,
                               equal_nan=True)


def test_flagos_fp8_native_runs_the_kernel_devices_kernel(run_python) -> None:
    result = run_python(
        """
        import torch, torch_fl
        print(torch_fl.fp8.active_mode(), "_scaled_mm" in torch_fl.get_registered_ops())
        a = torch.randn(16, 32).to(torch.float8_e4m3fn)
        b = torch.randn(16, 32).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0)
        got = torch._scaled_mm(a.to("flagos"), b.to("flagos"), one.to("flagos"), one.to("flagos"), out_dtype=torch.float32)
        print(torch.equal(got.cpu(), torch._scaled_mm(a, b, one, one, out_dtype=torch.float32)))
        """,
        env={"FLAGOS_FP8": "native"},
    )
    assert result.stdout.split() == ["native", "False", "True"]


def test_a_bad_flagos_fp8_warns_at_import_and_stops_flagos_at_first_use(run_python) -> None:
    result = run_python(
        """
        import torch
        print("torch works")
        try:
            torch.ones(2, device="flagos")
        except Exception as e:
            print(type(e).__name__, e)
        """,
        env={"FLAGOS_FP8": "fast"},
    )
    assert "FLAGOS_FP8='fast' is not a float8 mode; use one of native, emulated" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "torch works" in result.stdout
    assert "flagos cannot be used: FLAGOS_FP8='fast'" in result.stdout and "fix or unset FLAGOS_FP8" in result.stdout


def test_torchao_float8_training_matches_the_cpu() -> None:
    float8 = pytest.importorskip("torchao.float8")

    def train(device: str) -> list[float]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32))
        model = model.to(torch.bfloat16)
        float8.convert_to_float8_training(model)
        model.to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(4):
            x = torch.randn(32, 64, generator=gen).to(device, torch.bfloat16)
            target = torch.randn(32, 32, generator=gen).to(device, torch.bfloat16)
            loss = torch.nn.functional.mse_loss(model(x).float(), target.float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    cpu, flagos = train("cpu"), train("flagos")
    # The float8 casts agree bit for bit; the matmuls to float32 rounding, then once more in bfloat16.
    torch.testing.assert_close(flagos, cpu, rtol=2e-2, atol=0)
    assert cpu[-1] < cpu[0]
