"""Native CUDA results for the GPU tests, computed in a *reference interpreter*.

The GPU tests compare what flagos computes with what PyTorch's own CUDA backend computes.
That native side never runs in the test process:

* on stock torch+cpu with the cuda-assets wheel, torch has no CUDA backend of its own
  (``torch.cuda`` is not compiled: "Torch not compiled with CUDA enabled");
* even in a CUDA build, once flagos (PrivateUse1) is registered, ``at::getAccelerator()`` is
  PrivateUse1 and the autograd engine fails any backward over CUDA tensors with
  ``opt_ready_stream && opt_parent_stream`` (pytorch/pytorch#161129).

So it runs in another interpreter whose torch is a CUDA build and where flagos is never
registered (backend autoload and torch_fl's startup hook off).  Which interpreter:
``FLAGOS_TEST_REFERENCE_PYTHON`` (``tools/gpu-check.sh --reference-python`` sets it), else this
interpreter when its torch is a CUDA build.  Its torch may be another version than the one
under test (the GPU machine's own CUDA torch beside a stock torch+cpu environment).

Use, from a test or fixture (tests/gpu is on sys.path there)::

    import reference

    native = reference.call("gpu_cases:all_results", inputs, "cuda")

``call("module:function", *args)`` imports ``module`` in the reference interpreter (from tests/gpu,
tests/, or a folder given in ``paths=``), calls ``function(*args)`` and returns its result.
Arguments and result travel through ``torch.save``/``torch.load(weights_only=True)``: tensors,
numbers, strings, ``torch.dtype``, ``None``, and lists, tuples and dicts of those.  Make the inputs in
the test process and pass them in, so both sides compute on the same numbers.  Pass ``device``
as an argument: the protocol itself is tested with a CPU reference (tests/gpu/test_reference.py).
``interpreter()`` raises ``Unavailable`` (one line, with the fix) when there is none;
a failing reference call raises ``Failed`` with the end of its stderr.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ENV_VAR = "FLAGOS_TEST_REFERENCE_PYTHON"
# Never register flagos there: no backend autoload, no startup hook (preloading the cuda-assets libraries).
CHILD_ENV = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "FLAGOS_NO_STARTUP_HOOK": "1"}


def child_env() -> dict[str, str]:
    """This process's environment for the reference interpreter, without PYTHONPATH: that names packages of the
    checked environment (another Python, perhaps another version; tools/gpu-check.sh --pytest-path), which would
    shadow the reference interpreter's own (numpy built for 3.11 in a 3.12 interpreter)."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **CHILD_ENV}


class Unavailable(Exception):
    """No usable reference interpreter; the message says which to give."""


class Failed(Exception):
    """The reference interpreter ran but the call failed."""


@functools.lru_cache(maxsize=None)
def probe(python: str) -> dict[str, str | None]:
    """`python`'s torch: {"torch": version, "cuda": its CUDA version or None}."""
    code = "import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda}))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300,
                              env=child_env(), check=False)
    except OSError as e:
        raise Unavailable(f"cannot run the reference interpreter {python} ({e.strerror}) — set {ENV_VAR} to a"
                          " Python with a CUDA build of torch") from e
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Unavailable(f"{python} cannot import torch ({last}) — set {ENV_VAR} to a Python with a CUDA build"
                          " of torch")
    return json.loads(done.stdout.strip().splitlines()[-1])


def interpreter() -> str:
    """The reference interpreter: FLAGOS_TEST_REFERENCE_PYTHON, else this one if its torch is a CUDA build."""
    given = os.environ.get(ENV_VAR)
    if given:
        if probe(given)["cuda"] is None:
            raise Unavailable(f"{ENV_VAR}={given} has torch {probe(given)['torch']}, not a CUDA build — give a"
                              " Python whose torch is one (for example the GPU machine's own)")
        return given
    import torch

    if torch.version.cuda is None:
        raise Unavailable(f"this torch ({torch.__version__}) is not a CUDA build, so native CUDA results need"
                          f" another interpreter — set {ENV_VAR} (tools/gpu-check.sh --reference-python) to a Python"
                          " with a CUDA build of torch")
    return sys.executable


def call(target: str, *args: Any, python: str | None = None, paths: Sequence[Path] = (), timeout: float = 1800) -> Any:
    """`module:function(*args)` run in the reference interpreter (or `python`); its result."""
    import torch

    module, sep, function = target.partition(":")
    if not sep or not module or not function:
        raise ValueError(f"target {target!r} is not module:function")
    exe = python or interpreter()
    with tempfile.TemporaryDirectory(prefix="flagos-reference-") as tmp:
        request, result = Path(tmp) / "request.pt", Path(tmp) / "result.pt"
        search = [str(HERE), str(HERE.parent), *map(str, paths)]
        torch.save({"module": module, "function": function, "args": list(args), "paths": search}, request)
        # From the temporary folder: no source checkout's unbuilt torch_fl on the child's sys.path.
        done = subprocess.run([exe, str(Path(__file__).resolve()), str(request), str(result)], cwd=tmp,
                              env=child_env(), capture_output=True, text=True, timeout=timeout,
                              check=False)
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-6:])
            raise Failed(f"{target} failed in the reference interpreter {exe} (exit {done.returncode}): {tail}")
        return torch.load(result, weights_only=True)


def _serve(request_path: str, result_path: str) -> int:
    """Child side: run the request, save the result."""
    import importlib

    import torch

    request = torch.load(request_path, weights_only=True)
    sys.path[:0] = [p for p in request["paths"] if p not in sys.path]
    fn = getattr(importlib.import_module(request["module"]), request["function"])
    value = fn(*request["args"])
    if "torch_fl" in sys.modules:
        raise RuntimeError("torch_fl was imported in the reference interpreter; its results would not be native")
    torch.save(value, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1], sys.argv[2]))
