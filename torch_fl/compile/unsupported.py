"""The inductor modes flagos does not support, answered with an error that names the fix."""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["CppWrapperUnsupported", "SchedulingUnavailable", "scheduling_unavailable"]


class CppWrapperUnsupported:
    """Inductor's C++ wrapper (``cpp_wrapper=True``, AOTInductor) for flagos graphs.

    Its generated code creates tensors through AOTInductor's C shim, which knows
    only PyTorch's built-in device types, so the Python wrapper is flagos's only one.
    """

    supports_caching = False

    @staticmethod
    def create(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            "inductor's C++ wrapper does not support the flagos device (AOTInductor's C shim knows only "
            "PyTorch's built-in device types); compile without cpp_wrapper=True / torch._inductor.config.cpp_wrapper")


class SchedulingUnavailable:
    """Inductor's Scheduling where flagos has no kernel backend: creating it raises ``reason``.

    The refusal waits for the moment inductor generates kernels for a flagos node.
    Raised while inductor registers backends, it would be lost: the registration of
    a device module's code generators (``init_backend_registration``) ignores any
    RuntimeError, and inductor would then fail with "Unsupported device type".
    """

    reason = ""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError(self.reason)


def scheduling_unavailable(reason: str) -> type[SchedulingUnavailable]:
    """A SchedulingUnavailable that raises ``reason``."""
    return type("SchedulingUnavailable", (SchedulingUnavailable,), {"reason": reason})
