"""The FlagGems table: read from the installed flag_gems' own registration, filtered by what flagos may route."""

from __future__ import annotations

import json
from pathlib import Path

from flaggems_support import status_of


def test_table_comes_from_the_installed_package(run_flagos) -> None:
    status = status_of(run_flagos, {"FLAGOS_USE_FLAGGEMS": "1"})
    assert status["available"] is True
    assert status["flag_gems"] == "5.0.2+standin" and status["dispatch_key"] == "CPU"
    # Every entry enable() registers, in its order; `exp`'s version condition does not hold, so it is not offered.
    assert status["offered"] == ["add.Tensor", "add_.Tensor", "mul.Tensor", "mm.out", "_softmax", "gelu",
                                 "gelu_backward", "cat", "max.dim", "sigmoid", "alias_copy", "sqrt", "tanh", "sinh",
                                 "native_batch_norm", "native_batch_norm_backward"]
    assert status["routed"] == sorted(status["offered"])
    assert status["skipped"] == {
        "_to_copy": "chooses its result's device",
        "abs": "flag_gems names no function for it (None)",
        "divide.Tensor": "decomposes (CompositeImplicitAutograd): a device kernel would cut autograd",
        "rand_like": "random: its generator lives on the flagos device",
        "zeros": "a factory: it allocates on the flagos device itself",
    }
    assert status["registration_failed"] == {}


def test_the_table_is_read_only_when_the_routing_names_flaggems(run_flagos) -> None:
    result = run_flagos("""
        import sys, torch, torch_fl
        print("imported", "flag_gems" in sys.modules, torch_fl.is_flaggems_enabled())
        """)
    assert "imported False False" in result.stdout


def test_without_flag_gems_the_ops_run_on_the_kernel_device_and_the_extra_is_named(run_flagos) -> None:
    result = run_flagos("""
        import torch, torch_fl
        x = torch.arange(4.0, device="flagos")
        print("result", (x + x).sum().item(), torch_fl.route("add.Tensor"), torch_fl.is_flaggems_enabled())
        """, {"FLAGOS_USE_FLAGGEMS": "1"}, with_flag_gems=False)
    assert "result 12.0 Route(requested='host', effective='host') False" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if "FlagGemsWarning" in line]
    assert len(warnings) == 1, result.stderr
    # The host wheel has no flaggems extra (only the cuda recipe declares one): the advice names FlagGems itself.
    assert ("the routing table names provider 'flaggems', but flag_gems is not installed; the torch_fl wheel of "
            "platform host has no flaggems extra: pip install 'flag-gems") in warnings[0]
    assert "torch_fl[flaggems]" not in result.stderr
    assert "its operators run on provider 'host'" in warnings[0]


def test_a_flag_gems_for_another_device_is_not_used(run_flagos, tmp_path: Path) -> None:
    # A FlagGems that registers for CUDA cannot take the host platform's CPU kernel views.
    package = tmp_path / "cuda_gems" / "flag_gems"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import torch\n__version__ = '5.0.2'\ndevice = 'cuda'\n"
        "def add(a, b, *, alpha=1):\n    raise AssertionError('must not run')\n"
        "def enable(lib=None, unused=None, **_):\n    lib.impl('add.Tensor', add, 'CUDA')\n")
    result = run_flagos("""
        import sys, json, torch, torch_fl
        from torch_fl import flaggems
        x = torch.ones(3, device="flagos")
        print("result", (x + x).sum().item(), torch_fl.is_flaggems_enabled())
        print(json.dumps(flaggems.status()))
        """, {"FLAGOS_USE_FLAGGEMS": "1", "PYTHONPATH": str(package.parent)}, with_flag_gems=False)
    assert "result 6.0 False" in result.stdout
    status = json.loads(result.stdout.splitlines()[-1])
    assert status["available"] is False
    assert status["reason"] == ("flag_gems 5.0.2 registers for CUDA, but flagos kernel views here are cpu tensors "
                                "(CPU); install the FlagGems build for this device")


def test_module_entry_point_prints_one_json_document(run_flagos) -> None:
    result = run_flagos("import runpy; runpy.run_module('torch_fl.flaggems', run_name='__main__')",
                        {"FLAGOS_OP_add": "flaggems"})
    document = json.loads(result.stdout)
    assert document["version"] == 1 and document["available"] is True
    assert document["routed"] == ["add.Tensor"]  # add = flaggems: only add's overloads FlagGems offers
