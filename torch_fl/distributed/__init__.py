"""torch.distributed on the flagos device: the process group backend ``flccl``.

Importing torch_fl registers it, so a training script written for CUDA runs with
``"cuda"`` changed to ``"flagos"``: ``init_process_group()`` without a backend on
a machine with flagos devices, ``init_process_group(backend="cpu:gloo,flagos:flccl")``
and ``DeviceMesh("flagos", ...)`` all get it, and PyTorch's own DDP and FSDP2 run
on it unpatched.  Its collectives run in an existing engine on kernel views of
the flagos tensors (``engines``): gloo on the host platform, NCCL on the cuda
platform.  The C++ side (``csrc/distributed/``) is the backend over the engine
and the DDP reducer timer of the flagos device.
"""

from __future__ import annotations

from torch_fl.distributed.backend import BACKEND_NAME, engine_of, register
from torch_fl.distributed.errors import DistributedError

__all__ = ["BACKEND_NAME", "DistributedError", "engine_of", "register"]
