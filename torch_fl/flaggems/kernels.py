"""FlagGems functions as flagos kernels: one PrivateUse1 kernel per routed operator, through torch.library.

A kernel maps the flagos tensors among its arguments (also inside lists) to their kernel views
(``_C._kernel_view``: zero-copy tensors of the kernel device type, CUDA on the cuda platform, so FlagGems'
``device.type == "cuda"`` checks pass and its Triton kernels launch on the current CUDA stream, which *is*
the flagos stream), calls the FlagGems function, and maps results back: an in-place or out= result is
the flagos argument it wrote (a resize carried back by ``_C._sync_from_kernel_view``), any other result
is adopted (``_C._adopt_kernel_result``: the kernel's own memory on cuda, no copy).

An operator whose FlagGems function reads its schema another way (adapters.py) has its call adjusted first,
or left to the kernel device's own kernel where FlagGems cannot compute what the operator means.

When FlagGems refuses a call (an exception) the same views go to the kernel device's own kernel, with a
warning once per operator and a line under FLAGOS_LOG_DISPATCH; if that kernel fails too, its error is the
user's (the inputs were invalid), not a FlagGems refusal.  FlagGems functions that call torch ops again get
kernel views, whose ops dispatch to the kernel device's kernels and never back to flagos or to FlagGems
(nothing is registered for the kernel device); a call that re-enters a flagos kernel on the same thread
while FlagGems runs takes the kernel device's kernel directly.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from torch_fl import _C
from torch_fl.flaggems.adapters import adapter_for
from torch_fl.flaggems.op_table import FlagGemsEntry
from torch_fl.flaggems.size_rules import SizeRule, call_size, compile_rules

__all__ = ["FlagGemsWarning", "KernelSet", "OpPlan", "plan_for"]

_Tensor = torch.Tensor
_kernel_view = _C._kernel_view
_adopt = _C._adopt_kernel_result
_sync = _C._sync_from_kernel_view


class FlagGemsWarning(UserWarning):
    """A FlagGems function refused an operator call; the kernel device's own kernel ran it."""


@dataclass(frozen=True)
class OpPlan:
    """What a kernel needs of its operator's schema, read once at registration."""

    name: str
    """``aten::add.Tensor``, as the dispatch log writes it."""
    overload: Any
    """``torch.ops.aten.<op>.<overload>``: the kernel device's own kernel, called on kernel views."""
    written_positions: tuple[int, ...]
    """Positional arguments the op writes to (in-place ``self``)."""
    written_names: tuple[str, ...]
    """Keyword-only arguments the op writes to (``out``)."""
    return_aliases: tuple[int | str | None, ...]
    """Per return: the written argument (position or name) it is, or None for a fresh result."""


def plan_for(op: str) -> OpPlan:
    name, _, overload_name = op.partition(".")
    overload = getattr(getattr(torch.ops.aten, name), overload_name or "default")
    schema = overload._schema
    positions: list[int] = []
    names: list[str] = []
    where_by_set: dict[frozenset[str], int | str] = {}
    for i, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        where: int | str = argument.name if argument.kwarg_only else i
        (names if argument.kwarg_only else positions).append(where)  # type: ignore[arg-type]
        where_by_set[frozenset(info.after_set)] = where
    aliases: list[int | str | None] = []
    for result in schema.returns:
        info = result.alias_info
        aliases.append(where_by_set.get(frozenset(info.after_set)) if info is not None and info.is_write else None)
    return OpPlan(f"aten::{op}", overload, tuple(positions), tuple(names), tuple(aliases))


_depth = _C._flaggems_depth  # FlagGems calls in progress on this thread (shared with the C++ fast path)


def _to_views(values: Iterable[Any], pairs: list[tuple[_Tensor, _Tensor]], kernel_type: str) -> list[Any]:
    out = []
    for a in values:
        if isinstance(a, _Tensor):
            v = _kernel_view(a)
            if v is not a:
                pairs.append((a, v))
            out.append(v)
        elif isinstance(a, (list, tuple)) and any(isinstance(x, _Tensor) for x in a):
            out.append(type(a)(_to_views(a, pairs, kernel_type)))
        elif isinstance(a, torch.device) and a.type == "flagos":
            out.append(torch.device(kernel_type, a.index))
        else:
            out.append(a)
    return out


class _Kernel:
    """The PrivateUse1 kernel of one operator routed to FlagGems."""

    def __init__(self, entry: FlagGemsEntry, plan: OpPlan, fallback: str, kernel_type: str, log_dispatch: bool,
                 warned: set[str], rules: tuple[SizeRule, ...] | None = None) -> None:
        self.function = entry.function
        self.plan = plan
        self.fallback = fallback
        self.kernel_type = kernel_type
        self.log_dispatch = log_dispatch
        self.warned = warned
        self.adapter = adapter_for(plan.overload)
        # The op's size rules, compiled once: dtype -> ((low, high), ...) element-count ranges FlagGems runs.
        self.ranges = None if rules is None else compile_rules(rules)

    def _in_rules(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a call's dtype and size fall in the op's rules (the op is routed with a condition)."""
        dtype, numel = call_size(args, kwargs)
        ranges = self.ranges
        assert ranges is not None
        spans = ranges.get(dtype) or ranges.get(None)
        if spans is None:
            return False
        for low, high in spans:
            if low <= numel < high:
                return True
        return False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pairs: list[tuple[_Tensor, _Tensor]] = []
        vargs = _to_views(args, pairs, self.kernel_type)
        vkwargs = dict(zip(kwargs, _to_views(kwargs.values(), pairs, self.kernel_type))) if kwargs else kwargs
        index = pairs[0][0].get_device() if pairs else _C._current_device()
        for flagos, _ in pairs[1:]:
            if flagos.get_device() != index:
                raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                                   f"flagos:{index} and {flagos.device}!")
        if _depth(0):  # re-entered while FlagGems runs: never FlagGems again
            if self.log_dispatch:
                print(f"[torch_fl] {self.plan.name} -> {self.fallback} (re-entered from flaggems)", file=sys.stderr,
                      flush=True)
            result = self.plan.overload(*vargs, **vkwargs)
        elif self.ranges is not None and not self._in_rules(args, kwargs):
            # The routing's size rule sends this call to the kernel device (calibrated: FlagGems is slower here).
            if self.log_dispatch:
                print(f"[torch_fl] {self.plan.name} -> {self.fallback} (outside its flaggems size rule)",
                      file=sys.stderr, flush=True)
            result = self.plan.overload(*vargs, **vkwargs)
        elif self.kernel_type == "cuda" and not all(view.is_contiguous() for _, view in pairs):
            # FlagGems 5.0.2's mul on Hopper GPUs (runtime/backend/_nvidia/hopper/ops/mul.py, the function its
            # table registers there; flag_gems.ops.mul is the generic one) reads operands of one rank as
            # contiguous buffers: an expanded gradient, strides (0, 0), comes out wrong
            # (docs/flaggems-upstream.md).  Other functions may assume the same, so calls with a non-contiguous
            # operand run on the kernel device's own kernel: slower, never wrong.
            if self.log_dispatch:
                print(f"[torch_fl] {self.plan.name} -> {self.fallback} (non-contiguous operand)", file=sys.stderr,
                      flush=True)
            result = self.plan.overload(*vargs, **vkwargs)
        else:
            result = self._run(vargs, vkwargs)
        plan = self.plan
        for i in plan.written_positions:
            if i < len(args):
                self._sync(args[i], vargs[i])
        for name in plan.written_names:
            if name in kwargs:
                self._sync(kwargs[name], vkwargs[name])
        if isinstance(result, _Tensor):
            return self._result(result, 0, args, kwargs, index)
        if isinstance(result, (tuple, list)):
            return type(result)(self._result(r, k, args, kwargs, index) for k, r in enumerate(result))
        return result

    def _run(self, vargs: list[Any], vkwargs: dict[str, Any]) -> Any:
        adapter = self.adapter
        call = (vargs, vkwargs) if adapter is None else adapter.arguments(self.kernel_type, vargs, vkwargs)
        if isinstance(call, str):  # FlagGems' function cannot compute what the operator means for this call
            if self.log_dispatch:
                print(f"[torch_fl] {self.plan.name} -> {self.fallback} (flaggems cannot serve it: {call})",
                      file=sys.stderr, flush=True)
            return self.plan.overload(*vargs, **vkwargs)
        if self.log_dispatch:
            print(f"[torch_fl] {self.plan.name} -> flaggems", file=sys.stderr, flush=True)
        refused: Exception | None = None
        _depth(1)
        try:
            result = self.function(*call[0], **call[1])
        except Exception as refusal:  # noqa: BLE001 -- any refusal: the kernel device's kernel decides
            refused = refusal
        finally:
            _depth(-1)
        if refused is None:
            return result if adapter is None or adapter.result is None else adapter.result(self.kernel_type, vargs,
                                                                                          result)
        result = self.plan.overload(*vargs, **vkwargs)  # its error, if any, is the user's
        self._report(refused)
        return result

    def _report(self, refusal: Exception, stacklevel: int = 4) -> None:
        """One warning per operator for a refusal (the C++ fast path calls it too, with the stack level of the
        operator's caller there)."""
        name = self.plan.name
        if name in self.warned:
            if self.log_dispatch:
                print(f"[torch_fl] {name} -> {self.fallback} (flaggems refused)", file=sys.stderr, flush=True)
            return
        self.warned.add(name)
        reason = (str(refusal).strip().splitlines() or [""])[0][:200]
        if self.log_dispatch:
            print(f"[torch_fl] {name} -> {self.fallback} (flaggems refused: {type(refusal).__name__}: {reason})",
                  file=sys.stderr, flush=True)
        warnings.warn(f"flagos: FlagGems refused {name} ({type(refusal).__name__}: {reason}); it ran on provider "
                      f"'{self.fallback}' (set FLAGOS_OP_{name.removeprefix('aten::').replace('.', '__')}="
                      f"{self.fallback} to route it there)", FlagGemsWarning,
                      stacklevel=stacklevel)  # the caller of the operator: _report <- _run <- __call__ <- the caller

    @staticmethod
    def _sync(flagos: Any, view: Any) -> None:
        if isinstance(flagos, _Tensor):
            if view is not flagos:
                _sync(flagos, view)
        elif isinstance(flagos, (list, tuple)):
            for f, v in zip(flagos, view):
                if isinstance(f, _Tensor) and v is not f:
                    _sync(f, v)

    def _result(self, r: Any, k: int, args: tuple[Any, ...], kwargs: dict[str, Any], index: int) -> Any:
        if isinstance(r, (list, tuple)):
            return type(r)(self._result(x, -1, args, kwargs, index) for x in r)
        if not isinstance(r, _Tensor):
            return r
        aliases = self.plan.return_aliases
        where = aliases[k] if 0 <= k < len(aliases) else None
        if where is not None:  # in-place / out=: the flagos argument written
            written = args[where] if isinstance(where, int) else kwargs[where]
            if isinstance(written, _Tensor):
                return written
        # A fresh result by its schema: adopted, or copied where the function handed back (a view of) an input.
        return _adopt(r, index)


def own_op_kernel(op: str, fallback: str, kernel_type: str, plain: bool = True) -> Any:
    """A flaggems kernel for ``op`` whose function is the kernel device's own operator, registered until its
    ``close()``: the provider alone, for measuring its cost per call (``plain``: the C++ path, else the Python
    kernel for every call)."""
    plan = plan_for(op)
    library = _C._FlagGemsLibrary()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the note that flagos's own kernel for the op is replaced meanwhile
        library.impl(op, plan.overload if plain else None,
                     _Kernel(FlagGemsEntry(op, plan.overload), plan, fallback, kernel_type, False, set()))
    return library


class KernelSet:
    """The PrivateUse1 kernels of the operators routed to FlagGems, in one torch.library registration."""

    def __init__(self, entries: Iterable[FlagGemsEntry], fallback: str, kernel_type: str, log_dispatch: bool,
                 rules: dict[str, tuple[SizeRule, ...]] | None = None) -> None:
        # Registered in C++ (csrc/python/FlagGemsKernels.cpp): a plain call of an op without an adapter or a
        # size rule runs there, FlagGems' function called once; every other call reaches the _Kernel below.
        self._library: Any = _C._FlagGemsLibrary()
        self.ops: list[str] = []
        self.rules: dict[str, tuple[SizeRule, ...]] = dict(rules or {})
        """Per op routed with a condition: its size rules (the other ops send every call to FlagGems)."""
        self.failed: dict[str, str] = {}
        self.warned: set[str] = set()
        with warnings.catch_warnings():
            # Replacing flagos's own kernel for the op (the kernel-device route) is the point.
            warnings.filterwarnings("ignore", message="Warning only once for all operators")
            for entry in entries:
                try:
                    kernel = _Kernel(entry, plan_for(entry.op), fallback, kernel_type, log_dispatch, self.warned,
                                     self.rules.get(entry.op))
                    plain = kernel.adapter is None and kernel.ranges is None and not log_dispatch
                    self._library.impl(entry.op, entry.function if plain else None, kernel)
                except Exception as e:  # noqa: BLE001 -- the op is left to its route's fallback, named
                    self.failed[entry.op] = f"{type(e).__name__}: {e}"
                else:
                    self.ops.append(entry.op)

    def close(self) -> None:
        """Unregisters the kernels: flagos's own kernels for these ops come back."""
        if self._library is not None:
            self._library.close()
            self._library = None

