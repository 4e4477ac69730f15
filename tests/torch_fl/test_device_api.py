"""torch.flagos: devices, guards, streams and events."""

from __future__ import annotations

import pytest
import torch

import torch_fl


def test_device_module_is_registered_both_ways() -> None:
    assert torch.flagos is torch_fl.flagos
    assert torch._C._get_privateuse1_backend_name() == "flagos"
    assert torch.flagos.is_available()
    assert torch.flagos.device_count() == 2


def test_set_device_and_device_context() -> None:
    assert torch.flagos.current_device() == 0
    with torch.flagos.device(1):
        assert torch.flagos.current_device() == 1
        assert torch.empty(3, device="flagos").device == torch.device("flagos", 1)
    assert torch.flagos.current_device() == 0
    torch.flagos.set_device("flagos:1")
    try:
        assert torch.flagos.current_device() == 1
    finally:
        torch.flagos.set_device(0)


def test_ops_follow_their_tensors_device_not_the_current_one() -> None:
    x = torch.arange(6.0).to("flagos:1")
    assert torch.flagos.current_device() == 0
    y = x * 2 + 1
    assert y.device == torch.device("flagos", 1)
    torch.testing.assert_close(y.cpu(), torch.arange(6.0) * 2 + 1)


def test_device_guard_restores_after_errors() -> None:
    with pytest.raises(RuntimeError):
        with torch.flagos.device(1):
            raise RuntimeError("boom")
    assert torch.flagos.current_device() == 0


def test_mixing_two_flagos_devices_is_an_error() -> None:
    a = torch.ones(2, device="flagos:0")
    b = torch.ones(2, device="flagos:1")
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(a, b)


def test_torch_accelerator_sees_flagos() -> None:
    assert torch.accelerator.current_accelerator() == torch.device("flagos")
    assert torch.accelerator.device_count() == 2


def test_streams_record_query_wait_and_context() -> None:
    s1 = torch.flagos.Stream()
    s2 = torch.flagos.Stream(device=1)
    assert s1.device == torch.device("flagos", 0)
    assert s2.device == torch.device("flagos", 1)
    assert s1 != torch.flagos.default_stream()
    default = torch.flagos.current_stream()
    with torch.flagos.stream(s1):
        assert torch.flagos.current_stream() == s1
        x = torch.ones(4, device="flagos") * 3
        event = torch.flagos.Event()
        event.record()
    assert torch.flagos.current_stream() == default
    s1.wait_event(event)
    default.wait_stream(s1)
    event.synchronize()
    assert event.query() and s1.query()
    s1.synchronize()
    torch.flagos.synchronize()
    assert x.sum().item() == 12.0


def test_event_elapsed_time() -> None:
    start = torch.flagos.Event(enable_timing=True)
    end = torch.flagos.Event(enable_timing=True)
    start.record()
    a = torch.randn(128, 128, device="flagos")
    for _ in range(5):
        a = a @ a / 128
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    untimed = torch.flagos.Event()
    untimed.record()
    with pytest.raises((ValueError, RuntimeError), match="enable_timing"):
        untimed.elapsed_time(end)


def test_generated_methods() -> None:
    x = torch.ones(2).flagos()
    assert x.is_flagos and x.device.type == "flagos"
    module = torch.nn.Linear(2, 2).flagos(1)
    assert module.weight.device == torch.device("flagos", 1)
    storage = torch.ones(2).untyped_storage().flagos()
    assert storage.is_flagos


def test_device_name_and_memory_info() -> None:
    assert "host" in torch.flagos.get_device_name(0)
    free, total = torch.flagos.mem_get_info(0)
    assert 0 < free <= total


def test_stream_and_event_types() -> None:
    s = torch.flagos.Stream()
    e = torch.flagos.Event()
    assert isinstance(s, torch.flagos.Stream) and isinstance(e, torch.flagos.Event)
    assert not isinstance(torch.Stream(device="cpu"), torch.flagos.Stream)


def test_graph_capture_says_it_is_unavailable_on_the_host_platform() -> None:
    # The emulated runtime has no graph capture: asking for a graph fails with the reason, never silently.
    from torch_fl.graphs import GraphCaptureUnavailable

    with pytest.raises(GraphCaptureUnavailable, match="not available on the host platform.*run the work eagerly"):
        torch.flagos.CUDAGraph()
    with pytest.raises(GraphCaptureUnavailable, match="not available on the host platform"):
        torch.flagos.graph_pool_handle()
    assert torch.flagos.is_current_stream_capturing() is False
