"""The inductor modes flagos does not support, answered with an error that names the fix."""

from __future__ import annotations

from typing import Any, NoReturn


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
