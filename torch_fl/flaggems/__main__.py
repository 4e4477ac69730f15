"""``python -m torch_fl.flaggems``: the flaggems provider of this process (routing from the environment) as JSON."""

from __future__ import annotations

import json

import torch_fl  # noqa: F401  (installs the routing table, and with it the provider)
from torch_fl.flaggems import status

print(json.dumps({"version": 1, **status()}, indent=1))
