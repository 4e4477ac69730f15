"""Operators whose FlagGems function has another contract than the aten operator it is registered for.

FlagGems registers a function for an operator's schema, but some of its functions read that schema their own
way.  For those operators flagos either hands the function arguments under which it computes what the operator
means, or leaves the call to the kernel device's own kernel, with the reason (the dispatch log shows it); and
where a result differs from the kernel device's in something other than its values (a dtype), it is made the
kernel device's.  The reference is FlagGems 5.0.2 (``flag_gems/ops/batch_norm.py``); an operator absent here is
called as its schema says.

Why FlagGems' batch norm forward is right under ``flag_gems.use_gems()`` on native CUDA and was wrong on flagos:
PyTorch sends a CUDA batch norm with weight and bias to cuDNN (``_select_batch_norm_backend``,
aten/src/ATen/native/Normalization.cpp), which FlagGems does not register, while a flagos tensor is not
``is_cuda()`` and takes ``native_batch_norm``, FlagGems' function.  docs/flaggems-upstream.md has the defects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Adapter", "adapter_for"]

Arguments = tuple[list[Any], dict[str, Any]]


@dataclass(frozen=True)
class Adapter:
    """How calls of one operator reach its FlagGems function."""

    arguments: Callable[[str, list[Any], dict[str, Any]], Arguments | str]
    """(kernel view device type, the call's kernel-view arguments, keyword arguments) -> the arguments the
    FlagGems function gets (new lists; the given ones stay as they are), or why the kernel device's kernel runs
    the call instead."""
    result: Callable[[str, list[Any], Any], Any] | None = None
    """(kernel view device type, the call's arguments, the FlagGems function's result) -> the operator's result."""


def _batch_norm_arguments(_kernel_type: str, args: list[Any], kwargs: dict[str, Any]) -> Arguments | str:
    # By native_batch_norm's schema: input, weight, bias, running_mean, running_var, training, momentum, eps.
    x, running_mean, running_var, training = args[0], args[3], args[4], args[5]
    if running_mean is not None and running_var is not None:
        return args, kwargs
    if not training:
        return ("in evaluation mode without running statistics FlagGems' batch_norm would read them from the "
                "input")
    # FlagGems' batch_norm stores the running-statistics update of each feature at running_mean[f] and
    # running_var[f] and, given none, at the input's own first elements, before it reads the input again to
    # normalize it: the result and the caller's input would both be wrong.  Scratch statistics take the
    # update, which PyTorch drops when there are no running statistics.
    scratch = torch.zeros(2, x.shape[1], dtype=torch.promote_types(x.dtype, torch.float32), device=x.device)
    given = list(args)
    given[3] = running_mean if running_mean is not None else scratch[0]
    given[4] = running_var if running_var is not None else scratch[1]
    return given, kwargs


def _saved_statistics_dtype(kernel_type: str, x: torch.Tensor) -> torch.dtype | None:
    """The dtype the kernel device's batch norm returns save_mean/save_invstd in, None: the one FlagGems gives."""
    if kernel_type == "cuda":
        # The accumulate type (batch_norm_cuda, aten/src/ATen/native/cuda/Normalization.cu): float32 for
        # float16/bfloat16 inputs; FlagGems allocates them in the input's dtype.
        return torch.promote_types(x.dtype, torch.float32)
    return None


def _batch_norm_result(kernel_type: str, args: list[Any], result: Any) -> Any:
    output, save_mean, save_invstd = result
    dtype = _saved_statistics_dtype(kernel_type, args[0])
    if dtype is None or save_mean.dtype == dtype:
        return result
    return output, save_mean.to(dtype), save_invstd.to(dtype)


def _batch_norm_backward_arguments(_kernel_type: str, args: list[Any], kwargs: dict[str, Any]) -> Arguments | str:
    # By native_batch_norm_backward's schema: grad_out, input, weight, running_mean, running_var, save_mean,
    # save_invstd, train, eps, output_mask.
    train, output_mask = args[7], args[9]
    if not train:
        # The evaluation gradient scales by the running variance; FlagGems' kernel always takes the training
        # formula with save_mean/save_invstd, which its evaluation forward leaves unwritten.
        return ("in evaluation mode FlagGems' batch_norm_backward applies the training formula to statistics "
                "its forward does not write")
    if not output_mask[0]:
        return "FlagGems' batch_norm_backward needs the input gradient to be asked for"
    return args, kwargs


_ADAPTERS: dict[Any, Adapter] = {
    torch.ops.aten.native_batch_norm.default: Adapter(_batch_norm_arguments, _batch_norm_result),
    torch.ops.aten.native_batch_norm_backward.default: Adapter(_batch_norm_backward_arguments),
}


def adapter_for(overload: Any) -> Adapter | None:
    """The adapter of ``torch.ops.aten.<op>.<overload>``, or None: its FlagGems function takes the call as it is."""
    return _ADAPTERS.get(overload)
