"""The GPU suite runs only where torch_fl was built for the cuda platform and a GPU is present."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if not (torch.version.cuda and torch.cuda.is_available()):
        reason = "needs an NVIDIA GPU and a CUDA build of torch"
    else:
        try:
            import torch_fl
        except ImportError as e:  # pragma: no cover - depends on the machine
            reason = f"torch_fl is not importable: {e}"
        else:
            if torch_fl.build_config.PLATFORM != "cuda":
                reason = f"torch_fl is built for {torch_fl.build_config.PLATFORM}, not cuda"
    if reason:
        for item in items:
            if item.fspath.dirname.endswith("gpu"):
                item.add_marker(pytest.mark.skip(reason=reason))
