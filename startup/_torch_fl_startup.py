"""torch_fl's startup hook: makes the bootstrap run before torch, whatever the program imports first.

The torch_fl wheel installs this module and ``torch_fl_startup.pth`` at the root
of site-packages; the interpreter's ``site`` module runs the ``.pth`` at start-up
(also in multiprocessing children and subprocesses), which imports this module.
It must cost next to nothing there (at most 1 ms on ``python -c pass``:
``benchmarks/import_cost.py``), so it only puts a finder at the front of
``sys.meta_path`` that answers no lookup and does no work until ``torch`` itself
is looked up.  Then it imports the bootstrap (the ``torch_fl_bootstrap``
package, installed beside it by the same wheel) and, for the bundle kinds that
need it, hands back the spec torch is to be imported from.

It lives outside the ``torch_fl`` package, like the bootstrap, because
``torch_fl/__init__.py`` imports torch.  ``FLAGOS_NO_STARTUP_HOOK=1`` turns it off.
"""

import os
import sys


class TorchImportHook:
    """``sys.meta_path`` entry: on a lookup of ``torch``, run torch_fl's bootstrap (its work is done once).

    It answers every lookup of ``torch`` until torch is imported, not only the
    first: ``importlib.util.find_spec("torch")`` (libraries probing whether torch
    is installed) comes before the import and must get the same answer.
    """

    def find_spec(self, fullname, path=None, target=None):
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

    def invalidate_caches(self):
        pass


_hook = None


def install():
    """Put the hook first on sys.meta_path (idempotent); nothing when FLAGOS_NO_STARTUP_HOOK=1 or torch is loaded."""
    global _hook
    if os.environ.get("FLAGOS_NO_STARTUP_HOOK") == "1" or "torch" in sys.modules or _hook is not None:
        return
    _hook = TorchImportHook()
    sys.meta_path.insert(0, _hook)


def uninstall():
    global _hook
    if _hook is not None:
        try:  # noqa: SIM105 - importing contextlib would cost start-up time
            sys.meta_path.remove(_hook)
        except ValueError:
            pass
        _hook = None


install()
