"""The one exception type of torch-fl-publish and its exit codes."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a wheel was refused or did not end up correctly published
EXIT_BAD_INPUT = 2  # unusable input or usage: missing file, bad URL, bad tag, no preflight


class PublishError(Exception):
    """A problem that stops the whole run, printed by ``main`` as one line.

    ``value`` is the offending value (never a secret); ``fix`` says what to do.
    """

    def __init__(self, problem: str, value: str, fix: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(problem, value, fix)
        self.problem = problem
        self.value = value
        self.fix = fix
        self.exit_code = exit_code

    def one_line(self) -> str:
        return f"{self.problem} ({self.value}) — {self.fix}"
