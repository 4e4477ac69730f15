"""CUDA graphs of inductor's compiled flagos graphs: warm up, capture once per shape, replay with static inputs.

Inductor wraps a compiled graph that may be captured with ``compile_fx.cudagraphify``, which builds PyTorch's
CUDA graph trees.  The trees are written for ``cuda`` tensors (they check ``is_cuda``, rebuild outputs as CUDA
tensors and manage the pool through ``torch.cuda``'s allocator state), so ``cuda_graphs`` sends flagos graphs
here.  This is the capture inductor had before the trees (``compile_fx.cudagraphify_impl``), on
``torch.flagos`` graphs, with the trees' rules where that one had none:

* One recording per distinct integer inputs (the sizes of a dynamic-shape graph; as the trees key them).  The
  first call with them runs the graph for real on a side stream (the warm-up: Triton autotuning and lazily made
  library handles must not happen during capture) and then captures it; capture runs nothing, so every call
  runs the graph exactly once and an in-place update is never applied twice.
* Inputs inductor calls static (parameters, buffers, ``mark_static_address`` tensors) are read in place.  Their
  addresses are checked on every call; one that moved is copied from then on (one re-recording): the
  activations a backward graph receives are new tensors each step, although inductor counts them static (the
  trees keep them in their pool).  Every other tensor input is copied into the recording's own buffer before
  each replay, and copied back after it if the graph writes to it.
* A replay writes its outputs into the graph's memory, which the next replay overwrites.  The trees hand those
  out and fail a later read of an overwritten one; here each call's outputs are copies made right after the
  replay (one per storage, so outputs that shared a storage still do, with their sizes, strides and offsets),
  valid however long they are kept.  An output that is a view of a static input stays a view of it.
* The recordings of one compiled graph share one memory pool, made at its first recording: a recording's memory
  is only read between its replay and the copies right after it, so its replays in turn on one stream may reuse
  each other's memory.  A pool is never shared with another compiled graph: PyTorch frees a pool once the last
  graph captured into it is gone, and a later capture into that pool's id fails (an internal assert of its
  allocators, with the RNG's capture state left behind).  Replays on two streams at once would not be safe.
* A recording that cannot be made runs the compiled graph without CUDA graphs from then on, with one note
  (``triton.cudagraph_or_error`` raises instead): a CPU tensor input (a kernel would read its value once, at
  capture), or an operation that capture refuses.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.compile_fx import get_input_idxs_to_check, index_expanded_dims_and_copy_, static_input
from torch._inductor.cudagraph_utils import maybe_warning_due_to_dynamic_shape
from torch._inductor.output_code import get_expanded_dims
from torch._inductor.utils import align_inputs_from_check_idxs, remove_unaligned_input_idxs
from torch.utils._ordered_set import OrderedSet

__all__ = ["CAPTURES", "REPLAYS", "GraphedFunction", "cudagraphify"]

# Keys in torch._dynamo.utils.counters["inductor"], next to inductor's own "cudagraph_skips".
CAPTURES = "flagos_graph_captures"
REPLAYS = "flagos_graph_replays"

_log = logging.getLogger("torch_fl.compile")

Model = Callable[[list[Any]], Any]

_VALUE, _COPY, _VIEW = "value", "copy", "view"


class _PerThread(threading.local):
    """The side stream of each device, per thread (as the trees keep one per thread)."""

    def __init__(self) -> None:
        self.streams: dict[int, torch.Stream] = {}


_PER_THREAD = _PerThread()


def _side_stream(device_index: int) -> torch.Stream:
    stream = _PER_THREAD.streams.get(device_index)
    if stream is None:
        stream = _PER_THREAD.streams[device_index] = torch.flagos.Stream(device_index)
    return stream


def _capture(model: Model, inputs: list[Any], stream: torch.Stream, pool: tuple[int, int]) -> tuple[Any, Any]:
    """Capture one call of ``model`` on ``stream`` into a graph of ``pool``: (the graph, the call's outputs)."""
    graph = torch.flagos.CUDAGraph()
    # thread_local: work of other threads (a data loader's copies) may go on while this thread captures.
    with torch.flagos.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
        outputs = model(inputs)
    return graph, outputs


def _tensor_view(storage: torch.UntypedStorage, dtype: torch.dtype, offset: int, size: tuple[int, ...],
                 stride: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, size, stride)


if hasattr(torch._C, "_tensors_data_ptrs_at_indices_equal"):  # CUDA builds of torch; one C++ loop (the trees')
    _addresses_hold: Callable[[list[Any], list[int | None], list[int]], bool] = \
        torch._C._tensors_data_ptrs_at_indices_equal
else:
    def _addresses_hold(inputs: list[Any], addresses: list[int | None], idxs: list[int]) -> bool:
        return all(inputs[i].data_ptr() == addresses[i] for i in idxs)


class _Recording:
    """One captured graph: its static inputs, the input buffers it reads, and how its outputs are handed out."""

    def __init__(self, graph: Any, inputs: list[Any], buffers: list[Any], static_idxs: Sequence[int],
                 mutated_idxs: OrderedSet[int], outputs: Any) -> None:
        self.graph = graph
        self.buffers = buffers
        self.static_idxs = list(static_idxs)
        self.addresses: list[int | None] = [None] * len(inputs)
        for i in self.static_idxs:
            self.addresses[i] = inputs[i].data_ptr()
        static = set(self.static_idxs)
        copied = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and i not in static]
        expanded = {i: get_expanded_dims(inputs[i]) for i in copied}
        # A buffer with expanded (stride 0) dimensions, or that overlaps itself, takes inductor's careful copy.
        plain = {i for i in copied if not expanded[i] and torch._debug_has_internal_overlap(buffers[i]) == 0}
        self.plain_copies = [i for i in copied if i in plain]
        self.expanded_copies = [(i, expanded[i]) for i in copied if i not in plain]
        self.copy_backs = [i for i in copied if i in mutated_idxs]
        self._plan_outputs(outputs, [inputs[i] for i in self.static_idxs])

    def _plan_outputs(self, outputs: Any, static_inputs: list[torch.Tensor]) -> None:
        self.container = type(outputs) if isinstance(outputs, (list, tuple)) else None
        kept = {x.untyped_storage()._cdata: x.untyped_storage() for x in static_inputs}
        positions: dict[int, int] = {}  # a graph storage's position in self.graph_storages
        self.graph_storages: list[torch.Tensor] = []  # each storage the outputs view, whole, as bytes
        # Per output: (_VALUE, the value, None), (_COPY, its storage's position, view) or (_VIEW, static storage, view).
        self.plan: list[tuple[Any, ...]] = []
        for out in outputs if self.container is not None else [outputs]:
            if not isinstance(out, torch.Tensor):
                self.plan.append((_VALUE, out, None))
                continue
            storage = out.untyped_storage()
            view = (out.dtype, out.storage_offset(), tuple(out.size()), tuple(out.stride()))
            if storage._cdata in kept:
                self.plan.append((_VIEW, kept[storage._cdata], view))
                continue
            position = positions.get(storage._cdata)
            if position is None:
                position = positions[storage._cdata] = len(self.graph_storages)
                self.graph_storages.append(torch.empty(0, dtype=torch.uint8, device=out.device).set_(storage))
            self.plan.append((_COPY, position, view))

    def holds(self, inputs: list[Any]) -> bool:
        """Whether the static inputs are where they were at capture."""
        return _addresses_hold(inputs, self.addresses, self.static_idxs)

    def moved(self, inputs: list[Any]) -> list[int]:
        return [i for i in self.static_idxs if inputs[i].data_ptr() != self.addresses[i]]

    def replay(self, inputs: list[Any]) -> Any:
        buffers = self.buffers
        for i in self.plain_copies:
            buffers[i].copy_(inputs[i])
        for i, dims in self.expanded_copies:
            index_expanded_dims_and_copy_(buffers[i], inputs[i], dims)
        written = [inputs[i] for i in self.copy_backs]
        inputs.clear()  # inductor's calling convention: the callee drops the inputs as early as it can
        self.graph.replay()
        counters["inductor"][REPLAYS] += 1
        for i, target in zip(self.copy_backs, written):
            target.copy_(buffers[i])
        copies = [storage.clone() for storage in self.graph_storages]
        outputs = []
        for kind, source, view in self.plan:
            if kind is _VALUE:
                outputs.append(source)
            elif kind is _COPY:
                outputs.append(_tensor_view(copies[source].untyped_storage(), *view))
            else:
                outputs.append(_tensor_view(source, *view))
        return outputs[0] if self.container is None else self.container(outputs)


class GraphedFunction:
    """A compiled graph run through flagos CUDA graphs: one recording per integer key (see the module docstring)."""

    def __init__(self, model: Model, inputs: Sequence[Any], static_input_idxs: Sequence[int],
                 mutated_input_idxs: Sequence[int], device_index: int) -> None:
        self.model = model
        self.device_index = device_index
        self.static_idxs = OrderedSet(static_input_idxs)
        self.mutated_idxs = OrderedSet(mutated_input_idxs)
        int_idxs = [i for i, x in enumerate(inputs) if isinstance(x, int)]
        self._key: Callable[[Sequence[Any]], Any] = operator.itemgetter(*int_idxs) if int_idxs else (lambda _: None)
        self.recordings: dict[Any, _Recording] = {}
        self.pool: tuple[int, int] | None = None  # this graph's own, kept while its recordings live
        self.uncaptured: Model | None = None  # set once a recording could not be made
        self.uncaptured_keys: dict[Any, Model] = {}  # sizes outside triton.cudagraph_capture_sizes
        self._warned_dynamic = False

    def __call__(self, inputs: list[Any]) -> Any:
        if self.uncaptured is not None:
            return self.uncaptured(inputs)
        key = self._key(inputs)
        recording = self.recordings.get(key)
        if recording is not None:
            if recording.holds(inputs):
                return recording.replay(inputs)
            moved = recording.moved(inputs)
            self.static_idxs = self.static_idxs - OrderedSet(moved)
            _log.info("torch_fl: static inputs %s of a CUDA-graphed flagos graph moved; they are copied from now on, "
                      "and the graph is captured again", moved)
        elif config.triton.cudagraph_capture_sizes is not None and key not in config.triton.cudagraph_capture_sizes:
            # As the trees: only the sizes asked for are captured.
            run = self.uncaptured_keys.get(key)
            if run is None:
                run = self.uncaptured_keys[key] = self._aligned(inputs)
            return run(inputs)
        return self._record(key, inputs)

    def _aligned(self, inputs: Sequence[Any]) -> Model:
        """The model, cloning the inputs that inductor's kernels assume aligned and are not (as without graphs)."""
        return align_inputs_from_check_idxs(self.model, get_input_idxs_to_check(inputs, list(self.static_idxs)),
                                            self.mutated_idxs)

    def _give_up(self, inputs: Sequence[Any], reason: str) -> None:
        """Run without CUDA graphs from now on, with the note (or inductor's error, where it is asked for)."""
        message = f"skipping cudagraphs due to {reason}"
        counters["inductor"]["cudagraph_skips"] += 1
        if config.triton.cudagraph_or_error:
            raise RuntimeError(message)
        _log.warning("torch_fl: %s; this flagos graph runs without CUDA graphs", message)
        self.uncaptured = self._aligned(inputs)
        self.recordings.clear()

    def _record(self, key: Any, inputs: list[Any]) -> Any:
        cpu = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.device.type == "cpu"]
        if cpu:
            self._give_up(inputs, f"CPU tensor inputs (positions {cpu}), whose values a capture would fix")
            assert self.uncaptured is not None
            return self.uncaptured(inputs)
        if key not in self.recordings and not self._warned_dynamic:
            self._warned_dynamic = maybe_warning_due_to_dynamic_shape(self.recordings, key)
        static_idxs = remove_unaligned_input_idxs(inputs, list(self.static_idxs))  # an unaligned one is copied
        self.static_idxs = OrderedSet(static_idxs)
        static = set(static_idxs)
        buffers = [x.detach() if i in static else static_input(x) if isinstance(x, torch.Tensor) else x
                   for i, x in enumerate(inputs)]
        reference = list(inputs)  # the inputs the recording is made for (the model empties the list it is given)
        stream = _side_stream(self.device_index)
        with torch.flagos.device(self.device_index):
            current = torch.flagos.current_stream(self.device_index)
            stream.wait_stream(current)
            with torch.flagos.stream(stream):
                outputs = self._aligned(reference)(inputs)  # the real run of this call
            current.wait_stream(stream)
            for i, x in enumerate(reference):  # capture runs nothing, but the buffers then hold real values
                if isinstance(x, torch.Tensor) and i not in static:
                    index_expanded_dims_and_copy_(buffers[i], x, get_expanded_dims(x))
            try:
                if self.pool is None:
                    self.pool = torch.flagos.graph_pool_handle()
                graph, graph_outputs = _capture(self.model, list(buffers), stream, self.pool)
            except Exception as error:  # noqa: BLE001 - an operation capture refuses: this graph runs without graphs
                cause = error.__context__ or error  # the error of capture_end hides the refused operation's
                first_line = next(iter(str(cause).strip().splitlines()), "")[:200]
                self._give_up(reference, f"a capture error ({type(cause).__name__}: {first_line})")
                return outputs
        self.recordings[key] = _Recording(graph, reference, buffers, static_idxs, self.mutated_idxs, graph_outputs)
        counters["inductor"][CAPTURES] += 1
        return outputs


def cudagraphify(model: Model, static_input_idxs: Sequence[int] = (), *, device_index: int,
                 mutated_input_idxs: Sequence[int] = (), **_trees_only: Any) -> Model:
    """``compile_fx.cudagraphify`` for a flagos graph: the recordings are made at the first call, per thread.

    The keyword arguments that only the trees read (stack traces, placeholders, constants, forward or backward)
    are accepted and unused.
    """
    per_thread = threading.local()

    def run(inputs: list[Any]) -> Any:
        graphed: GraphedFunction | None = getattr(per_thread, "graphed", None)
        if graphed is None:
            graphed = per_thread.graphed = GraphedFunction(model, inputs, static_input_idxs, mutated_input_idxs,
                                                           device_index)
        return graphed(inputs)

    return run
