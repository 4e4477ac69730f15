"""The bootstrap's one error type and its one warning type."""

from __future__ import annotations


class BootstrapError(ImportError):
    """The process cannot be prepared for torch_fl; the message names what is missing and the fix.

    An ImportError: it surfaces from ``import torch_fl`` (or torch's autoload of it).
    """


class BootstrapWarning(UserWarning):
    """The bootstrap chose a safe fallback instead of what the environment asked for; the message says why."""
