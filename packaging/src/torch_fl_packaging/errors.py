"""The pipeline's error types, one per area, and the exit codes.

Every error carries what is wrong (``problem``), the offending value and the fix;
``main`` catches them all in one place and prints one line:
``problem (value) — fix``.  Exit codes are defined here and nowhere else.
"""

from __future__ import annotations

EXIT_OK = 0
#: A stage ran and found the result wrong (a check failed).
EXIT_CHECK_FAILED = 1
#: The input is unusable (bad recipe, platform, SDK, vendor torch, missing tool);
#: raised before anything is compiled.
EXIT_BAD_INPUT = 2


class PipelineError(Exception):
    """Base of every error torch-fl-build reports to the user."""

    exit_code = EXIT_CHECK_FAILED

    def __init__(self, problem: str, value: object = None, fix: str = "") -> None:
        self.problem = problem
        self.value = value
        self.fix = fix
        super().__init__(self.line())

    def line(self) -> str:
        text = self.problem
        if self.value is not None:
            text += f" ({self.value})"
        if self.fix:
            text += f" — {self.fix}"
        return text


class RecipeError(PipelineError):
    """A recipe in bundlers/ is missing, malformed or names an unknown key."""

    exit_code = EXIT_BAD_INPUT


class ConfigureError(PipelineError):
    """The platform, torch, SDK or vendor torch cannot be resolved."""

    exit_code = EXIT_BAD_INPUT


class ToolError(PipelineError):
    """A required external tool (patchelf, pip) is missing or too old."""

    exit_code = EXIT_BAD_INPUT


class BuildError(PipelineError):
    """The PEP 517 build of the plugin failed or produced an unexpected wheel."""


class BundleError(PipelineError):
    """A library the recipe names cannot be found or placed."""


class ElfPatchError(PipelineError):
    """Conflicting ELF edits were queued, or patchelf failed on a file."""


class RepairError(PipelineError):
    """A dependency could not be grafted or the wheel has no manylinux tag."""


class ManifestError(PipelineError):
    """compatibility.json could not be written or is not schema-valid."""


class WheelWriteError(PipelineError):
    """The final wheel could not be written."""


class VerifyError(PipelineError):
    """The final wheel failed verification."""


class TargetError(PipelineError):
    """The target verify proves the wheel against cannot be made (its requirements cannot be had)."""

    exit_code = EXIT_BAD_INPUT
