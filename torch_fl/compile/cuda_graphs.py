"""CUDA graphs (``mode="reduce-overhead"``, ``triton.cudagraphs``) on flagos graphs: switched off, with a note.

Inductor captures CUDA graphs through its CUDA graph trees, which are written for
``cuda`` tensors (``torch.cuda`` graphs, pools and storages made from CUDA data
pointers).  It already refuses to capture a graph whose device is anything but
``cuda`` (``cudagraph_utils.check_lowering_disable_cudagraph``: "multiple
devices"), silently unless the graph also holds CUDA tensors.  A user who moves a
CUDA training script to flagos would then lose the graphs without a word, so the
check is wrapped to give flagos's reason for a flagos graph, and the compiled
graph's ``post_compile`` (which applies or skips CUDA graphs, for a fresh compile
and for one loaded from inductor's cache alike) logs that reason once.  The graph
runs as compiled, without capture.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["REASON", "note_when_skipped", "switch_off"]

_DEVICE = "flagos"
REASON = "flagos devices: inductor captures CUDA graphs of 'cuda' devices only"

_log = logging.getLogger("torch_fl.compile")


@functools.cache
def _note() -> None:
    _log.warning("torch_fl: CUDA graphs are off for torch.compile on flagos (%s); the compiled code runs without "
                 "them", REASON.split(": ", 1)[1])


def switch_off(cudagraph_utils: ModuleType) -> None:
    """Wrap ``cudagraph_utils.check_lowering_disable_cudagraph`` to refuse flagos graphs, with the note."""
    original: Callable[[dict[Any, Any]], str | None] = cudagraph_utils.check_lowering_disable_cudagraph

    @functools.wraps(original)
    def check_lowering_disable_cudagraph(device_node_mapping: dict[Any, Any]) -> str | None:
        if any(getattr(device, "type", None) == _DEVICE for device in device_node_mapping):
            return REASON
        return original(device_node_mapping)

    cudagraph_utils.check_lowering_disable_cudagraph = check_lowering_disable_cudagraph  # type: ignore[attr-defined]


def note_when_skipped(output_code: ModuleType) -> None:
    """Wrap ``output_code.CompiledFxGraph.post_compile`` to log the note when it skips CUDA graphs for flagos."""
    graph_class = output_code.CompiledFxGraph
    original = graph_class.post_compile

    @functools.wraps(original)
    def post_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The reason is only ever set when CUDA graphs were asked for (and the cache key holds that setting).
        if getattr(self, "disabled_cudagraphs_reason", None) == REASON:
            _note()
        return original(self, *args, **kwargs)

    graph_class.post_compile = post_compile
