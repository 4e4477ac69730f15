"""One exception type per area; main() catches PreflightError and prints `what (value) — fix`.

Every one of these means the input cannot be checked at all (exit 2). A check that runs and finds a
problem is not an exception: it is a failed Finding (exit 1).
"""

from __future__ import annotations


class PreflightError(Exception):
    """Base: `message` names what is wrong with the offending value, `fix` says what to do."""

    area = "preflight"

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def one_line(self) -> str:
        return f"{self.area}: {self.message} — {self.fix}"


class UsageError(PreflightError):
    area = "usage"


class WheelError(PreflightError):
    area = "wheel"


class ManifestError(PreflightError):
    area = "manifest"


class ElfError(PreflightError):
    area = "elf"


class HostProbeError(PreflightError):
    area = "host"
