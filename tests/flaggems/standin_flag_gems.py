"""A stand-in for the ``flag_gems`` package on the host platform, written by the tests as ``flag_gems/__init__.py``.

It has the shape of the real package's API (FlagGems 5.0.2): ``__version__``, ``device``, an operator table
of ``(aten op, function)`` pairs and ``enable(lib=..., unused=...)`` registering them for its device's
dispatch key.  Its functions compute with torch on the tensors they get (CPU kernel views on the host
platform) and check their device like FlagGems' ``device.type == "cuda"`` checks; they record each call
in ``calls`` (name, the tensors' device types), so tests can see what ran where; ``mul`` reads its inputs
by address and strides, as FlagGems' kernels do.  Some of them behave
like the failures the provider must survive: one always refuses, one calls torch again, one returns its
input for a functional op, and the table holds factories, random ops, a decomposing op and an entry
without a function, which flagos must not route.

Three exist for calibration (``python -m torch_fl.flaggems calibrate``), their speed made deterministic by
sleeping rather than measured luck: ``sqrt`` is wrong (off by 0.25), ``tanh`` is slower (20 ms a call, far
above the CPU's), and ``sinh`` is faster only from a size: it costs 20 ms a call while the kernel device's own
``sinh`` here costs 10 us per element (this module replaces the CPU kernel of ``aten::sinh`` with one that
sleeps so, standing in for a kernel device whose kernel is slow per element), so FlagGems wins from about
2000 elements and loses below.  The margins are wide enough for a loaded machine's scheduling delays.
"""

from __future__ import annotations

import ctypes
import time
import warnings
from typing import Any

import torch

__version__ = "5.0.2+standin"
device = "cpu"
vendor_name = "standin"
calls: list[tuple[str, tuple[str, ...]]] = []
#: The strides of ``mul``'s tensor arguments, per call.
strides: list[tuple[tuple[int, ...], ...]] = []
#: A flagos tensor that ``mul`` multiplies first when set: a FlagGems function reaching flagos again.
reenter: torch.Tensor | None = None


def _check(name: str, *tensors: torch.Tensor) -> None:
    types = tuple(t.device.type for t in tensors if isinstance(t, torch.Tensor))
    calls.append((name, types))
    if any(t != device for t in types):  # FlagGems' own refusal of other devices' tensors
        raise AssertionError(f"{name}: tensors must be {device} tensors, got {types}")


def add(a: torch.Tensor, b: Any, *, alpha: Any = 1) -> torch.Tensor:
    _check("add", a, b)
    return torch.add(a, b, alpha=alpha)  # calls torch again, on the views


def add_(a: torch.Tensor, b: Any, *, alpha: Any = 1) -> torch.Tensor:
    _check("add_", a, b)
    return a.add_(b, alpha=alpha)


def _by_address(t: Any) -> Any:
    """``t`` as FlagGems' Triton kernels read it (its ``StridedBuffer``): the memory at ``t.data_ptr()``,
    walked by ``t``'s sizes and strides; nothing else of the tensor object is used."""
    if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.numel() == 0:
        return t  # scalars (CPU wrapped numbers among them) are passed as values
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    memory = (ctypes.c_char * (extent * t.element_size())).from_address(t.data_ptr())
    return torch.frombuffer(memory, dtype=t.dtype).as_strided(t.shape, t.stride())


def mul(a: torch.Tensor, b: Any) -> torch.Tensor:
    _check("mul", a, b)
    strides.append(tuple(t.stride() for t in (a, b) if isinstance(t, torch.Tensor)))
    if reenter is not None:
        torch.mul(reenter, reenter)
    return torch.mul(_by_address(a), _by_address(b))


def mm_out(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    _check("mm_out", a, b, out)
    return torch.mm(a, b, out=out)  # resizes an `out` of the wrong size


def softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    _check("softmax", x)
    shifted = x - x.amax(dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim, keepdim=True)


def gelu(x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    _check("gelu", x)
    return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))


def gelu_backward(grad: torch.Tensor, x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    _check("gelu_backward", grad, x)
    cdf = 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))
    pdf = torch.exp(-0.5 * x * x) * 0.3989422804014327
    return grad * (cdf + x * pdf)


def cat(tensors: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
    _check("cat", *tensors)
    return torch.cat(tensors, dim)


def max_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    _check("max_dim", x)
    return torch.max(x, dim, keepdim)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    calls.append(("sigmoid", (x.device.type,)))
    raise NotImplementedError("sigmoid: this stand-in has no kernel for it")


def alias_copy(x: torch.Tensor) -> torch.Tensor:
    _check("alias_copy", x)
    return x  # a functional op that hands back its input


def sqrt(x: torch.Tensor) -> torch.Tensor:
    _check("sqrt", x)
    return torch.sqrt(x) + 0.25  # wrong


def tanh(x: torch.Tensor) -> torch.Tensor:
    _check("tanh", x)
    time.sleep(0.02)  # slower than the CPU's tanh at every size calibration uses
    return torch.tanh(x)


def _sinh(x: torch.Tensor) -> torch.Tensor:
    return (torch.exp(x) - torch.exp(-x)) / 2


def sinh(x: torch.Tensor) -> torch.Tensor:
    _check("sinh", x)
    time.sleep(0.02)  # a fixed cost per call, as a launch's
    return _sinh(x)


def _slow_cpu_sinh(x: torch.Tensor) -> torch.Tensor:
    """The kernel device's own sinh in this stand-in's world: 10 us per element."""
    time.sleep(x.numel() * 1e-5)
    return _sinh(x)


_cpu = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Warning only once for all operators")
    _cpu.impl("sinh", _slow_cpu_sinh, "CPU")


def zeros(*args: Any, **kwargs: Any) -> torch.Tensor:
    raise AssertionError("a factory must not be routed to the stand-in")


def rand_like(*args: Any, **kwargs: Any) -> torch.Tensor:
    raise AssertionError("a random op must not be routed to the stand-in")


def to_copy(*args: Any, **kwargs: Any) -> torch.Tensor:
    raise AssertionError("an op that chooses its result's device must not be routed to the stand-in")


def true_divide(a: torch.Tensor, b: Any) -> torch.Tensor:
    raise AssertionError("a decomposing op must not be routed to the stand-in")


_FULL_CONFIG: tuple[tuple[Any, ...], ...] = (
    ("add.Tensor", add),
    ("add_.Tensor", add_),
    ("mul.Tensor", mul),
    ("mm.out", mm_out),
    ("_softmax", softmax),
    ("gelu", gelu),
    ("gelu_backward", gelu_backward),
    ("cat", cat),
    ("max.dim", max_dim),
    ("sigmoid", sigmoid),
    ("alias_copy", alias_copy),
    ("sqrt", sqrt),
    ("tanh", tanh),
    ("sinh", sinh),
    ("zeros", zeros),
    ("rand_like", rand_like),
    ("_to_copy", to_copy),
    ("divide.Tensor", true_divide),
    ("abs", None),
    ("exp", torch.exp, lambda: False),  # a version condition that does not hold: never registered
)


def enable(lib: Any = None, unused: Any = None, registrar: Any = None, record: bool = False, once: bool = False,
           path: Any = None) -> None:
    """Registers every operator of the table whose condition holds for ``device``'s dispatch key, as FlagGems does."""
    excluded = set(unused or [])
    for item in _FULL_CONFIG:
        name, fn = item[0], item[1]
        if len(item) > 2 and not item[2]():
            continue
        if getattr(fn, "__name__", None) in excluded:
            continue
        lib.impl(name, fn, device.upper())
