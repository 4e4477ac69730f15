"""Torch is already imported: is the process what the wheel's bundle kind needs?

``import torch_fl`` after ``import torch`` without the startup hook (``python
-S``, ``FLAGOS_NO_STARTUP_HOOK=1``) is too late for the kinds that must act
first; this says so, and why the hook did not act, instead of a crash later.
"""

from __future__ import annotations

import os
import sys

from torch_fl_bootstrap import installed_torch
from torch_fl_bootstrap.errors import BootstrapError
from torch_fl_bootstrap.kinds import policy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from torch_fl_bootstrap.manifest import Manifest


def _mapped() -> set[str]:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return {line.split(None, 5)[5].rstrip("\n") for line in f if line.count(" ") >= 5 and "/" in line}
    except OSError:
        return set()


def check_loaded(pkg: str, manifest: Manifest, earlier: BootstrapError | None) -> None:
    """The bundled libraries must be the ones mapped (and, forked, not the stock ones); raises BootstrapError.

    ``earlier`` is the startup hook's own failure, if it had one: that is the reason then.
    """
    kind = manifest.kind
    bundled = manifest.bundled_files(pkg)
    maps = _mapped()
    if not maps:
        return  # no /proc: nothing to check against
    missing = [path for _, path in bundled if os.path.realpath(path) not in maps]
    stock: list[str] = []
    rules = policy(kind)
    if rules.replaces_torch_libraries:
        torch_dir, _ = installed_torch.find()
        for _, path in bundled:
            candidate = os.path.realpath(os.path.join(torch_dir, "lib", os.path.basename(path)))
            if candidate in maps and candidate != os.path.realpath(path):
                stock.append(candidate)
    # The canaries: a library every program maps once torch is imported (the
    # others of a bundle may load on demand).
    canaries = rules.loaded_canaries
    missing = [p for p in missing if os.path.basename(p) in canaries]
    if not missing and not stock:
        return
    if earlier is not None:
        raise BootstrapError(f"{earlier} (the startup hook failed before torch loaded; torch is now imported "
                             f"without torch_fl's {kind} libraries)") from None
    hook = "the startup hook is off (FLAGOS_NO_STARTUP_HOOK=1)" if os.environ.get("FLAGOS_NO_STARTUP_HOOK") == "1" \
        else "the startup hook did not run (python -S?)" if "_torch_fl_startup" not in sys.modules \
        else "torch was imported before the startup hook was installed"
    what = f"the stock {stock[0]} is mapped" if stock else f"{missing[0]} is not loaded"
    raise BootstrapError(
        f"torch_fl ({kind}) must prepare the process before torch loads its libraries, but torch is already "
        f"imported and {what}: {hook}. Import torch_fl before torch, or start Python without -S and without "
        f"FLAGOS_NO_STARTUP_HOOK=1")
