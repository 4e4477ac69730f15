"""Suite-wide switches for the heavy markers (see [tool.pytest.ini_options])."""

from __future__ import annotations

import os

import pytest

# Session fixtures more than one area uses, defined once so that pytest makes them once.
pytest_plugins = ["support.bootstrap_fixtures"]


def _gpu_present() -> bool:
    """A CUDA build of torch with a GPU, or torch_fl on the cuda runtime on a GPU (on stock
    torch+cpu the cuda-assets wheel brings the CUDA kernels but not torch.cuda's API)."""
    try:
        import torch
    except ImportError:
        return False
    if torch.version.cuda and torch.cuda.is_available():
        return True
    try:
        import torch_fl
    except ImportError:
        return False
    return torch_fl.build_config.RUNTIME == "cuda" and torch.flagos.is_available()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shard", metavar="K/N", help="run only the K-th of N interleaved parts of the selected tests "
                     "(K from 0): N processes run a long tier side by side, and fixtures that compute for the "
                     "selected tests only (the OpInfo tier's reference results) compute for their part")


def _shard(spec: str) -> tuple[int, int]:
    k, _, n = spec.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise pytest.UsageError(f"--shard {spec}: give K/N with 0 <= K < N, for example --shard 0/4")
    return int(k), int(n)


def _longest_first(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (ci/test: `-n auto --dist loadfile`, a file's tests on one worker, in their order),
    the files that compile C/C++ (plugin builds of minutes), then the other slow ones, then the OpInfo tier
    (thousands of cases a file) are handed out first: the longest work starts at once and the rest fills
    the other workers around it, instead of one build starting when everything else is done."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.partition("::")[0]

    def files_marked(marker: str) -> set[str]:
        return {file_of(item) for item in items if item.get_closest_marker(marker) is not None}

    tiers = [files_marked(marker) for marker in ("compile", "slow", "opinfo")]
    items.sort(key=lambda item: tuple(file_of(item) not in files for files in tiers))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spec = config.getoption("--shard")
    if spec:
        k, n = _shard(spec)
        kept = [item for i, item in enumerate(items) if i % n == k]
        config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % n != k])
        items[:] = kept
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: it collects, the controller hands out
        _longest_first(items)
    cuda_assets = os.environ.get("FLAGOS_TEST_CUDA_ASSETS") == "1"
    gpu = None
    for item in items:
        if "cuda_assets" in item.keywords and not cuda_assets:
            item.add_marker(pytest.mark.skip(reason="downloads the CUDA torch wheel; set FLAGOS_TEST_CUDA_ASSETS=1"))
        if item.get_closest_marker("gpu") is not None:  # not `in item.keywords`: that also matches tests/gpu/ itself
            if gpu is None:
                gpu = _gpu_present()
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU and a CUDA build of torch"))
