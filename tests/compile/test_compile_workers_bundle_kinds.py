"""Inductor's compile workers with each bundle kind that runs on this machine, from a real installed wheel.

Inductor compiles kernels in a pool of subprocesses (``TORCHINDUCTOR_WORKER_START=subprocess``:
a sidecar interpreter and its workers) that start from ``import torch`` like any
interpreter, so whatever a bundle kind must do before torch loads must happen there
too.  Each wheel is installed in a fresh stock-torch venv (the bootstrap tests'
fixtures, tests/support/bootstrap_fixtures.py); a graph is compiled on flagos with a cold
inductor cache so its C++ kernel goes to the pool; every pool process must map the
wheel's own libraries (for ``forked-libtorch``: its bundled core libraries, never the
stock copies in torch/lib).  ``cuda-assets`` needs a GPU machine (its workers
compile Triton kernels there: tests/gpu/test_compile_cuda.py); ``native-sdk`` needs
a vendor SDK; ``none`` has nothing to load before torch.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from compile_support import COMPILE_IN_THE_POOL
from support.bootstrap import Venv

pytestmark = [pytest.mark.wheel, pytest.mark.compile, pytest.mark.slow]

_COMPILE_IN_THE_POOL = "import json, os, sys\n" + COMPILE_IN_THE_POOL + textwrap.dedent("""

    def tree(pid):
        children = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
        return [pid] + [p for c in children for p in tree(c)]

    def libraries(pid):
        with open(f"/proc/{pid}/maps") as f:
            return sorted({os.path.realpath(line.split()[-1]) for line in f if line.rstrip().endswith(".so")
                           or ".so." in line})

    sidecar = AsyncCompile.process_pool().process.pid
    print(json.dumps({"device": out.device.type, "pool": {p: libraries(p) for p in tree(sidecar)}}))
""")


@pytest.mark.parametrize("kind", ["host", "host-forked"])
def test_compile_workers_load_the_bundle(make_venv: object, kind: str, tmp_path: Path) -> None:
    venv: Venv = make_venv(kind)  # type: ignore[operator]
    env = venv.env(TORCHINDUCTOR_COMPILE_THREADS="2", TORCHINDUCTOR_WORKER_START="subprocess",
                   TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PYTHONWARNINGS="ignore::DeprecationWarning")
    result = json.loads(venv.run(_COMPILE_IN_THE_POOL, env=env, cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert result["device"] == "flagos"
    assert list((tmp_path / "inductor").rglob("*.so")), "no kernel was compiled"
    pool = result["pool"]
    assert len(pool) >= 2, f"the pool has no workers: {pool}"  # the sidecar and at least one worker
    if kind == "host":
        expected = [os.path.realpath(venv.site / "torch_fl" / "lib" / "libflagos_hostrt.so")]
    else:
        expected = [os.path.realpath(lib) for lib in venv.bundled() if lib.name.startswith("libtorch_cpu")]
        assert expected, "the forked wheel bundles no libtorch_cpu"
    stock = os.path.realpath(venv.site / "torch" / "lib" / "libtorch_cpu.so")
    for pid, mapped in pool.items():
        for lib in expected:
            assert lib in mapped, f"pool process {pid} does not map {lib}"
        if kind != "host":
            assert stock not in mapped, f"pool process {pid} maps the stock {stock}"
