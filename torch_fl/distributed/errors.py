"""The exception type of torch_fl's distributed area."""

from __future__ import annotations


class DistributedError(RuntimeError):
    """A process group for flagos that cannot be made: one line, what is wrong and what to change."""
