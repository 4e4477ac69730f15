"""torch_fl: the ``flagos`` device for PyTorch.

Importing this package (or just ``import torch``, through the ``torch.backends``
entry point) registers PyTorch's PrivateUse1 backend as ``flagos``: the C++
plugin, the ``torch.flagos`` device module, the generated tensor/module/storage
methods and the operator routing table.
"""

from __future__ import annotations

import os

# -- bootstrap: before anything imports torch, make sure this is a built torch_fl (not a source
# tree) and prepare the process for this wheel's bundle kind (the torch_fl_bootstrap package, which
# the startup hook may have run already); an ImportError from here names what is missing and the fix.
from torch_fl import _source_tree

_source_tree.check(os.path.dirname(os.path.abspath(__file__)))

import torch_fl_bootstrap  # noqa: E402

torch_fl_bootstrap.ensure(os.path.dirname(os.path.abspath(__file__)))
# -- end bootstrap

from torch_fl import _env  # noqa: E402


def _autoload() -> None:
    """Entry point of ``torch.backends``: PyTorch calls it at ``import torch``.

    Importing this package did the work.  It is defined before ``import torch``
    because importing torch_fl first makes torch's autoload call back into this
    module while it is still initialising.
    """


_env.warn_unknown_variables()

import torch  # noqa: E402  (the environment check must not wait for torch)

__all__ = ["flagos", "get_registered_ops", "is_flaggems_enabled", "provider_for", "route", "build_config"]

_BACKEND = "flagos"


def _claim_privateuse1() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", _BACKEND):
        raise ImportError(
            f"torch_fl cannot register the flagos device: PyTorch's PrivateUse1 backend is already claimed by "
            f"{current!r}; use one device plugin per process (uninstall or stop importing the other one)"
        )


_claim_privateuse1()

from torch_fl import _C  # noqa: E402
from torch_fl import _build_config as build_config  # noqa: E402
from torch_fl import routing  # noqa: E402
from torch_fl.routing import provider_for, route  # noqa: E402

if torch._C._get_privateuse1_backend_name() != _BACKEND:
    torch.utils.rename_privateuse1_backend(_BACKEND)
    from torch_fl import flagos  # noqa: E402

    torch._register_device_module(_BACKEND, flagos)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
else:
    from torch_fl import flagos  # noqa: E402

# A runtime setting it cannot use (FLAGOS_HOST_DEVICES=two) leaves the runtime with no device; the
# runtime raises its message on the first flagos use, and import says it once, here.
_runtime_error = _C._configuration_error()
if _runtime_error:
    _env.warn_setting(f"{_runtime_error}; flagos is unusable in this process")

routing.install_from_env(_C._platform(), log_dispatch=os.environ.get("FLAGOS_LOG_DISPATCH", "0") == "1")

if torch.distributed.is_available():
    from torch_fl import distributed  # noqa: E402

    distributed.register()

from torch_fl.compile import install as _install_compile  # noqa: E402

_install_compile(flagos)  # torch.compile: dynamo's device interface and inductor's backend, registered lazily

from torch_fl import _autograd_exit  # noqa: E402

_autograd_exit.install()


def get_registered_ops() -> list[str]:
    """Operators registered for the flagos key: the native kernels, and on platforms whose kernel results are
    device memory (cuda) the ops routed straight to the kernel device; every other op reaches the routed
    fallback.  ``route(op)`` says which provider runs an op."""
    return sorted(
        op.removeprefix("aten::") for op in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    )


def is_flaggems_enabled() -> bool:
    """Whether FlagGems kernels serve any operator in this process (``route(op).effective == "flaggems"`` for
    those; ``python -m torch_fl.flaggems`` lists them)."""
    return "flaggems" in _C._available_providers()
