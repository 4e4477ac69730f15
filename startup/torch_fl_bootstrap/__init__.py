"""torch_fl's bootstrap: prepare the process for the installed wheel's bundle kind before PyTorch loads.

Standard library only, and never ``import torch``: it runs *before* torch,
either from the startup hook (``_torch_fl_startup``, imported by
``torch_fl_startup.pth`` at interpreter start, which calls ``on_torch_import``
when ``torch`` is about to be imported) or from ``torch_fl/__init__.py``
(``ensure``, its first step).  It is a package of its own beside ``torch_fl``
in the same wheel because ``torch_fl/__init__.py`` imports torch.

What it does is read from the wheel's ``torch_fl/compatibility.json``
(``manifest.py``, ``bundle.kind``) and the kind's rules (``kinds.py``, the copy
of preflight's policy table), one module per job, imported only where the
kind's policy asks for it:

``cuda-assets`` (``cuda_assets.py``)
    Preload the bundled CUDA pieces of libtorch and what they need, globally.
``forked-libtorch`` (``forked_libtorch.py``, its cache rules in ``cache.py``)
    Import torch from a private view whose ``torch/lib`` holds the vendor's
    core libraries; the installed torch is never written.
``native-sdk`` (``native_sdk.py``)
    Check the vendor runtime directories; load a moved SDK's libraries.
``in-wheel-runtime``, ``none``
    Nothing.

When torch is already imported, ``after_torch.py`` says whether it is too late.
"""

from __future__ import annotations

import sys

from torch_fl_bootstrap import manifest as _manifest
from torch_fl_bootstrap.errors import BootstrapError, BootstrapWarning
from torch_fl_bootstrap.kinds import policy as _policy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

    from torch_fl_bootstrap.manifest import Manifest

__all__ = ["BootstrapError", "BootstrapWarning", "ensure", "on_torch_import"]

# Per package directory: the outcome of the work done before torch (the startup
# hook and ``ensure`` may both ask; the work runs once).
_done: dict[str, str | None] = {}  # package dir -> the view entry (forked-libtorch) or None
_errors: dict[str, BootstrapError] = {}


def _prepare_before_torch(pkg: str, manifest: Manifest) -> str | None:
    """The kind's work before torch loads, once; returns the view torch must be imported from, or None."""
    if pkg not in _done:
        rules = _policy(manifest.kind)
        if rules.global_preload:
            from torch_fl_bootstrap import cuda_assets

            cuda_assets.preload(pkg, manifest)
            _done[pkg] = None
        elif rules.replaces_torch_libraries:
            from torch_fl_bootstrap import forked_libtorch

            _done[pkg] = forked_libtorch.view_of_torch(pkg, manifest)
    return _done.get(pkg)


def on_torch_import(pkg: str) -> ModuleSpec | None:
    """The startup hook's call, as ``torch`` is about to be imported: the spec to import it from, or None.

    ``pkg`` is the installed ``torch_fl`` package directory.  Never raises:
    ``import torch`` must not fail because of torch_fl's hook.  A failure is
    kept and reported by ``import torch_fl`` (torch's autoload).
    """
    if pkg in _errors:
        return None
    try:
        manifest = _manifest.load(pkg)
        if manifest is None or not _policy(manifest.kind).loads_before_torch:
            return None
        entry = _prepare_before_torch(pkg, manifest)
        if entry is None:
            return None
        from torch_fl_bootstrap.forked_libtorch import torch_spec_from

        return torch_spec_from(entry)
    except BootstrapError as exc:
        _errors[pkg] = exc
    except Exception as exc:  # noqa: BLE001 - the hook must never break `import torch`
        _errors[pkg] = BootstrapError(f"torch_fl's bootstrap failed unexpectedly: {exc!r}; turn the startup hook "
                                      f"off with FLAGOS_NO_STARTUP_HOOK=1 and report this")
    return None


def ensure(pkg: str) -> None:
    """``import torch_fl``'s first step for the package directory ``pkg``; raises BootstrapError naming the fix."""
    manifest = _manifest.load(pkg)
    if manifest is None:
        return
    rules = _policy(manifest.kind)
    if rules.checks_runtime_at_import:
        from torch_fl_bootstrap import native_sdk

        native_sdk.check(manifest)
        return
    if not rules.loads_before_torch:
        return
    if "torch" in sys.modules:
        from torch_fl_bootstrap import after_torch

        after_torch.check_loaded(pkg, manifest, _errors.get(pkg))
        return
    if pkg in _errors:
        raise _errors[pkg]
    entry = _prepare_before_torch(pkg, manifest)
    if entry is not None:
        from torch_fl_bootstrap.forked_libtorch import ViewFinder

        if not any(isinstance(f, ViewFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, ViewFinder(entry))
