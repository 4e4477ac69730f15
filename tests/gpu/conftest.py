"""The GPU suite runs only where torch_fl was built for the cuda platform and a GPU is present:
with a CUDA build of torch, or on stock torch+cpu with the cuda-assets wheel."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    try:
        import torch_fl
    except ImportError as e:  # pragma: no cover - depends on the machine
        reason = f"torch_fl is not importable: {e}"
    else:
        if torch_fl.build_config.PLATFORM != "cuda":
            reason = f"torch_fl is built for {torch_fl.build_config.PLATFORM}, not cuda"
        elif not torch.flagos.is_available():
            reason = "needs an NVIDIA GPU (torch_fl's cuda platform sees none)"
    if reason:
        for item in items:
            if item.fspath.dirname.endswith("gpu"):
                item.add_marker(pytest.mark.skip(reason=reason))
