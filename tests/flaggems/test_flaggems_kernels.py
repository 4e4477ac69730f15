"""FlagGems functions as flagos kernels: results equal the CPU's, in-place and out= write the flagos tensors,
refusals fall back visibly once, FlagGems calling torch again never recurses, autograd runs through them."""

from __future__ import annotations

import json

USE_FLAGGEMS = {"FLAGOS_USE_FLAGGEMS": "1"}


def test_results_equal_the_cpu_and_flag_gems_sees_kernel_views(run_flagos) -> None:
    result = run_flagos("""
        import json, torch, flag_gems
        torch.manual_seed(0)
        x, y = torch.randn(5, 7), torch.randn(5, 7)
        fx, fy = x.to("flagos"), y.to("flagos")
        checks = {
            "add": torch.equal((fx + 2 * fy).cpu(), x + 2 * y),
            "add_alpha": torch.equal(torch.add(fx, fy, alpha=3).cpu(), torch.add(x, y, alpha=3)),
            "mul": torch.equal((fx * fy).cpu(), x * y),
            "softmax": torch.allclose(torch.softmax(fx, 1).cpu(), torch.softmax(x, 1), atol=1e-6),
            "gelu": torch.allclose(torch.nn.functional.gelu(fx).cpu(), torch.nn.functional.gelu(x), atol=1e-6),
            "cat_list": torch.equal(torch.cat([fx, fy, fx], 1).cpu(), torch.cat([x, y, x], 1)),
        }
        values, indices = fx.max(1)
        checks["max_dim_tuple"] = (values.device.type, indices.device.type) == ("flagos", "flagos") and torch.equal(
            values.cpu(), x.max(1).values) and torch.equal(indices.cpu(), x.max(1).indices)
        ran = sorted({name for name, _ in flag_gems.calls})
        devices = sorted({d for _, types in flag_gems.calls for d in types})
        print(json.dumps({"checks": checks, "ran": ran, "devices": devices}))
        """, USE_FLAGGEMS)
    out = json.loads(result.stdout.splitlines()[-1])
    assert all(out["checks"].values()), out["checks"]
    assert out["ran"] == ["add", "cat", "gelu", "max_dim", "mul", "softmax"]
    assert out["devices"] == ["cpu"]  # kernel views, never flagos tensors


def test_strided_and_expanded_views_reach_flag_gems_by_address_with_their_strides(run_flagos) -> None:
    # The layouts FlagGems' kernels must read right (they take data_ptr() and strides): two slices of one
    # tensor, with offsets and steps of 2, and a vector output's gradient, which autograd expands from the
    # scalar loss (stride 0) before it reaches mul; the weights make every gradient entry distinct.
    result = run_flagos("""
        import torch, flag_gems
        torch.manual_seed(0)
        a = torch.randn(6, 6)
        fa = a.to("flagos")
        print("slices", torch.equal((fa[::2, 1::2] * fa[1::2, ::2]).cpu(), a[::2, 1::2] * a[1::2, ::2]))
        x, w = torch.randn(7), torch.linspace(0.5, 1.5, 7)
        fx = x.to("flagos").requires_grad_()
        ((fx * 3) * w.to("flagos")).sum().backward()
        cx = x.clone().requires_grad_()
        ((cx * 3) * w).sum().backward()
        print("gradient", torch.equal(fx.grad.cpu(), cx.grad))
        print("strides", sorted(set(flag_gems.strides)))
        """, USE_FLAGGEMS)
    lines = result.stdout.splitlines()
    assert "slices True" in lines and "gradient True" in lines, result.stdout
    seen = result.stdout.split("strides ", 1)[1]
    assert "((12, 2), (12, 2))" in seen and "((0,), (1,))" in seen, seen  # the layouts arrived as they are


def test_in_place_and_out_results_are_the_flagos_tensors_written(run_flagos) -> None:
    result = run_flagos("""
        import torch, flag_gems
        x = torch.randn(4, 3)
        fx = x.to("flagos")
        returned = fx.add_(torch.ones(4, 3, device="flagos"), alpha=2)
        print("in_place", returned is fx, torch.equal(fx.cpu(), x + 2))
        out = torch.empty(0, device="flagos")  # the wrong size: the kernel resizes it
        returned = torch.mm(fx, fx.t(), out=out)
        print("out", returned is out, tuple(out.shape), torch.allclose(out.cpu(), (x + 2) @ (x + 2).t()))
        big = torch.full((3, 5), 7.0, device="flagos")
        window = big[:, 1:4]  # a strided out= view of a larger tensor, right size: written in place
        torch.mm(torch.eye(3, device="flagos"), torch.ones(3, 3, device="flagos"), out=window)
        print("window", big.cpu()[:, 0].tolist(), big.cpu()[:, 1:4].sum().item(), big.cpu()[:, 4].tolist())
        print("ran", [name for name, _ in flag_gems.calls])
        """, USE_FLAGGEMS)
    lines = result.stdout.splitlines()
    assert "in_place True True" in lines
    assert "out True (4, 4) True" in lines
    assert "window [7.0, 7.0, 7.0] 9.0 [7.0, 7.0, 7.0]" in lines
    assert "ran ['add_', 'mm_out', 'mm_out']" in lines


def test_a_functional_result_never_aliases_an_input(run_flagos) -> None:
    # The stand-in's alias_copy hands back its input; the flagos result must still be a tensor of its own.
    result = run_flagos("""
        import torch
        fx = torch.zeros(3, device="flagos")
        copy = torch.ops.aten.alias_copy(fx)
        fx.add_(1)
        print("copy", copy.cpu().tolist(), copy.untyped_storage().data_ptr() != fx.untyped_storage().data_ptr())
        """, USE_FLAGGEMS)
    assert "copy [0.0, 0.0, 0.0] True" in result.stdout


def test_a_refusal_falls_back_visibly_once_per_op(run_flagos) -> None:
    result = run_flagos("""
        import warnings, torch, torch_fl, flag_gems
        x = torch.randn(6)
        fx = x.to("flagos")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first, second = torch.sigmoid(fx), torch.sigmoid(fx * 1)
        print("equal", torch.equal(first.cpu(), torch.sigmoid(x)), torch.equal(second.cpu(), torch.sigmoid(x)))
        print("tried", [name for name, _ in flag_gems.calls].count("sigmoid"))
        print("route", torch_fl.route("sigmoid"))
        print("warnings", len(caught), caught[0].category.__name__, caught[0].filename.endswith("<string>"))
        print(caught[0].message)
        """, {**USE_FLAGGEMS, "FLAGOS_LOG_DISPATCH": "1"})
    lines = result.stdout.splitlines()
    assert "equal True True" in lines
    assert "tried 2" in lines  # every call asks FlagGems first: a refusal may depend on the inputs
    assert "route Route(requested='flaggems', effective='flaggems')" in lines
    assert "warnings 1 FlagGemsWarning True" in lines  # once, pointing at the caller
    assert ("flagos: FlagGems refused aten::sigmoid (NotImplementedError: sigmoid: this stand-in has no kernel for "
            "it); it ran on provider 'host' (set FLAGOS_OP_sigmoid=host to route it there)") in lines
    log = [line for line in result.stderr.splitlines() if "aten::sigmoid" in line]
    assert log == [
        "[torch_fl] aten::sigmoid -> flaggems",
        "[torch_fl] aten::sigmoid -> host (flaggems refused: NotImplementedError: sigmoid: this stand-in has no "
        "kernel for it)",
        "[torch_fl] aten::sigmoid -> flaggems",
        "[torch_fl] aten::sigmoid -> host (flaggems refused)",
    ]


def test_invalid_inputs_raise_the_kernel_devices_error_not_a_refusal(run_flagos) -> None:
    result = run_flagos("""
        import warnings, torch
        warnings.simplefilter("error")
        try:
            torch.ones(2, 3, device="flagos") + torch.ones(4, device="flagos")
        except RuntimeError as e:
            print("error", str(e).splitlines()[0])
        try:
            torch.ones(2, device="flagos:0") + torch.ones(2, device="flagos:1")
        except RuntimeError as e:
            print("devices", str(e).splitlines()[0])
        """, USE_FLAGGEMS)
    assert ("error The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1"
            in result.stdout)
    assert "devices Expected all tensors to be on the same device" in result.stdout


def test_flag_gems_calling_torch_again_never_recurses(run_flagos) -> None:
    # The stand-in's add calls torch.add on its (CPU) kernel views: that is the CPU kernel, not flagos again,
    # so one flagos call logs one dispatch.  Its mul then reaches flagos itself (flag_gems.reenter): that
    # nested call takes the kernel device's kernel, never FlagGems again.
    result = run_flagos("""
        import torch, flag_gems
        fx = torch.arange(4.0, device="flagos")
        print("add", (fx + fx).cpu().tolist())
        flag_gems.reenter = fx
        print("mul", (fx * 3.0).cpu().tolist(), [name for name, _ in flag_gems.calls].count("mul"))
        """, {**USE_FLAGGEMS, "FLAGOS_LOG_DISPATCH": "1"})
    assert "add [0.0, 2.0, 4.0, 6.0]" in result.stdout
    assert "mul [0.0, 3.0, 6.0, 9.0] 1" in result.stdout
    log = [line for line in result.stderr.splitlines() if line.startswith("[torch_fl] aten::add") or
           line.startswith("[torch_fl] aten::mul")]
    assert log == ["[torch_fl] aten::add.Tensor -> flaggems", "[torch_fl] aten::mul.Tensor -> flaggems",
                   "[torch_fl] aten::mul.Tensor -> host (re-entered from flaggems)"]


def test_backward_through_flaggems_routed_ops_equals_the_cpu(run_flagos) -> None:
    result = run_flagos("""
        import torch, flag_gems
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
        x, target = torch.randn(5, 8), torch.randint(0, 4, (5,))
        flagos_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
        flagos_model.load_state_dict(model.state_dict())
        flagos_model.to("flagos")
        loss = torch.nn.functional.cross_entropy(torch.softmax(model(x), 1), target)
        loss.backward()
        flagos_loss = torch.nn.functional.cross_entropy(torch.softmax(flagos_model(x.to("flagos")), 1),
                                                        target.to("flagos"))
        flagos_loss.backward()
        same = all(torch.allclose(p.grad, q.grad.cpu(), atol=1e-6) for p, q in
                   zip(model.parameters(), flagos_model.parameters()))
        print("loss", torch.allclose(loss, flagos_loss.cpu(), atol=1e-6), "grads", same)
        print("ran", sorted({name for name, _ in flag_gems.calls}))
        """, USE_FLAGGEMS)
    assert "loss True grads True" in result.stdout
    assert "ran ['gelu', 'gelu_backward', 'softmax']" in result.stdout


def test_on_the_cuda_platform_non_contiguous_operands_stay_on_the_kernel_device(run_flagos) -> None:
    # The kernel as the cuda platform builds it (kernel type "cuda"), here over the host platform's views: an
    # expanded or transposed operand runs on the kernel device's own kernel, a contiguous one on FlagGems.
    result = run_flagos("""
        import torch
        from torch_fl.flaggems.kernels import _Kernel, plan_for
        from torch_fl.flaggems.op_table import FlagGemsEntry
        calls = []
        def mul(a, b):
            calls.append((a.stride(), b.stride()))
            return a * b
        kernel = _Kernel(FlagGemsEntry("mul.Tensor", mul), plan_for("mul.Tensor"), "host", "cuda", True, set())
        w = torch.randn(4, 5)
        fw = w.to("flagos")
        expanded = torch.ones((), device="flagos").expand(4, 5)
        print("expanded", torch.equal(kernel(expanded, fw).cpu(), w), len(calls))
        print("transposed", torch.equal(kernel(fw.t().contiguous().t(), fw).cpu(), w * w), len(calls))
        print("contiguous", torch.equal(kernel(fw, fw).cpu(), w * w), calls)
        """)
    lines = result.stdout.splitlines()
    assert "expanded True 0" in lines and "transposed True 0" in lines, result.stdout
    assert "contiguous True [((5, 1), (5, 1))]" in lines, result.stdout
    assert result.stderr.count("aten::mul.Tensor -> host (non-contiguous operand)") == 2, result.stderr
