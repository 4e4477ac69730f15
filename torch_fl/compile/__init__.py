"""``torch.compile`` on the flagos device.

Importing torch_fl calls ``install``: nothing of dynamo or inductor is imported
then (that would double the cost of ``import torch``); the registration happens
when they are first imported or asked for the device.

* ``device_interface``: dynamo's device interface for ``flagos`` (devices, streams,
  events, synchronize, device properties), registered right after
  ``torch._dynamo.device_interface`` is imported (``post_import``).
* ``inductor_backend``: the code generators inductor reads from ``torch.flagos``,
  by platform: ``host_codegen`` (inductor's C++ backend on host memory) and
  ``cuda_codegen`` (its Triton backend on CUDA memory).
* ``cache_identity``: flagos's part of the keys of inductor's on-disk caches.
* ``cuda_graphs``: which flagos graphs inductor runs through CUDA graphs (``mode="reduce-overhead"``): where
  the platform captures graphs, as it would cuda graphs, through ``graph_replay`` (capture and replay with
  ``torch.flagos`` graphs); elsewhere none, with a note in the log.
* ``cuda_features``: inductor's optimisations that it grants ``cuda`` by name (online softmax, mix-order
  reduction), granted to flagos graphs where their kernels are Triton's.
* ``inductor_names``: replacing one of inductor's functions wherever it was imported.
* ``unsupported``: the inductor modes flagos answers with an error.

``backend="eager"`` and ``"aot_eager"`` need only the device interface.  A
compile failure is PyTorch's own error naming the op; nothing falls back to
eager unless the user sets ``torch._dynamo.config.suppress_errors``.
"""

from __future__ import annotations

from types import ModuleType

from torch_fl.compile import cache_identity, cuda_features, cuda_graphs, inductor_backend, post_import

__all__ = ["install"]


def _register_device_interface(_module: ModuleType) -> None:
    from torch_fl.compile import device_interface

    device_interface.register()


def install(device_module: ModuleType) -> None:
    """Make ``device_module`` (``torch.flagos``) compile: dynamo's device interface once dynamo loads, and
    inductor's code generators as the module's lazy attributes (PEP 562 ``__getattr__``)."""
    existing = device_module.__dict__.get("__getattr__")
    if existing is not None and existing is not inductor_backend.device_module_attribute:
        raise ImportError(f"torch_fl.compile: {device_module.__name__} already defines __getattr__; "
                          "merge it with inductor_backend.device_module_attribute")
    device_module.__getattr__ = inductor_backend.device_module_attribute  # type: ignore[method-assign]
    post_import.after_import("torch._dynamo.device_interface", _register_device_interface)
    post_import.after_import("torch._inductor.codegen.common", cache_identity.wrap_backend_registration)
    post_import.after_import("torch._inductor.cudagraph_utils", cuda_graphs.decide)
    post_import.after_import("torch._inductor.output_code", cuda_graphs.mark_flagos_graphs)
    post_import.after_import("torch._inductor.compile_fx", cuda_graphs.route)
    cuda_features.grant()
