"""Operator routing: the packaged table, overrides, the dispatch log, fallbacks and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import routing


def test_packaged_table_routes_everything_to_host() -> None:
    assert torch_fl.provider_for("add.Tensor") == "host"
    assert torch_fl.route("aten::mm") == routing.Route("host", "host")
    assert "empty.memory_format" in torch_fl.get_registered_ops()
    assert "_copy_from" in torch_fl.get_registered_ops()
    assert not torch_fl.is_flaggems_enabled()


def test_op_override_and_dispatch_log(run_python) -> None:
    result = run_python(
        """
        import torch, torch_fl
        a = torch.arange(6.0, device="flagos")
        print("result", (a + a).sum().item(), torch_fl.provider_for("add.Tensor"), torch_fl.provider_for("mul.Tensor"))
        """,
        env={"FLAGOS_OP_add__Tensor": "cpu", "FLAGOS_LOG_DISPATCH": "1"},
    )
    assert "result 30.0 cpu host" in result.stdout
    # Operators with an unboxed kernel (UnboxedKernels.cpp) are routed under their own name.
    assert "[torch_fl] aten::add.Tensor -> cpu" in result.stderr
    assert "[torch_fl] aten::sum -> host" in result.stderr
    # Others reach the backend as what PyTorch's generic kernel calls: arange as its out= variant.
    assert "[torch_fl] aten::arange.start_out -> host" in result.stderr


def test_composites_cross_the_device_layer_once(run_python) -> None:
    # Every backend runs select_backward as zeros, select and copy_, masked_fill as clone and masked_fill_:
    # on flagos each part would be routed on its own.  The dispatch log names what reaches the layer.
    result = run_python(
        """
        import sys, torch
        g = torch.randn(16, 64, device="flagos")
        column = g[:, 0].contiguous()
        mask = g > 0
        calls = {
            "select_backward": lambda: torch.ops.aten.select_backward(g, [3, 16, 64], 0, 1),
            "slice_backward": lambda: torch.ops.aten.slice_backward(g, [32, 64], 0, 4, 20, 1),
            "diagonal_backward": lambda: torch.ops.aten.diagonal_backward(column, [16, 16], 0, 0, 1),
            "masked_fill.Scalar": lambda: g.masked_fill(mask, 0.5),
            "masked_fill.Tensor": lambda: g.masked_fill(mask, torch.tensor(0.5)),
        }
        for name, call in calls.items():
            print("calling", name, file=sys.stderr, flush=True)
            out = call()
            print("device", out.device.type, file=sys.stderr, flush=True)
        """,
        env={"FLAGOS_LOG_DISPATCH": "1"},
    )
    routed: dict[str, list[str]] = {}
    for line in result.stderr.splitlines():
        if line.startswith("calling "):
            current = routed.setdefault(line.split()[1], [])
        elif line.startswith("[torch_fl] aten::") and routed:
            current.append(line.split()[1].removeprefix("aten::"))
        elif line.startswith("device "):
            assert line == "device flagos"
    assert routed == {name: [name] for name in routed} and len(routed) == 5, result.stderr


def test_boxed_calls_are_counted_by_operator_on_every_thread() -> None:
    a, b = torch.randn(8, device="flagos"), torch.randn(8, device="flagos")
    x = torch.randn(8, device="flagos", requires_grad=True)
    # A gradient hook runs on autograd's thread for the device.
    x.register_hook(lambda grad: torch.logaddexp(grad, grad))
    with routing.count_boxed_calls() as boxed:
        torch.cos(a)  # an unboxed kernel
        torch.logaddexp(a, b)  # no unboxed kernel: the routed fallback (its out= form, by PyTorch's generic kernel)
        (x * 2).sum().backward()
    assert boxed == {"aten::logaddexp.out": 2}
    torch.logaddexp(a, b)  # counting ended with the block
    with routing.count_boxed_calls() as later:
        pass
    assert later == {}


def test_a_training_step_takes_the_boxed_path_only_where_the_host_platform_must() -> None:
    # benchmarks/device/gpu_transformer.py's step, small: autocast, a pre-norm encoder with dropout, AdamW.  On a
    # GPU's host a boxed call costs several microseconds more than an unboxed one.  The host platform boxes
    # seeded kernels (it lends the flagos generator's state to the CPU's for the call), which the cuda platform
    # runs unboxed.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True, norm_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to("flagos")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2, 16, 64, device="flagos")
    with routing.count_boxed_calls() as boxed:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("flagos", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        optimizer.step()
        loss.item()
    assert set(boxed) <= {"aten::native_dropout"}, boxed


@pytest.mark.parametrize("override", [None, "cpu"])
def test_direct_kernels_follow_the_routing_table(run_python, override: str | None) -> None:
    # Without the dispatch log (which sends every call through the routed fallback):
    # the cpu provider copies the operands to the CPU, the host provider does not.
    result = run_python(
        """
        import torch
        a, b = torch.randn(8, 8), torch.randn(8, 8)
        fa, fb = a.to("flagos"), b.to("flagos")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = torch.mm(fa, fb)
        copies = sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")
        print("copies", copies, "equal", torch.allclose(out.cpu(), a @ b, atol=1e-5))
        """,
        env={"FLAGOS_OP_mm": override} if override else {},
    )
    copies = int(result.stdout.split()[1])
    assert "equal True" in result.stdout
    assert (copies >= 2) if override == "cpu" else (copies == 0), result.stdout


def test_dispatch_log_is_off_by_default(run_python) -> None:
    result = run_python("import torch; (torch.ones(2, device='flagos') * 2).sum().item()")
    assert "[torch_fl]" not in result.stderr


def test_backend_config_file_replaces_the_packaged_one(run_python, tmp_path: Path) -> None:
    config = tmp_path / "routes.conf"
    config.write_text("# every op copies to CPU except mul\ndefault = cpu\nmul = host  # all overloads\n")
    result = run_python(
        """
        import torch, torch_fl
        x = torch.arange(4.0, device="flagos")
        y = (x * 3 + 1).sum()
        print(torch_fl.provider_for("add.Tensor"), torch_fl.provider_for("mul.Tensor"), y.item())
        """,
        env={"FLAGOS_BACKEND_CONFIG": str(config)},
    )
    assert result.stdout.split() == ["cpu", "host", "22.0"]


def test_cpu_provider_gives_the_same_results_including_in_place_and_random(run_python) -> None:
    code = """
        import torch
        torch.flagos.manual_seed(3)
        x = torch.randn(4, 5, device="flagos")
        x.mul_(2).add_(1)
        out = torch.empty(0, device="flagos")
        torch.mm(x, x.t(), out=out)
        print(repr(out.cpu().sum().item()), repr(torch.nn.functional.dropout(x, 0.3).cpu().sum().item()))
        """
    host = run_python(code).stdout
    cpu = run_python(code, env={"FLAGOS_BACKEND_CONFIG": "", "FLAGOS_OP_mm": "cpu", "FLAGOS_OP_mul_": "cpu",
                                "FLAGOS_OP_add_": "cpu", "FLAGOS_OP_randn": "cpu", "FLAGOS_OP_native_dropout": "cpu",
                                "FLAGOS_OP_normal_": "cpu"}).stdout
    assert host == cpu


def test_unavailable_provider_falls_back_to_the_kernel_device_visibly(run_python) -> None:
    result = run_python(
        """
        import warnings, torch, torch_fl
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = torch.ones(3, device="flagos").neg()
            z = torch.ones(3, device="flagos").neg()
        print(torch_fl.route("neg"), y.sum().item())
        print("warnings", len(caught), caught[0].message)
        """,
        env={"FLAGOS_OP_neg": "flaggems"},
    )
    assert "Route(requested='flaggems', effective='host') -3.0" in result.stdout
    assert "warnings 1" in result.stdout  # once per op, not per call
    assert "provider 'flaggems' cannot run aten::neg" in result.stdout
    # At import, once: why the provider is unavailable, and the fix.
    assert "flag_gems is not installed; the torch_fl wheel of platform host has no flaggems extra" in result.stderr


_BAD_SETTINGS = [
    ({"FLAGOS_OP_add__Tensor": "nosuch"}, "FLAGOS_OP_add__Tensor",
     "FLAGOS_OP_add__Tensor: unknown provider 'nosuch'; use one of host, cpu"),
    ({"FLAGOS_OP_add__Tensor": "hots"}, "FLAGOS_OP_add__Tensor",
     "FLAGOS_OP_add__Tensor: unknown provider 'hots' (did you mean 'host'?)"),
    ({"FLAGOS_OP_addd": "cpu"}, "FLAGOS_OP_addd", "FLAGOS_OP_addd: unknown operator 'addd'"),
    ({"FLAGOS_BACKEND_CONFIG": "/nonexistent/routes.conf"}, "FLAGOS_BACKEND_CONFIG",
     "cannot read routing file /nonexistent/routes.conf"),
    ({"FLAGOS_BACKEND_CONFIG": "{malformed}"}, "FLAGOS_BACKEND_CONFIG", "malformed.conf:2: expected 'op = provider'"),
]


def _with_config(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    if env.get("FLAGOS_BACKEND_CONFIG") == "{malformed}":
        bad = tmp_path / "malformed.conf"
        bad.write_text("default = host\nmm cpu\n")
        return {"FLAGOS_BACKEND_CONFIG": str(bad)}
    return env


@pytest.mark.parametrize(("env", "setting", "expected"), _BAD_SETTINGS,
                         ids=["nosuch-provider", "misspelt-provider", "unknown-op", "missing-file", "malformed-file"])
def test_bad_setting_warns_once_at_import_and_torch_works(run_python, tmp_path: Path, env: dict[str, str],
                                                          setting: str, expected: str) -> None:
    """A program that never touches flagos runs: ``import torch`` (which imports torch_fl through its entry
    point) gives one warning line naming the setting, nothing else."""
    result = run_python("import torch; print('cpu', torch.ones(3).sum().item())", env=_with_config(env, tmp_path))
    assert result.stdout == "cpu 3.0\n"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("torch_fl:0: FlagosSettingWarning: ") and expected in lines[0]
    assert f"flagos is unusable in this process (fix or unset {setting}, then start the program again)" in lines[0]


@pytest.mark.parametrize(("env", "setting", "expected"), _BAD_SETTINGS,
                         ids=["nosuch-provider", "misspelt-provider", "unknown-op", "missing-file", "malformed-file"])
def test_bad_setting_raises_on_first_flagos_use(run_python, tmp_path: Path, env: dict[str, str], setting: str,
                                                expected: str) -> None:
    result = run_python("""
        import torch
        for use in ("torch.ones(2, device='flagos')", "torch.ones(2).to('flagos')",
                    "torch.nn.Linear(2, 2).to('flagos')"):
            try:
                eval(use)
            except Exception as e:
                print(type(e).__name__, "|", e)
        """, env=_with_config(env, tmp_path))
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and len(set(lines)) == 1, result.stdout  # every use, the same one line
    kind, _, message = lines[0].partition(" | ")
    assert kind == "RoutingError" and message.startswith("flagos cannot be used: ") and expected in message
    assert message.endswith(f" — fix or unset {setting}, then start the program again")


def test_bad_setting_under_warnings_as_errors_still_imports(run_python) -> None:
    # -W error turns the warning into an exception raised inside torch's backend autoload: that is the
    # user's request, and the message still names the setting.
    result = run_python("import torch", env={"FLAGOS_OP_add__Tensor": "nosuch", "PYTHONWARNINGS": "error"},
                        check=False)
    assert "FLAGOS_OP_add__Tensor: unknown provider 'nosuch'" in result.stderr


def test_bad_line_in_routing_file(tmp_path: Path) -> None:
    from torch_fl import _C

    bad = tmp_path / "bad.conf"
    bad.write_text("default = host\nmm cpu\n")
    with pytest.raises(routing.RoutingError, match=r"bad.conf:2: expected 'op = provider', got 'mm cpu'"):
        routing.parse_file(bad, list(_C._provider_names()), {"aten::mm", "mm"})
    bad.write_text("mm = gpu\n")
    with pytest.raises(routing.RoutingError, match=r"bad.conf:1: unknown provider 'gpu'"):
        routing.parse_file(bad, list(_C._provider_names()), {"aten::mm", "mm"})


def test_routing_table_can_be_reinstalled_in_process() -> None:
    table = routing.load("host", environ={"FLAGOS_OP_sub__Tensor": "cpu"})
    routing.install(table, log_dispatch=False)
    try:
        assert torch_fl.provider_for("sub.Tensor") == "cpu"
        assert (torch.ones(2, device="flagos") - 1).sum().item() == 0.0
    finally:
        routing.install(routing.load("host", environ={}), log_dispatch=False)
    assert torch_fl.provider_for("sub.Tensor") == "host"
