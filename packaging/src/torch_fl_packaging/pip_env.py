"""The environment of the pip processes the pipeline starts (the CUDA torch download, the verify target).

The machine's pip configuration (files or ``PIP_*`` variables) may point at a wheelhouse that prefers
+cpu builds or carry constraints; what the pipeline downloads must come from the sources it names.
Only the variables that say *how* to reach an index (certificates, proxy, timeouts) are kept.
"""

from __future__ import annotations

import os

_KEEP = frozenset({"PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_PROXY", "PIP_RETRIES",
                   "PIP_TRUSTED_HOST"})


def isolated_pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in _KEEP}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env
