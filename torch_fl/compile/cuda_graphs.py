"""CUDA graphs (``mode="reduce-overhead"``, ``triton.cudagraphs``) for flagos graphs: which ones inductor captures.

Inductor decides per compiled graph whether to run it through CUDA graphs, and three of its steps know only
``cuda``:

* ``cudagraph_utils.check_lowering_disable_cudagraph`` refuses a graph whose one device is not ``cuda``
  ("multiple devices").  ``decide`` wraps it.  Where the platform can capture (the cuda platform: flagos memory
  comes from PyTorch's CUDA caching allocator and flagos streams are CUDA streams, ``torch_fl.graphs``) a
  flagos graph is judged as a cuda graph is, one flagos device taking the place of one cuda device.  Elsewhere
  (the host platform's runtime has no graph capture) it is refused with that reason, which would otherwise be
  silent: inductor logs why it skips CUDA graphs only for graphs that hold CUDA tensors.
* ``compile_fx.cudagraphify`` builds CUDA graph trees, which are written for ``cuda`` tensors; for a flagos
  graph ``route`` makes it ``graph_replay.cudagraphify``.  Only the compiled graph's ``post_compile`` knows
  which graph is being wrapped (it runs for a fresh compile and for one loaded from inductor's cache alike), so
  ``mark_flagos_graphs`` marks a flagos graph's ``post_compile`` for the length of the call.
* After a forward was captured, a backward that is not tells the forward's trees manager that it runs
  (``output_code.maybe_handle_backward_generation``); a flagos forward has no trees manager to tell.

``post_compile`` also says why a flagos graph runs without CUDA graphs, as inductor says it for cuda graphs
(its "skipping cudagraphs due to ..." on its ``cudagraphs`` log; ``triton.cudagraph_or_error`` raises).  Where
the platform cannot capture, that is one note in ``torch_fl.compile``'s log, once per process.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from torch_fl import graphs
from torch_fl.compile import inductor_names

__all__ = ["decide", "mark_flagos_graphs", "route", "unavailable_reason"]

_DEVICE = "flagos"

_log = logging.getLogger("torch_fl.compile")

# True while the post_compile of a flagos graph runs: the cudagraphify it calls is graph_replay's.
_WRAPPING_FLAGOS: contextvars.ContextVar[bool] = contextvars.ContextVar("torch_fl_wrapping_flagos", default=False)


def unavailable_reason() -> str | None:
    """Inductor's reason to skip CUDA graphs for every flagos graph of this platform, or None where it can capture."""
    reason = graphs.capture_unavailable_reason()
    return None if reason is None else f"flagos devices: {reason}"


@functools.cache
def _note(reason: str) -> None:
    _log.warning("torch_fl: CUDA graphs are off for torch.compile on flagos (%s); the compiled code runs without "
                 "them", reason.split(": ", 1)[1])


def decide(cudagraph_utils: ModuleType) -> None:
    """Wrap ``cudagraph_utils.check_lowering_disable_cudagraph`` to judge flagos graphs (see the docstring)."""
    original: Callable[[dict[Any, Any]], str | None] = cudagraph_utils.check_lowering_disable_cudagraph
    skip_message: Callable[[str], str] = cudagraph_utils.format_default_skip_message

    @functools.wraps(original)
    def check_lowering_disable_cudagraph(device_node_mapping: dict[Any, Any]) -> str | None:
        flagos = [device for device in device_node_mapping if getattr(device, "type", None) == _DEVICE]
        if not flagos:
            return original(device_node_mapping)
        unavailable = unavailable_reason()
        if unavailable is not None:
            return unavailable
        reason = original(device_node_mapping)  # it drops the meta (and, when partitioning, the cpu) entries
        # Its last rule is "exactly one device, of type cuda"; what it says of one flagos device alone is that rule.
        if len(device_node_mapping) == 1 and reason == skip_message(f"multiple devices: {flagos[0]!r}"):
            return None
        return reason

    cudagraph_utils.check_lowering_disable_cudagraph = check_lowering_disable_cudagraph  # type: ignore[attr-defined]


def route(compile_fx: ModuleType) -> None:
    """Make ``compile_fx.cudagraphify`` wrap a flagos graph with ``graph_replay`` and any other graph as before."""
    original: Callable[..., Any] = compile_fx.cudagraphify

    @functools.wraps(original)
    def cudagraphify(model: Callable[..., Any], static_input_idxs: Any = (), **kwargs: Any) -> Callable[..., Any]:
        if _WRAPPING_FLAGOS.get():
            from torch_fl.compile import graph_replay

            return graph_replay.cudagraphify(model, static_input_idxs, **kwargs)
        return original(model, static_input_idxs, **kwargs)

    inductor_names.replace(compile_fx, "cudagraphify", cudagraphify)


def _explain_skip(graph: Any, cudagraph_utils: ModuleType) -> None:
    reason = graph.disabled_cudagraphs_reason
    if not reason:
        return
    if reason == unavailable_reason():
        _note(reason)
        return
    # Inductor has counted the skip (cudagraph_skips) for a graph without CUDA tensors, but not logged it.
    message = f"skipping cudagraphs due to {reason}"
    cudagraph_utils.cudagraphs_log.warning(message)
    if torch._inductor.config.triton.cudagraph_or_error:
        raise RuntimeError(message)


def mark_flagos_graphs(output_code: ModuleType) -> None:
    """Wrap ``CompiledFxGraph.post_compile`` and ``maybe_handle_backward_generation`` for flagos graphs."""
    from torch._inductor import cudagraph_utils

    graph_class = output_code.CompiledFxGraph
    post_compile_of = graph_class.post_compile

    @functools.wraps(post_compile_of)
    def post_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _DEVICE not in self.device_types:
            return post_compile_of(self, *args, **kwargs)
        if torch._inductor.config.triton.cudagraphs:
            _explain_skip(self, cudagraph_utils)
        token = _WRAPPING_FLAGOS.set(True)
        try:
            return post_compile_of(self, *args, **kwargs)
        finally:
            _WRAPPING_FLAGOS.reset(token)

    graph_class.post_compile = post_compile

    handle_backward_of = output_code.maybe_handle_backward_generation

    @functools.wraps(handle_backward_of)
    def maybe_handle_backward_generation(compiled_graph: Any, boxed_forward_device_index: Any) -> None:
        if _DEVICE in compiled_graph.device_types:
            return  # no trees manager ran the forward
        handle_backward_of(compiled_graph, boxed_forward_device_index)

    output_code.maybe_handle_backward_generation = maybe_handle_backward_generation
