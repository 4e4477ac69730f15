"""The bundle kinds and their rules: one policy table (docs/architecture.md, "Bundle kinds").

Every rule that depends on a wheel's bundle kind is a field of its ``KindPolicy``
here; code elsewhere asks the policy (``policy(kind).pins_torch``), never compares
kind names.  Standard library only: the table is read by preflight (the one
definition of a valid wheel), by packaging (which imports preflight) and by the
bootstrap that runs before torch.

This file exists twice, byte for byte: ``preflight/src/torch_fl_preflight/kinds.py``
is the table, ``startup/torch_fl_bootstrap/kinds.py`` the bootstrap's copy (the
wheel carries no preflight); ``tests/bootstrap/test_kinds_copy.py`` holds them equal.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KINDS", "LIBRARY_SOURCES", "NOTHING_BUNDLED", "KindPolicy", "policy"]

#: Where a kind's bundled libraries come from: the plugin build itself, the CUDA torch wheel of the
#: installed torch's version, or a vendor's torch (its fork of libtorch).
LIBRARY_SOURCES = ("build", "cuda-torch", "vendor-torch")


@dataclass(frozen=True)
class KindPolicy:
    """What one bundle kind means, for building, checking and loading a wheel of that kind."""

    name: str
    """The kind's name, as recipes and ``compatibility.json`` (``bundle.kind``) spell it."""
    summary: str
    """One line: what is in the wheel and how it loads."""
    library_source: str | None
    """Where the bundled libraries come from (one of LIBRARY_SOURCES); None: the kind bundles nothing."""
    pins_torch: bool
    """The torch requirement is exact (``torch==X.Y.Z``): bundled libtorch pieces are valid only against the
    torch build they came from.  Else the minor line, and preflight proves symbol compatibility."""
    loads_before_torch: bool
    """The bootstrap must prepare the process before PyTorch's libraries load (startup hook)."""
    global_preload: bool
    """The bundled libraries are dlopened RTLD_GLOBAL before torch initialises (CUDA hooks are cached at
    ``import torch``), so they are in the process's global scope."""
    replaces_torch_libraries: bool
    """torch's own library names resolve to the bundled copies (a private view of ``torch/lib``), without
    modifying the installed torch."""
    checks_runtime_at_import: bool
    """``import torch_fl`` checks the target's runtime directories and loads a moved SDK's libraries."""
    runtime_from_requirements: bool
    """The runtime libraries come from the wheel's requirements (pip packages), not from the target's
    SDK: verify proves the wheel against a target made from those requirements."""
    sdk_version_from_torch: bool
    """The SDK version is the CUDA version of the torch the libraries come from, not a file of an SDK tree."""
    needs_sdk_prefix: bool
    """The target's vendor runtime lives under an SDK prefix the recipe must name (stand-ins excepted)."""
    sdk_dirs_in_plugin_rpath: bool
    """The plugin's RPATH must name the SDK's library directories (nothing is bundled to find them)."""
    loaded_canaries: tuple[str, ...]
    """Bundled libraries every process maps once torch is imported: if torch is imported first and these
    are not the mapped copies, it is too late for the bootstrap."""

    @property
    def bundles_libraries(self) -> bool:
        """The wheel carries libraries beside the plugin, in the recipe's bundle directory."""
        return self.library_source is not None

    @property
    def bundles_libtorch(self) -> bool:
        """The bundled libraries are pieces of a torch build (a vendor's or the CUDA one): the manifest must
        record that torch (``vendor_torch``) and the build needs it (``--vendor-torch``)."""
        return self.library_source in ("cuda-torch", "vendor-torch")


_POLICIES = (
    KindPolicy(
        name="in-wheel-runtime",
        summary="the plugin and the runtime library it links, found by RPATH $ORIGIN",
        library_source="build",
        pins_torch=False,
        loads_before_torch=False,
        global_preload=False,
        replaces_torch_libraries=False,
        checks_runtime_at_import=False,
        runtime_from_requirements=False,
        sdk_version_from_torch=False,
        needs_sdk_prefix=False,
        sdk_dirs_in_plugin_rpath=False,
        loaded_canaries=(),
    ),
    KindPolicy(
        name="cuda-assets",
        summary="plugin + the CUDA pieces of the CUDA torch wheel of the same version, preloaded before torch",
        library_source="cuda-torch",
        pins_torch=True,
        loads_before_torch=True,
        global_preload=True,
        replaces_torch_libraries=False,
        checks_runtime_at_import=False,
        runtime_from_requirements=True,
        sdk_version_from_torch=True,
        needs_sdk_prefix=False,
        sdk_dirs_in_plugin_rpath=False,
        loaded_canaries=("libtorch_cuda.so", "libc10_cuda.so"),
    ),
    KindPolicy(
        name="forked-libtorch",
        summary="plugin + the vendor's core libtorch set, which wins over the installed torch's at import",
        library_source="vendor-torch",
        pins_torch=True,
        loads_before_torch=True,
        global_preload=False,
        replaces_torch_libraries=True,
        checks_runtime_at_import=False,
        runtime_from_requirements=False,
        sdk_version_from_torch=False,
        needs_sdk_prefix=True,
        sdk_dirs_in_plugin_rpath=False,
        loaded_canaries=("libc10.so",),
    ),
    KindPolicy(
        name="native-sdk",
        summary="plugin only; its RPATH names the vendor SDK's library directories on the target",
        library_source=None,
        pins_torch=False,
        loads_before_torch=False,
        global_preload=False,
        replaces_torch_libraries=False,
        checks_runtime_at_import=True,
        runtime_from_requirements=False,
        sdk_version_from_torch=False,
        needs_sdk_prefix=True,
        sdk_dirs_in_plugin_rpath=True,
        loaded_canaries=(),
    ),
    KindPolicy(
        name="none",
        summary="plugin only, for a torch that already has the device's kernels",
        library_source=None,
        pins_torch=False,
        loads_before_torch=False,
        global_preload=False,
        replaces_torch_libraries=False,
        checks_runtime_at_import=False,
        runtime_from_requirements=False,
        sdk_version_from_torch=False,
        needs_sdk_prefix=False,
        sdk_dirs_in_plugin_rpath=False,
        loaded_canaries=(),
    ),
)

#: The closed set of bundle kinds, by name.
KINDS: dict[str, KindPolicy] = {p.name: p for p in _POLICIES}

#: The kind a plugin without a manifest (a development build) is treated as: nothing bundled, nothing to do.
NOTHING_BUNDLED = "none"


def policy(kind: str) -> KindPolicy:
    """The policy of ``kind``; raises KeyError for a name outside the closed set (callers validate first)."""
    return KINDS[kind]
