"""``native-sdk``: the vendor runtime directories exist and hold their libraries; a moved SDK is loaded.

The plugin's RPATH names the SDK's default prefix.  Where the prefix is moved
by its environment variable, the runtime libraries are loaded from there first,
so that they satisfy the plugin's DT_NEEDED by SONAME.
"""

from __future__ import annotations

import os

from torch_fl_bootstrap.errors import BootstrapError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from torch_fl_bootstrap.manifest import Manifest, RuntimeDirectory


def runtime_directories(manifest: Manifest,
                        environ: Mapping[str, str] | None = None) -> list[tuple[str, RuntimeDirectory]]:
    """(directory on this machine, manifest record) per runtime directory, re-rooted where its env var is set."""
    env = os.environ if environ is None else environ
    prefixes = ([manifest.sdk_root] if manifest.sdk_root else []) + list(manifest.runtime_prefixes)
    prefixes.sort(key=len, reverse=True)
    out = []
    for rd in manifest.runtime_directories:
        path = rd.path
        if rd.env and env.get(rd.env):
            for p in prefixes:
                if path == p or path.startswith(p.rstrip("/") + "/"):
                    path = os.path.join(env[rd.env], os.path.relpath(path, p))
                    break
            else:
                path = env[rd.env]
            path = os.path.normpath(path)
        out.append((path, rd))
    return out


def check(manifest: Manifest) -> None:
    """Raise BootstrapError naming the directory, the library and the variable when the runtime is not there."""
    sdk = manifest.sdk_name
    platform = manifest.platform
    overridden: list[str] = []
    for path, rd in runtime_directories(manifest):
        how = (f"set {rd.env} to the prefix where the {sdk} runtime is installed" if rd.env
               else f"install the {sdk} runtime there")
        if not os.path.isdir(path):
            raise BootstrapError(f"torch_fl ({platform}) needs the vendor runtime directory {path}, which does not "
                                 f"exist; install the {sdk} runtime, or {how}")
        for lib in rd.libraries:
            if not os.path.exists(os.path.join(path, lib)):
                raise BootstrapError(f"torch_fl ({platform}) needs {lib} in the vendor runtime directory {path}, "
                                     f"which does not have it; install the {sdk} runtime, or {how}")
        if rd.env and os.environ.get(rd.env) and path != os.path.normpath(rd.path):
            overridden += [os.path.join(path, lib) for lib in rd.libraries]
    if overridden:
        # The plugin's RPATH names the default prefix; loaded first, the override's
        # libraries satisfy the plugin's DT_NEEDED by SONAME.
        import ctypes

        for lib in overridden:
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                raise BootstrapError(f"torch_fl ({platform}) cannot load {lib}: {exc}") from None
