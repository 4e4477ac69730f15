"""The import orders the bootstrap must support, as scripts run by a venv's interpreter, and what each reports.

Each script defines ``probe()`` (import torch, compute on the flagos device,
read ``/proc/self/maps``), then does its order's imports and prints the JSON
report of the process that did them last (the parent, the spawned child or the
``python -c`` subprocess).  With ``FLAGOS_TEST_PROBE_CUDA=1`` the report also
says whether PyTorch's CUDA kernels and hooks are the real ones.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

PROBE = r'''
import json, os, sys

def probe():
    import torch
    x = torch.ones(2, 3, device="flagos")
    report = {"torch_file": torch.__file__, "sum": (x + x).sum().item(), "device": str(x.device),
              "pid": os.getpid()}
    if os.environ.get("FLAGOS_TEST_PROBE_CUDA") == "1":
        report["cuda_mm"] = torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", "CUDA")
        try:
            torch.ops.aten.empty.memory_format([1], device="cuda")
            report["cuda_empty"] = "created"
        except Exception as exc:
            report["cuda_empty"] = f"{type(exc).__name__}: {exc}"
    report["maps"] = sorted({line.split(None, 5)[5].strip() for line in open("/proc/self/maps")
                             if line.count(" ") >= 5 and ".so" in line})
    return report

def child(queue):
    queue.put(probe())
# -- order
'''

ORDERS = {
    "import torch alone": "print(json.dumps(probe()))",
    "torch_fl then torch": "import torch_fl\nimport torch\nprint(json.dumps(probe()))",
    "torch then torch_fl": "import torch\nimport torch_fl\nprint(json.dumps(probe()))",
    "multiprocessing spawn child": """
if __name__ == "__main__":
    import multiprocessing
    import torch, torch_fl
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    result = queue.get(timeout=300)
    proc.join(60)
    assert result["pid"] != os.getpid()
    print(json.dumps(result))
""",
    # The child is a plain `python -c` that imports only torch (probe() does, nothing else).
    "python -c subprocess importing only torch": """
import subprocess
import torch, torch_fl
code = "import json, sys; exec(open(sys.argv[1]).read().split('# -- order')[0]); print(json.dumps(probe()))"
out = subprocess.run([sys.executable, "-c", code, __file__], capture_output=True, text=True)
assert out.returncode == 0, out.stderr
print(out.stdout.strip().splitlines()[-1])
""",
    "TORCH_DEVICE_BACKEND_AUTOLOAD=0 then import torch_fl": "import torch_fl\nprint(json.dumps(probe()))",
    # Libraries probe for torch long before importing it; the import must still be prepared.
    "find_spec('torch') before import torch": "import importlib.util\nassert importlib.util.find_spec('torch')\n"
                                              "print(json.dumps(probe()))",
}


def run_order(python: Path, order: str, tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    script = tmp_path / "order.py"
    script.write_text(PROBE + ORDERS[order])
    if "AUTOLOAD=0" in order:
        env = {**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    proc = subprocess.run([str(python), str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=600)
    assert proc.returncode == 0, f"{order}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report
