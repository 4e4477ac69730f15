"""Provider ``flaggems``: FlagGems' kernels (Triton on the cuda platform) for the operators routed to it.

* ``op_table``: the installed flag_gems' own operator table, and which of its operators flagos routes;
* ``kernels``: one PrivateUse1 kernel per routed operator (kernel views in, adopted results out, the kernel
  device's own kernel when FlagGems refuses);
* ``provider``: the table and kernels of this process, installed by ``torch_fl.routing``.

``python -m torch_fl.flaggems`` prints what the provider does in this process as JSON.
"""

from __future__ import annotations

from torch_fl.flaggems.provider import status, table

__all__ = ["status", "table"]
