"""The GPU suite runs only where torch_fl was built on the cuda runtime and a GPU is present:
with a CUDA build of torch, or on stock torch+cpu with the cuda-assets wheel or a CUDA-compatible
vendor's forked-libtorch wheel (ppu).  Its native CUDA
results come from the reference interpreter (reference.py); the tests of that protocol itself
(not marked `gpu`) run everywhere."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = None
    try:
        import torch_fl
    except ImportError as e:  # pragma: no cover - depends on the machine
        reason = f"torch_fl is not importable: {e}"
    else:
        config = torch_fl.build_config
        # The cuda runtime family: the cuda platform and the CUDA-compatible vendors built on it (ppu).
        if config.RUNTIME != "cuda":
            reason = f"torch_fl is built for {config.PLATFORM}, whose runtime is {config.RUNTIME}, not cuda"
        elif not torch.flagos.is_available():
            reason = "needs an NVIDIA GPU (torch_fl's cuda platform sees none)"
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))
    # Where ops are routed to FlagGems, its code and Triton's compiler run under Python's default warning
    # filters, as in a user's process.  Under the suite's warnings-as-errors a note of theirs would make
    # FlagGems refuse the op, and the refusal's FlagGemsWarning (the op then ran on provider cuda) would fail
    # a test whose results are right; refusals are named in the warnings summary and in each failure's message.
    flaggems_everywhere = os.environ.get("FLAGOS_USE_FLAGGEMS") == "1"
    for item in gpu_items:
        if flaggems_everywhere or item.module.__name__ == "test_flaggems_cuda":
            item.add_marker(pytest.mark.filterwarnings("default"))


@pytest.fixture(scope="session")
def inputs() -> dict[str, object]:
    """The inputs of every compared computation, made once on the CPU (gpu_cases.make_inputs)."""
    from gpu_cases import make_inputs

    return make_inputs()


@pytest.fixture(scope="session")
def native(inputs: dict[str, object]) -> dict[str, object]:
    """The native-CUDA results of the same computations, from the reference interpreter."""
    import reference
    from support.tools import missing

    try:
        python = reference.interpreter()
    except reference.Unavailable as e:
        missing(str(e))
    return reference.call("gpu_cases:all_results", inputs, "cuda", python=python)
