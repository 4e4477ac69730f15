"""torch.cuda's device facts on torch.flagos, on the host platform: an emulated device described by its runtime."""

from __future__ import annotations

import os

import pytest
import torch


def test_device_properties_describe_the_emulated_device() -> None:
    props = torch.flagos.get_device_properties("flagos:1")
    assert props.name == torch.flagos.get_device_name(1) == "flagos host device 1"
    assert props.total_memory == torch.flagos.mem_get_info(1)[1] > 0
    assert props.multi_processor_count == len(os.sched_getaffinity(0))
    assert props.type == "flagos"
    # No compute capability on the host platform: absent, as on a CPU, and (0, 0) from get_device_capability.
    assert not hasattr(props, "major") and not hasattr(props, "minor")
    assert torch.flagos.get_device_capability() == (0, 0)
    assert torch.flagos.get_device_properties() == torch.flagos.get_device_properties(torch.flagos.current_device())


def test_device_properties_follow_the_memory_limit(run_python) -> None:
    result = run_python("import torch; print(torch.flagos.get_device_properties(0).total_memory)",
                        env={"FLAGOS_HOST_MEMORY_LIMIT": "64M"})
    assert int(result.stdout) == 64 << 20


def test_bf16_is_supported_and_computes() -> None:
    assert torch.flagos.is_bf16_supported() is True
    x = torch.ones(4, dtype=torch.bfloat16, device="flagos")
    assert (x + x).sum().item() == 8.0


def test_utilization_is_a_clear_error_where_the_runtime_does_not_report_it() -> None:
    with pytest.raises(RuntimeError, match=r"^torch.flagos.utilization: the host runtime does not report device "
                                           r"utilization; measure the process's CPU time instead$"):
        torch.flagos.utilization()


def test_init_and_ipc_collect() -> None:
    torch.flagos.init()
    torch.flagos.ipc_collect()  # no IPC on the host platform: nothing to collect


def test_init_raises_the_setting_error(run_python) -> None:
    result = run_python("""
        import torch
        try:
            torch.flagos.init()
        except Exception as e:
            print(type(e).__name__, e)
        """, env={"FLAGOS_OP_add__Tensor": "nosuch"})
    assert result.stdout.startswith("RoutingError flagos cannot be used: FLAGOS_OP_add__Tensor")
    result = run_python("""
        import torch
        try:
            torch.flagos.init()
        except Exception as e:
            print(type(e).__name__, e)
        """, env={"FLAGOS_HOST_DEVICES": "two"})
    assert result.stdout.startswith("RuntimeError FLAGOS_HOST_DEVICES='two' is not a device count")


def test_device_module_answers_what_torch_cuda_answers() -> None:
    """Every function of torch.cuda's device/memory API that libraries call exists on torch.flagos."""
    names = ("get_device_properties", "get_device_capability", "is_bf16_supported", "mem_get_info", "init",
             "ipc_collect", "utilization", "memory_summary", "memory_stats", "memory_stats_as_nested_dict",
             "reset_peak_memory_stats", "reset_max_memory_allocated", "empty_cache", "memory_allocated",
             "max_memory_allocated", "memory_reserved", "max_memory_reserved", "set_per_process_memory_fraction",
             "get_per_process_memory_fraction", "memory_snapshot")
    assert [n for n in names if not callable(getattr(torch.flagos, n, None))] == []
    assert all(callable(getattr(torch.cuda, n)) for n in names)
    history = ("_record_memory_history", "_snapshot", "_dump_snapshot")
    assert [n for n in history if not callable(getattr(torch.flagos.memory, n, None))] == []
    assert all(callable(getattr(torch.cuda.memory, n)) for n in history)


def test_torch_accelerator_answers_the_device_capability() -> None:
    supported = torch.accelerator.get_device_capability("flagos:0")["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2,
            torch.complex64, torch.int64, torch.bool} <= supported
