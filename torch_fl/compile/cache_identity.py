"""What torch_fl adds to the keys of inductor's caches: the flagos platform and its code generators.

Inductor caches compiled graphs on disk (the FX graph and AOTAutograd caches,
under ``TORCHINDUCTOR_CACHE_DIR``), keyed by the graph, torch's own sources and
inductor's configuration.  Nothing in that key says what flagos's code generators
are: a host-platform and a cuda-platform torch_fl on the same torch would share
entries (C++ kernels for host memory handed CUDA pointers), and an upgraded
torch_fl would run kernels its predecessor generated.  Inductor's documented slot
for a backend's part of the key is a custom backend pass per device
(``codegen.common.custom_backend_passes``, hashed by ``FxGraphHashDetails``
through ``CustomGraphModulePass.uuid``).  The registration of the device module's
code generators (``init_backend_registration``) fills that slot with ``None``, so
``init_backend_registration`` is wrapped, as soon as its module is imported and
before any importer binds the name, to put flagos's identity back after it runs.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from torch_fl import _C

__all__ = ["identity", "wrap_backend_registration"]

_DEVICE = "flagos"


@functools.cache
def identity() -> str:
    """The platform, the torch_fl version and a hash of the sources of its inductor wiring."""
    try:
        version = importlib.metadata.version("torch_fl")
    except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path: the sources' hash says enough
        version = "source"
    digest = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return f"torch_fl {version} {_C._platform()} {digest.hexdigest()[:16]}"


@functools.cache
def _pass() -> Any:
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    class CodegenIdentity(CustomGraphModulePass):
        """Changes no graph; its uuid is flagos's part of the cache key."""

        def __call__(self, gm: Any) -> None:
            return None

        def uuid(self) -> str:
            return identity()

    return CodegenIdentity()


def wrap_backend_registration(common: ModuleType) -> None:
    """Make ``common.init_backend_registration`` leave flagos's identity in ``custom_backend_passes``."""
    original: Callable[[], None] = common.init_backend_registration

    @functools.wraps(original)
    def init_backend_registration() -> None:
        original()
        if common.custom_backend_passes.get(_DEVICE) is None and common.get_scheduling_for_device(_DEVICE):
            common.custom_backend_passes[_DEVICE] = _pass()

    common.init_backend_registration = init_backend_registration  # type: ignore[attr-defined]
