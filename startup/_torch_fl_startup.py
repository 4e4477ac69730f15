"""torch_fl's startup hook: makes the bootstrap run before torch, whatever the program imports first.

The torch_fl wheel installs this module and ``torch_fl_startup.pth`` at the root
of site-packages; the interpreter's ``site`` module runs the ``.pth`` at start-up
(also in multiprocessing children and subprocesses), which imports this module.
It must cost next to nothing there (at most 1 ms on ``python -c pass``:
``benchmarks/packaging/import_cost.py``), so it only puts a finder at the front of
``sys.meta_path`` that answers no lookup and does no work until ``torch`` itself
is looked up.  Then it imports the bootstrap (the ``torch_fl_bootstrap``
package, installed beside it by the same wheel) and, for the bundle kinds that
need it, hands back the spec torch is to be imported from.

It lives outside the ``torch_fl`` package, like the bootstrap, because
``torch_fl/__init__.py`` imports torch.  ``FLAGOS_NO_STARTUP_HOOK=1`` turns it off.
"""

# ruff: noqa: INP001 - a top-level module of site-packages by design (the .pth imports it by this name)

import os
import sys

# typing costs milliseconds, and this module is imported by every interpreter start:
# the annotations that need names are strings, checked by mypy only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec


class TorchImportHook:
    """``sys.meta_path`` entry: on a lookup of ``torch``, run torch_fl's bootstrap (its work is done once).

    It answers every lookup of ``torch`` until torch is imported, not only the
    first: ``importlib.util.find_spec("torch")`` (libraries probing whether torch
    is installed) comes before the import and must get the same answer.
    """

    def find_spec(self, fullname: str, path: object = None,  # noqa: ARG002 - the finder protocol's signature
                  target: object = None) -> "ModuleSpec | None":  # noqa: ARG002
        if fullname != "torch":
            return None
        # The torch_fl package installed beside this module (the same wheel).
        pkg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_fl")
        if not os.path.isfile(os.path.join(pkg, "compatibility.json")):
            return None  # a development build: nothing to prepare
        try:
            import torch_fl_bootstrap
        except ImportError:
            return None  # a damaged installation: `import torch_fl` imports it too and says what is missing
        return torch_fl_bootstrap.on_torch_import(pkg)

    def invalidate_caches(self) -> None:
        pass


_hook = None


def install() -> None:
    """Put the hook first on sys.meta_path (idempotent); nothing when FLAGOS_NO_STARTUP_HOOK=1 or torch is loaded."""
    global _hook  # noqa: PLW0603 - the one hook of this interpreter, installed once
    if os.environ.get("FLAGOS_NO_STARTUP_HOOK") == "1" or "torch" in sys.modules or _hook is not None:
        return
    _hook = TorchImportHook()
    sys.meta_path.insert(0, _hook)


def uninstall() -> None:
    global _hook  # noqa: PLW0603 - the one hook of this interpreter, installed once
    if _hook is not None:
        try:  # noqa: SIM105 - importing contextlib would cost start-up time
            sys.meta_path.remove(_hook)
        except ValueError:
            pass
        _hook = None


install()
