"""Calls whose FlagGems function has another contract than its aten operator: batch norm on flagos computes
what the CPU computes, with the stand-in's batch_norm doing what FlagGems 5.0.2's does."""

from __future__ import annotations

import json

import pytest

USE_FLAGGEMS = {"FLAGOS_USE_FLAGGEMS": "1"}


def test_batch_norm_without_running_statistics_leaves_the_input_alone(run_flagos) -> None:
    # F.batch_norm(x, None, None, ...) in training: FlagGems 5.0.2 would keep the running statistics in the
    # input itself, so the input and the output's first elements would change.
    result = run_flagos("""
        import json, torch, flag_gems
        import torch.nn.functional as F
        torch.manual_seed(0)
        x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
        fx = x.to("flagos")
        out = F.batch_norm(fx, None, None, w.to("flagos"), b.to("flagos"), training=True)
        expected = F.batch_norm(x, None, None, w, b, training=True)
        print(json.dumps({"output": torch.allclose(out.cpu(), expected, atol=1e-5),
                          "input_kept": torch.equal(fx.cpu(), x),
                          "ran": sorted({name for name, _ in flag_gems.calls})}))
        """, USE_FLAGGEMS)
    out = json.loads(result.stdout.splitlines()[-1])
    assert out == {"output": True, "input_kept": True, "ran": ["batch_norm"]}, out


def test_batch_norm_updates_the_flagos_running_statistics_in_place(run_flagos) -> None:
    result = run_flagos("""
        import json, torch, flag_gems
        torch.manual_seed(0)
        cpu = torch.nn.BatchNorm2d(3)
        flagos = torch.nn.BatchNorm2d(3).to("flagos")
        mean_storage = flagos.running_mean.untyped_storage().data_ptr()
        checks = {}
        for step in range(2):
            x = torch.randn(4, 3, 2, 2)
            checks[f"output{step}"] = torch.allclose(flagos(x.to("flagos")).cpu(), cpu(x), atol=1e-5)
        checks["running_mean"] = torch.allclose(flagos.running_mean.cpu(), cpu.running_mean, atol=1e-6)
        checks["running_var"] = torch.allclose(flagos.running_var.cpu(), cpu.running_var, atol=1e-6)
        checks["same_storage"] = flagos.running_mean.untyped_storage().data_ptr() == mean_storage
        checks["ran"] = [name for name, _ in flag_gems.calls].count("batch_norm")
        print(json.dumps(checks))
        """, USE_FLAGGEMS)
    out = json.loads(result.stdout.splitlines()[-1])
    assert out == {"output0": True, "output1": True, "running_mean": True, "running_var": True,
                   "same_storage": True, "ran": 2}, out


def test_batch_norm_gradients_equal_the_cpu_in_training_and_in_evaluation(run_flagos) -> None:
    # In evaluation FlagGems 5.0.2's backward would use the training formula on save_mean/save_invstd, which its
    # evaluation forward never writes: that call runs on the kernel device, and says so in the dispatch log.
    result = run_flagos("""
        import json, torch, flag_gems
        torch.manual_seed(0)
        checks = {}
        for mode in ("train", "eval"):
            cpu = torch.nn.BatchNorm1d(3)
            cpu.running_mean.uniform_(-1, 1)
            cpu.running_var.uniform_(0.5, 2)
            cpu.weight.data.uniform_(0.5, 2)
            flagos = torch.nn.BatchNorm1d(3)
            flagos.load_state_dict(cpu.state_dict())
            flagos.to("flagos")
            getattr(cpu, mode)(), getattr(flagos, mode)()
            x, g = torch.randn(6, 3, 4), torch.randn(6, 3, 4)
            cx, fx = x.clone().requires_grad_(), x.to("flagos").requires_grad_()
            cpu(cx).backward(g)
            flagos(fx).backward(g.to("flagos"))
            checks[mode] = (torch.allclose(fx.grad.cpu(), cx.grad, atol=1e-5)
                            and torch.allclose(flagos.weight.grad.cpu(), cpu.weight.grad, atol=1e-5)
                            and torch.allclose(flagos.bias.grad.cpu(), cpu.bias.grad, atol=1e-5))
        checks["ran"] = [name for name, _ in flag_gems.calls if name.startswith("batch_norm")]
        print(json.dumps(checks))
        """, {**USE_FLAGGEMS, "FLAGOS_LOG_DISPATCH": "1"})
    out = json.loads(result.stdout.splitlines()[-1])
    assert out == {"train": True, "eval": True,
                   "ran": ["batch_norm", "batch_norm_backward", "batch_norm"]}, out
    assert ("[torch_fl] aten::native_batch_norm_backward -> host (flaggems cannot serve it: in evaluation mode "
            "FlagGems' batch_norm_backward") in result.stderr, result.stderr


def test_saved_statistics_take_the_kernel_devices_dtype() -> None:
    # CUDA's batch norm keeps save_mean/save_invstd in float32 for half and bfloat16 inputs (its accumulate
    # type); FlagGems returns them in the input's dtype.  The CPU's kernel keeps the input's.
    torch = pytest.importorskip("torch")
    from torch_fl.flaggems.adapters import adapter_for

    adapter = adapter_for(torch.ops.aten.native_batch_norm.default)
    assert adapter is not None
    assert adapter.result is not None
    x = torch.randn(4, 3, 5, dtype=torch.bfloat16)
    args = [x, None, None, None, None, True, 0.1, 1e-5]
    given = (x, torch.ones(3, dtype=torch.bfloat16), torch.ones(3, dtype=torch.bfloat16))
    on_cuda = adapter.result("cuda", args, given)
    assert [t.dtype for t in on_cuda] == [torch.bfloat16, torch.float32, torch.float32]
    assert on_cuda[0] is x
    assert all(a is b for a, b in zip(adapter.result("cpu", args, given), given, strict=True))


def test_missing_running_statistics_become_scratch_tensors_apart_from_the_input() -> None:
    torch = pytest.importorskip("torch")
    from torch_fl.flaggems.adapters import adapter_for

    adapter = adapter_for(torch.ops.aten.native_batch_norm.default)
    assert adapter is not None
    x = torch.randn(4, 3, 5)
    args = [x, None, None, None, None, True, 0.1, 1e-5]
    call = adapter.arguments("cpu", args, {})
    assert not isinstance(call, str)
    given, _ = call
    assert args[3:5] == [None, None]  # the kernel's own arguments are left as they were
    for stats in given[3:5]:
        assert stats.shape == (3,)
        assert stats.is_contiguous()
        assert stats.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert isinstance(adapter.arguments("cpu", [x, None, None, None, None, False, 0.1, 1e-5], {}), str)
    kept = torch.zeros(3), torch.ones(3)
    call = adapter.arguments("cpu", [x, None, None, *kept, True, 0.1, 1e-5], {})
    assert not isinstance(call, str)
    assert call[0][3] is kept[0]
    assert call[0][4] is kept[1]
