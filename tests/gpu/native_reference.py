"""Computes the native-cuda references of the GPU suite into a file (see gpu_cases.py).

    TORCH_DEVICE_BACKEND_AUTOLOAD=0 FLAGOS_NO_STARTUP_HOOK=1 python native_reference.py OUT.pt
"""

from __future__ import annotations

import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path[:0] = [str(here), str(here.parent)]

import torch  # noqa: E402
from gpu_cases import all_references  # noqa: E402

if __name__ == "__main__":
    assert "torch_fl" not in sys.modules, "the reference process must not register flagos"
    torch.save(all_references("cuda"), sys.argv[1])
