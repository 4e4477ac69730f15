"""Graph capture on flagos: ``torch.flagos.CUDAGraph``, ``torch.flagos.graph`` and ``graph_pool_handle``.

They mirror ``torch.cuda.CUDAGraph``, ``torch.cuda.graph`` and ``torch.cuda.graph_pool_handle``.  On the cuda
platform a flagos stream *is* a CUDA stream and flagos memory comes from PyTorch's CUDA caching allocator, so
PyTorch's own graph object (``at::cuda::CUDAGraph``, bound in ``torch_fl._C``) captures flagos work: warm the
work up, capture it on a side stream, then ``replay()`` it with new values copied into the captured inputs.
That serves host-bound work (batch-1 decoding, small batches) as it serves it on ``cuda``.

Platforms whose runtime has no graph capture (the host platform's emulated runtime) raise
:class:`GraphCaptureUnavailable` with the reason; nothing is captured silently as eager code.
"""

from __future__ import annotations

import gc
from types import TracebackType
from typing import Any, Optional

import torch

from torch_fl import _C

__all__ = ["CUDAGraph", "GraphCaptureUnavailable", "capture_unavailable_reason", "graph", "graph_pool_handle",
           "is_current_stream_capturing"]

_Pool = tuple[int, int]


class GraphCaptureUnavailable(RuntimeError):
    """This platform's runtime cannot capture graphs."""


def capture_unavailable_reason() -> Optional[str]:
    """Why this platform cannot capture graphs, or None where it can."""
    if getattr(_C, "_Graph", None) is not None:
        return None
    return f"flagos graph capture is not available on the {_C._platform()} platform: its runtime has no graph capture"


def _graph_class() -> Any:
    reason = capture_unavailable_reason()
    if reason is not None:
        raise GraphCaptureUnavailable(f"{reason}; run the work eagerly, or use torch.compile without "
                                      "mode='reduce-overhead'")
    return _C._Graph


def is_current_stream_capturing() -> bool:
    """Whether the current flagos stream is capturing a graph (always False where capture is unavailable)."""
    probe = getattr(_C, "_is_current_stream_capturing", None)
    return bool(probe()) if probe is not None else False


def graph_pool_handle() -> _Pool:
    """A memory pool id that several graphs can share (``torch.flagos.graph(g, pool=...)``)."""
    _graph_class()
    return _C._graph_pool_handle()


class CUDAGraph:
    """A captured sequence of flagos work, replayed with ``replay()`` (``torch.cuda.CUDAGraph``'s interface)."""

    def __init__(self) -> None:
        self._graph = _graph_class()()

    def capture_begin(self, pool: Optional[_Pool] = None, capture_error_mode: str = "global") -> None:
        """Begin capturing the current flagos stream's work (it must not be the default stream)."""
        self._graph.capture_begin(pool, capture_error_mode)

    def capture_end(self) -> None:
        self._graph.capture_end()

    def replay(self) -> None:
        """Run the captured work again on the current stream."""
        self._graph.replay()

    def reset(self) -> None:
        """Free the captured graph and its memory pool reference."""
        self._graph.reset()

    def pool(self) -> _Pool:
        """The memory pool id of this graph, for sharing it with later captures."""
        return self._graph.pool()


class graph:  # noqa: N801 - torch.cuda.graph's name
    """Capture the flagos work of a ``with`` block into ``cuda_graph`` on a side stream (``torch.cuda.graph``)."""

    default_capture_stream: Optional[torch.Stream] = None

    def __init__(self, cuda_graph: CUDAGraph, pool: Optional[_Pool] = None, stream: Optional[torch.Stream] = None,
                 capture_error_mode: str = "global") -> None:
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = torch.flagos.Stream()
            stream = graph.default_capture_stream
        self.cuda_graph, self.pool, self.capture_stream = cuda_graph, pool, stream
        self.capture_error_mode = capture_error_mode
        self._stream_context: Any = None

    def __enter__(self) -> None:
        # As torch.cuda.graph: nothing in flight, and freed blocks returned, before capture starts.
        torch.flagos.synchronize()
        gc.collect()
        torch.flagos.empty_cache()
        self._stream_context = torch.flagos.stream(self.capture_stream)
        self._stream_context.__enter__()
        self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        try:
            self.cuda_graph.capture_end()
        finally:
            self._stream_context.__exit__(exc_type, exc, traceback)
