"""``import torch_fl`` without the built extension: say where and what to do, before anything else fails.

Run from a checkout's root, Python imports ``torch_fl`` from the source tree
(the current directory comes first on ``sys.path``), which has no ``_C``: the
build puts it in the installed package.  Without this check the failure is a
bare ``cannot import name '_C'``, and under torch's autoload PyTorch's "Failed
to load the backend extension: torch_fl".  Standard library only: it runs
before the bootstrap and before torch.
"""

from __future__ import annotations

import os
from importlib.util import find_spec


class UnbuiltError(ImportError):
    """torch_fl is imported from a directory that has no built extension; the message names the fix."""


def check(pkg: str) -> None:
    """Raise UnbuiltError when the package at ``pkg`` cannot find its extension ``torch_fl._C``.

    ``find_spec`` and not a look at ``pkg``: an editable install finds ``_C`` in
    its build directory through its own finder.
    """
    if find_spec("torch_fl._C") is not None:
        return
    root = os.path.dirname(pkg)
    if all(os.path.exists(os.path.join(root, marker)) for marker in ("pyproject.toml", "CMakeLists.txt", "csrc")):
        raise UnbuiltError(
            f"torch_fl is imported from its source tree {root}, where its extension torch_fl._C is not built; "
            f"build it (pip install --no-build-isolation -e {root}) or run Python from another directory to "
            f"import the installed torch_fl")
    raise UnbuiltError(f"torch_fl in {pkg} has no extension torch_fl._C (a damaged installation); reinstall it: "
                       f"pip install --force-reinstall --no-deps torch_fl")
