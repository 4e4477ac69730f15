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

``batch_norm`` and ``batch_norm_backward`` follow FlagGems 5.0.2's (ops/batch_norm.py) to the letter of what
they compute and write: the forward keeps running statistics in the *input* when it gets none (training on
``F.batch_norm(x, None, None, ...)``), one feature after the other as its Triton programs do, and in evaluation
leaves ``save_mean``/``save_invstd`` unwritten; the backward applies the training formula whatever ``train`` says
and needs an input gradient to write.

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


def _memory(t: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n`` elements from ``t.data_ptr()`` on, as a Triton kernel addresses ``pointer + feature``."""
    memory = (ctypes.c_char * (n * t.element_size())).from_address(t.data_ptr())
    return torch.frombuffer(memory, dtype=t.dtype)


def _as_3d(t: torch.Tensor) -> torch.Tensor:
    """FlagGems' make_3d_for_bn: (batch, feature, spatial)."""
    if t.dim() == 2:
        return t.unsqueeze(-1)
    return t.flatten(2, -1) if t.dim() >= 4 else t


def batch_norm(input: torch.Tensor, weight: Any = None, bias: Any = None, running_mean: Any = None,
               running_var: Any = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-05) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check("batch_norm", input, weight, bias, running_mean, running_var)
    x = _as_3d(input)
    batch, features, spatial = x.shape
    output = torch.empty_like(x)
    mean = torch.empty(features, dtype=input.dtype)  # written in training only, as FlagGems' kernel does
    inv_std = torch.empty(features, dtype=input.dtype)
    running_mean = input if running_mean is None else running_mean  # FlagGems' own substitution
    running_var = input if running_var is None else running_var
    stored_mean, stored_var = _memory(running_mean, features), _memory(running_var, features)
    data = _by_address(x)  # read again for every feature: whatever was stored meanwhile is what is read
    n = batch * spatial
    for f in range(features):  # one Triton program per feature: statistics, their store, then the output
        if training:
            var, m = torch.var_mean(data[:, f].float(), unbiased=False)
            inv = torch.rsqrt(var + eps)
            mean[f], inv_std[f] = m, inv
            stored_mean[f] = (1 - momentum) * stored_mean[f] + momentum * m
            stored_var[f] = (1 - momentum) * stored_var[f] + momentum * var * n / (n - 1)
        else:
            m, inv = stored_mean[f].float(), torch.rsqrt(stored_var[f].float() + eps)
        w = 1.0 if weight is None else weight[f].float()
        b = 0.0 if bias is None else bias[f].float()
        output[:, f] = w * (data[:, f].float() - m) * inv + b
    return output.view_as(input), mean, inv_std


def batch_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, weight: Any = None, running_mean: Any = None,
                        running_var: Any = None, save_mean: Any = None, save_invstd: Any = None, train: bool = False,
                        eps: float = 1e-05, output_mask: Any = None) -> tuple[Any, Any, Any]:
    _check("batch_norm_backward", grad_out, input, weight, running_mean, running_var, save_mean, save_invstd)
    x, dy = _as_3d(input).float(), _as_3d(grad_out).float()
    batch, features, spatial = x.shape
    input_grad = torch.empty_like(x) if output_mask[0] else None
    input_grad.stride()  # FlagGems hands *input_grad.stride() to its kernel whatever output_mask says
    # The training formula from save_mean and save_invstd, whatever `train` says.
    mean, inv_std = save_mean.float()[None, :, None], save_invstd.float()[None, :, None]
    x_hat = (x - mean) * inv_std
    term1, term2 = (x_hat * dy).sum((0, 2)), dy.sum((0, 2))
    w = torch.ones(features) if weight is None else weight.float()
    input_grad = inv_std * w[None, :, None] * (dy - (term1[None, :, None] * x_hat + term2[None, :, None]) /
                                               (batch * spatial))
    weight_grad = term1.to(input.dtype) if output_mask[1] else None
    bias_grad = term2.to(input.dtype) if output_mask[2] else None
    return input_grad.to(input.dtype).view_as(input), weight_grad, bias_grad


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
    ("native_batch_norm", batch_norm),
    ("native_batch_norm_backward", batch_norm_backward),
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
