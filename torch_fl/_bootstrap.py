"""Import-time bootstrap: prepare the process for the wheel's bundle kind before PyTorch loads.

Standard library only, and never ``import torch``: this module runs *before*
torch, either from the startup hook (``_torch_fl_startup``, imported by
``torch_fl_startup.pth`` at interpreter start, which calls ``on_torch_import``
when ``torch`` is about to be imported) or from ``torch_fl/__init__.py``
(``ensure``, its first statement).  What it does is read from the wheel's own
``torch_fl/compatibility.json`` (``bundle.kind``):

``cuda-assets``
    Load what the bundled CUDA pieces need from outside the wheel -- torch's own
    libraries from the installed ``torch/lib`` (the pieces keep the CUDA torch
    wheel's RPATH, which looks for them beside themselves) and the CUDA runtime
    from the installed ``nvidia``/``cuda-toolkit`` packages
    (``nvidia/<component>/lib`` of CUDA 12, ``nvidia/cu13/lib`` of CUDA 13) --
    then the bundled libraries,
    ``RTLD_GLOBAL``, dependencies first (ordered from the manifest's DT_NEEDED
    records).  PyTorch caches its CUDA hooks when its libraries initialise, so
    ``libtorch_cuda.so`` must be in the process before ``torch/_C`` is.

``forked-libtorch``
    Import torch from a *view*: a directory in a private per-user cache whose
    ``torch/`` holds a symlink to every entry of the installed torch package,
    except ``torch/lib``, a real directory whose core libraries are symlinks to
    the vendor copies bundled in the wheel.  ``torch/_C.so`` is then opened
    through the view, so its ``RUNPATH $ORIGIN/lib`` (the dynamic loader takes
    ``$ORIGIN`` from the path it opened, without resolving symlinks) names the
    view's ``lib``, and ``torch/__init__.py``'s absolute-path load of
    ``libtorch_global_deps.so`` goes there too.  Every later DT_NEEDED
    ``libc10.so`` (torch_fl's own plugin, extensions) is satisfied by SONAME
    from the objects already loaded.  The installed torch is never written.

``native-sdk``
    Check that the vendor runtime directories exist and hold their libraries;
    where the SDK prefix is overridden by its environment variable, load the
    libraries from there (the plugin's RPATH names the default prefix).

``in-wheel-runtime``, ``none``
    Nothing.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.machinery import ModuleSpec

# typing costs milliseconds to import, and this runs on every `import torch`:
# the annotations are strings (see the __future__ import), checked by mypy only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    #: compatibility.json, parsed (manifests/compatibility.schema.json), and one of its ELF records.
    Manifest = dict[str, Any]
    Record = dict[str, Any]

__all__ = ["BootstrapError", "ensure", "on_torch_import", "load_manifest", "view_of_torch"]

MANIFEST = "compatibility.json"
#: Kinds whose work must happen before PyTorch's libraries load.
_BEFORE_TORCH = ("cuda-assets", "forked-libtorch")
_VIEW_FORMAT = 1


class BootstrapError(ImportError):
    """The process cannot be prepared for torch_fl; the message names what is missing and the fix."""


# Per package directory: the outcome of the work done before torch (the startup
# hook and ``ensure`` may both ask; the work runs once).
_done: dict[str, str | None] = {}  # package dir -> the view entry (forked-libtorch) or None
_errors: dict[str, BootstrapError] = {}


# -- the manifest -------------------------------------------------------------------


def load_manifest(pkg: str) -> Manifest | None:
    """``torch_fl/compatibility.json`` of the installation at ``pkg``; None for a development build."""
    path = os.path.join(pkg, MANIFEST)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        # `pip install .` / editable builds have no manifest: only torch-fl-build writes it.
        return None
    try:
        manifest: Manifest = json.loads(data)
        kind = manifest["bundle"]["kind"]
        manifest["elf"]  # noqa: B018 - presence check
    except (ValueError, KeyError, TypeError) as exc:
        raise BootstrapError(f"torch_fl's {path} is damaged ({exc.__class__.__name__}: {exc}); "
                             f"reinstall torch_fl: pip install --force-reinstall --no-deps torch_fl") from None
    if manifest.get("schema_version") != 1:
        raise BootstrapError(f"{path} has schema_version {manifest.get('schema_version')!r}, which this torch_fl "
                             f"does not read; reinstall torch_fl: pip install --force-reinstall --no-deps torch_fl")
    manifest["x-path"] = path
    manifest["x-kind"] = kind
    return manifest


def _sha256_bytes(data: bytes) -> str:
    import hashlib  # here, not at the top: only the forked kind needs it (it loads OpenSSL)

    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return _sha256_bytes(f.read())


def _wheel_label(manifest: Manifest) -> str:
    return f"torch_fl {manifest['wheel']['version']}"


def _reinstall(manifest: Manifest) -> str:
    return f"pip install --force-reinstall --no-deps torch_fl=={manifest['wheel']['version']}"


def _bundled_files(pkg: str, manifest: Manifest) -> list[tuple[Record, str]]:
    """(ELF record, installed path) of every bundled library; raises when one is missing."""
    directory = manifest["bundle"].get("directory")
    if not directory:
        return []
    site = os.path.dirname(pkg)
    out = []
    for rec in manifest["elf"]:
        if rec.get("origin") != "bundled" or os.path.dirname(rec["path"]) != directory:
            continue
        path = os.path.join(site, *rec["path"].split("/"))
        if not os.path.isfile(path):
            raise BootstrapError(
                f"{_wheel_label(manifest)} is missing its bundled library {rec['path']} (listed in "
                f"torch_fl/{MANIFEST}; looked for {path}); reinstall it: {_reinstall(manifest)}")
        out.append((rec, path))
    return out


# -- the installed torch, without importing it ----------------------------------------


def _installed_torch() -> tuple[str, str | None]:
    """(torch package directory, torch.__version__) as installed on sys.path, found without importing it."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise BootstrapError("torch is not installed in this environment; torch_fl needs it: pip install torch")
    torch_dir = os.path.realpath(list(spec.submodule_search_locations)[0])
    version = None
    try:
        with open(os.path.join(torch_dir, "version.py"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("__version__"):
                    version = line.split("=", 1)[1].strip().split("#")[0].strip().strip("'\"")
                    break
    except OSError:
        pass
    return torch_dir, version


def _check_exact_torch(manifest: Manifest, torch_dir: str, version: str | None) -> None:
    """cuda-assets and forked-libtorch bundle libtorch pieces: only the exact torch they came from works."""
    requirement = manifest["torch"]["requirement"].replace(" ", "")
    if not requirement.startswith("torch=="):
        return
    pinned = requirement[len("torch=="):]
    if version is None or version.split("+")[0] != pinned.split("+")[0]:
        raise BootstrapError(
            f"{_wheel_label(manifest)} needs torch=={pinned} exactly (its bundled "
            f"{manifest['x-kind']} libraries are built for that torch), but torch {version or '(unknown version)'} "
            f"is installed in {torch_dir}; install it: pip install torch=={pinned}")


# -- forked-libtorch: the view -----------------------------------------------------------


def _cache_root() -> str:
    given = os.environ.get("FLAGOS_CACHE_DIR")
    if given:
        return os.path.abspath(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_fl")


def _private_dir(path: str, *, create: bool) -> None:
    """Make sure ``path`` is a directory only this user can write; refuse it otherwise."""
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise BootstrapError(f"torch_fl cannot create its cache directory {path} ({exc.strerror}); set "
                                 f"FLAGOS_CACHE_DIR to a directory you own") from None
    st = os.stat(path)
    fix = f"set FLAGOS_CACHE_DIR to a directory only you own and can write, or remove {path}"
    if st.st_uid != os.geteuid():
        raise BootstrapError(f"torch_fl refuses its cache directory {path}: it is owned by uid {st.st_uid}, not by "
                             f"you (uid {os.geteuid()}), so its contents could be replaced; {fix}")
    if st.st_mode & 0o022:
        raise BootstrapError(f"torch_fl refuses its cache directory {path}: it is writable by group or others "
                             f"(mode {st.st_mode & 0o777:o}); chmod 700 {path}, or {fix}")


def _view_plan(pkg: str, manifest: Manifest, torch_dir: str) -> dict[str, str]:
    """The view's symlinks, relative path -> target: the installed torch with the vendor core libraries."""
    links: dict[str, str] = {}
    for name in sorted(os.listdir(torch_dir)):
        if name != "lib":
            links[f"torch/{name}"] = os.path.join(torch_dir, name)
    lib = os.path.join(torch_dir, "lib")
    for name in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
        links[f"torch/lib/{name}"] = os.path.join(lib, name)
    for _, path in _bundled_files(pkg, manifest):
        links[f"torch/lib/{os.path.basename(path)}"] = os.path.realpath(path)
    return links


def _view_key(pkg: str, manifest: Manifest, torch_dir: str, version: str | None, links: dict[str, str]) -> str:
    """A name that changes with the installed torch or the wheel (its files' sizes and times, its manifest hash)."""
    def sig(path: str) -> list[int]:
        try:
            st = os.stat(path)
        except OSError:
            return [-1, -1, -1]
        return [st.st_size, st.st_mtime_ns, st.st_ino]

    material = {
        "format": _VIEW_FORMAT, "torch": torch_dir, "torch_version": version, "pkg": os.path.realpath(pkg),
        "manifest": _sha256_file(manifest["x-path"]), "links": links,
        # The installed torch's libraries (also those the view replaces) and the bundled ones.
        "stock": {name: sig(os.path.join(torch_dir, "lib", name))
                  for name in (os.listdir(os.path.join(torch_dir, "lib"))
                               if os.path.isdir(os.path.join(torch_dir, "lib")) else ())},
        "targets": {rel: sig(target) for rel, target in links.items() if rel.startswith("torch/lib/")},
        "version_py": sig(os.path.join(torch_dir, "version.py")),
    }
    return _sha256_bytes(json.dumps(material, sort_keys=True).encode())[:32]


def _view_is_valid(entry: str, key: str, links: dict[str, str]) -> bool:
    try:
        with open(os.path.join(entry, "view.json"), encoding="utf-8") as f:
            stamp = json.load(f)
        if stamp.get("key") != key or stamp.get("links") != links:
            return False
        for rel, target in links.items():
            if os.readlink(os.path.join(entry, rel)) != target:
                return False
        st = os.stat(entry)
        return st.st_uid == os.geteuid() and not st.st_mode & 0o022
    except (OSError, ValueError, AttributeError):
        return False


def _build_view(views: str, key: str, links: dict[str, str]) -> str:
    """Write the view in a fresh temporary directory of ``views``; the caller renames it into place."""
    tmp = os.path.join(views, f".tmp-{key}-{os.getpid()}-{os.urandom(4).hex()}")
    os.mkdir(tmp, 0o700)
    os.makedirs(os.path.join(tmp, "torch", "lib"), mode=0o700)
    for rel, target in links.items():
        os.symlink(target, os.path.join(tmp, *rel.split("/")))
    # The stamp is written last: an entry that has one is complete.
    with open(os.path.join(tmp, "view.json"), "w", encoding="utf-8") as f:
        json.dump({"format": _VIEW_FORMAT, "key": key, "links": links}, f, indent=1, sort_keys=True)
    return tmp


def view_of_torch(pkg: str, manifest: Manifest) -> str:
    """The cache entry whose ``torch/`` is the installed torch with the bundled core libraries; made if needed.

    Safe when many processes import at once: entries are built in a temporary
    directory and renamed into place under a lock; a valid entry is never replaced.
    """
    torch_dir, version = _installed_torch()
    _check_exact_torch(manifest, torch_dir, version)
    links = _view_plan(pkg, manifest, torch_dir)
    key = _view_key(pkg, manifest, torch_dir, version, links)
    root = _cache_root()
    _private_dir(root, create=True)
    views = os.path.join(root, "torch-views")
    _private_dir(views, create=True)
    entry = os.path.join(views, key)
    if _view_is_valid(entry, key, links):
        return entry
    import fcntl

    lock_fd = os.open(os.path.join(views, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        # Another process may have built it while this one waited.
        if not _view_is_valid(entry, key, links):
            tmp = _build_view(views, key, links)
            trash = None
            if os.path.lexists(entry):
                # A stale or damaged entry: set it aside, then put the new one in its place.
                trash = os.path.join(views, f".trash-{key}-{os.getpid()}-{os.urandom(4).hex()}")
                try:
                    os.rename(entry, trash)
                except OSError as exc:
                    raise BootstrapError(
                        f"torch_fl's cache entry {entry} is damaged and cannot be replaced ({exc.strerror}); "
                        f"remove it (rm -rf {entry}) or set FLAGOS_CACHE_DIR to another directory") from None
            os.rename(tmp, entry)
            if trash is not None:
                _remove(trash)
            _prune(views, keep=entry)
    except OSError as exc:
        raise BootstrapError(f"torch_fl cannot build its view of torch in {views} ({exc.strerror}: "
                             f"{exc.filename}); set FLAGOS_CACHE_DIR to a writable directory you own") from None
    finally:
        os.close(lock_fd)
    if not _view_is_valid(entry, key, links):
        raise BootstrapError(f"torch_fl's cache entry {entry} is damaged and rebuilding it did not help; remove it "
                             f"(rm -rf {entry}) or set FLAGOS_CACHE_DIR to another directory")
    return entry


def _remove(path: str) -> None:
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:  # noqa: SIM105 - contextlib is one more import at import time
            os.unlink(path)
        except OSError:
            pass


def _prune(views: str, keep: str) -> None:
    """Remove entries whose torch is gone (uninstalled or moved): no process can be using them.

    Entries of a torch that is still installed stay, even when another key is
    current: a running process may import from them at any time (torch imports
    submodules lazily).  Runs under the lock, only when an entry was just built.
    """
    for name in os.listdir(views):
        path = os.path.join(views, name)
        if path == keep or name == ".lock":
            continue
        # Views are only built under the lock this process holds: a .tmp- is a crashed build.
        if name.startswith((".tmp-", ".trash-")) or not os.path.exists(os.path.join(path, "torch", "__init__.py")):
            _remove(path)


def _torch_spec_from(entry: str) -> ModuleSpec:
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("torch", [entry])
    if spec is None:
        raise BootstrapError(f"torch_fl's view {entry} holds no importable torch; remove it (rm -rf {entry})")
    return spec


class _ViewFinder:
    """``sys.meta_path`` entry: every lookup of ``torch`` is answered from the view.

    It stays in place: a library may call ``importlib.util.find_spec("torch")``
    long before anything imports torch, and the import must still come from the
    view.  Once torch is in ``sys.modules`` nobody asks the finders again.
    """

    def __init__(self, entry: str) -> None:
        self.entry = entry

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if fullname != "torch":
            return None
        return _torch_spec_from(self.entry)

    def invalidate_caches(self) -> None:
        pass


# -- cuda-assets: preloading ------------------------------------------------------------


def load_order(records: list[Record]) -> list[Record]:
    """Bundled records, every library after the bundled libraries it needs (DT_NEEDED), else in manifest order."""
    by_soname = {rec.get("soname") or os.path.basename(rec["path"]): rec for rec in records}
    ordered: list[Record] = []
    state: dict[str, int] = {}  # 1: visiting, 2: placed

    def visit(rec: Record) -> None:
        name = rec.get("soname") or os.path.basename(rec["path"])
        if state.get(name):
            return  # placed, or a cycle (the loader resolves those itself)
        state[name] = 1
        for dep in rec.get("needed", []):
            if dep in by_soname:
                visit(by_soname[dep])
        state[name] = 2
        ordered.append(rec)

    for rec in records:
        visit(rec)
    return ordered


def _nvidia_lib_dirs(pkg: str, torch_dir: str | None) -> list[str]:
    """Library directories of the installed nvidia/cuda-toolkit packages, this installation's first."""
    roots = [os.path.dirname(pkg)]
    if torch_dir:
        roots.append(os.path.dirname(torch_dir))
    roots += [p for p in sys.path if p]
    dirs: list[str] = []
    seen: set[str] = set()
    for root in roots:
        nvidia = os.path.join(root, "nvidia")
        real = os.path.realpath(nvidia)
        if real in seen or not os.path.isdir(nvidia):
            continue
        seen.add(real)
        # CUDA 13: nvidia/cu13/lib holds the whole toolkit; CUDA 12: nvidia/<component>/lib.
        for comp in sorted(os.listdir(nvidia)):
            lib = os.path.join(nvidia, comp, "lib")
            if os.path.isdir(lib):
                dirs.append(lib)
    return dirs


def _missing_dependency(message: str) -> str | None:
    # dlerror(): "<name>: cannot open shared object file: No such file or directory"
    head, sep, _ = message.partition(": cannot open shared object file")
    return os.path.basename(head.strip()) if sep else None


#: The NVIDIA driver's SONAMEs: the target system provides them, never a wheel.
_DRIVER = ("libcuda.so.1", "libcuda.so")
#: Loaded before torch or PyTorch keeps its stub CUDA hooks.
_CUDA_CORE = ("libtorch_cuda.so", "libc10_cuda.so")


class _NeedsDriver(Exception):
    """A library (or one it needs) links the NVIDIA driver, which is not installed."""


def _preload_cuda_assets(pkg: str, manifest: Manifest) -> None:
    import contextlib
    import ctypes

    torch_dir, version = _installed_torch()
    _check_exact_torch(manifest, torch_dir, version)
    bundled = _bundled_files(pkg, manifest)
    index: dict[str, str] = {}
    # torch's own libraries first: the bundled CUDA libraries keep the CUDA torch wheel's
    # RPATH, which finds libc10.so and libtorch_cpu.so only next to them, so they are
    # loaded from the installed torch/lib before the libraries that need them.
    for d in (os.path.join(torch_dir, "lib"), *_nvidia_lib_dirs(pkg, torch_dir)):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if ".so" in name:
                index.setdefault(name, os.path.join(d, name))
    loaded: dict[str, Any] = {}

    def load(path: str, depth: int = 0) -> None:
        # A library whose dependency sits in another package's directory (CUDA 12:
        # cusparse needs nvjitlink, without an RPATH to it) fails to load; load
        # that dependency from the nvidia packages first, then retry.
        while True:
            try:
                loaded[path] = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError as exc:
                missing = _missing_dependency(str(exc))
                if missing in _DRIVER:
                    raise _NeedsDriver(path) from None
                if depth < 16 and missing and missing in index and index[missing] not in loaded:
                    load(index[missing], depth + 1)
                    continue
                reqs = ", ".join(r for r in manifest.get("requirements", []) if not r.startswith("torch"))
                raise BootstrapError(
                    f"{_wheel_label(manifest)} cannot load {path}: {exc}. The CUDA runtime comes from the nvidia "
                    f"packages the wheel requires ({reqs or 'see its METADATA'}); install them: "
                    f"pip install torch_fl=={manifest['wheel']['version']}") from None

    bundled_sonames = {rec.get("soname") for rec, _ in bundled}
    for rec, _ in bundled:
        for dep in rec.get("needed", []):
            if dep not in bundled_sonames and dep in index:
                with contextlib.suppress(_NeedsDriver):  # it links the driver itself: see below
                    load(index[dep])
    paths = {rec["path"]: path for rec, path in bundled}
    for rec in load_order([rec for rec, _ in bundled]):
        try:
            load(paths[rec["path"]])
        except _NeedsDriver:
            # Without a driver PyTorch still imports: it loads the pieces that link the driver
            # (the NVRTC glue) on demand and then reports the driver missing.  The core pair
            # must load now, or the CUDA hooks are the stub ones.
            if os.path.basename(rec["path"]) in _CUDA_CORE:
                raise BootstrapError(
                    f"{_wheel_label(manifest)} cannot load {paths[rec['path']]} without the NVIDIA driver "
                    f"({' or '.join(_DRIVER)} is not installed); install the NVIDIA driver") from None


# -- native-sdk ----------------------------------------------------------------------------


def runtime_directories(manifest: Manifest, environ: Mapping[str, str] | None = None) -> list[tuple[str, Record]]:
    """(directory on this machine, manifest record) per runtime directory, re-rooted where its env var is set."""
    env = os.environ if environ is None else environ
    root = (manifest.get("sdk") or {}).get("root")
    prefixes = ([root["default"]] if root else []) + list(manifest["runtime"].get("prefixes", []))
    prefixes.sort(key=len, reverse=True)
    out = []
    for rd in manifest["runtime"]["directories"]:
        path = rd["path"]
        name = rd.get("env")
        if name and env.get(name):
            for p in prefixes:
                if path == p or path.startswith(p.rstrip("/") + "/"):
                    path = os.path.join(env[name], os.path.relpath(path, p))
                    break
            else:
                path = env[name]
            path = os.path.normpath(path)
        out.append((path, rd))
    return out


def _check_native_sdk(manifest: Manifest) -> None:
    sdk = (manifest.get("sdk") or {}).get("name", "vendor")
    platform = manifest.get("platform", "?")
    overridden: list[str] = []
    for path, rd in runtime_directories(manifest):
        env = rd.get("env")
        how = (f"set {env} to the prefix where the {sdk} runtime is installed" if env
               else f"install the {sdk} runtime there")
        if not os.path.isdir(path):
            raise BootstrapError(f"torch_fl ({platform}) needs the vendor runtime directory {path}, which does not "
                                 f"exist; install the {sdk} runtime, or {how}")
        for lib in rd["libraries"]:
            if not os.path.exists(os.path.join(path, lib)):
                raise BootstrapError(f"torch_fl ({platform}) needs {lib} in the vendor runtime directory {path}, "
                                     f"which does not have it; install the {sdk} runtime, or {how}")
        if env and os.environ.get(env) and path != os.path.normpath(rd["path"]):
            overridden += [os.path.join(path, lib) for lib in rd["libraries"]]
    if overridden:
        # The plugin's RPATH names the default prefix; loaded first, the override's
        # libraries satisfy the plugin's DT_NEEDED by SONAME.
        import ctypes

        for lib in overridden:
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                raise BootstrapError(f"torch_fl ({platform}) cannot load {lib}: {exc}") from None


# -- after torch: is the process what the kind needs? --------------------------------------


def _mapped() -> set[str]:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return {line.split(None, 5)[5].rstrip("\n") for line in f if line.count(" ") >= 5 and "/" in line}
    except OSError:
        return set()


def _check_loaded(pkg: str, manifest: Manifest) -> None:
    """torch is already imported: the bundled libraries must be the ones mapped (and, forked, not the stock ones)."""
    kind = manifest["x-kind"]
    bundled = _bundled_files(pkg, manifest)
    maps = _mapped()
    if not maps:
        return  # no /proc: nothing to check against
    missing = [path for _, path in bundled if os.path.realpath(path) not in maps]
    stock: list[str] = []
    if kind == "forked-libtorch":
        torch_dir, _ = _installed_torch()
        for _, path in bundled:
            candidate = os.path.realpath(os.path.join(torch_dir, "lib", os.path.basename(path)))
            if candidate in maps and candidate != os.path.realpath(path):
                stock.append(candidate)
    # The canaries: a library every program maps once torch is imported (the
    # others of a bundle may load on demand).
    canaries = ("libtorch_cuda.so", "libc10_cuda.so") if kind == "cuda-assets" else ("libc10.so",)
    missing = [p for p in missing if os.path.basename(p) in canaries]
    if not missing and not stock:
        return
    earlier = _errors.get(pkg)
    if earlier is not None:
        raise BootstrapError(f"{earlier} (the startup hook failed before torch loaded; torch is now imported "
                             f"without torch_fl's {kind} libraries)") from None
    hook = "the startup hook is off (FLAGOS_NO_STARTUP_HOOK=1)" if os.environ.get("FLAGOS_NO_STARTUP_HOOK") == "1" \
        else "the startup hook did not run (python -S?)" if "_torch_fl_startup" not in sys.modules \
        else "torch was imported before the startup hook was installed"
    what = f"the stock {stock[0]} is mapped" if stock else f"{missing[0]} is not loaded"
    raise BootstrapError(
        f"torch_fl ({kind}) must prepare the process before torch loads its libraries, but torch is already "
        f"imported and {what}: {hook}. Import torch_fl before torch, or start Python without -S and without "
        f"FLAGOS_NO_STARTUP_HOOK=1")


# -- entry points -------------------------------------------------------------------------


def _prepare_before_torch(pkg: str, manifest: Manifest) -> str | None:
    """The kind's work before torch loads, once; returns the view torch must be imported from, or None."""
    kind = manifest["x-kind"]
    if pkg not in _done:
        if kind == "cuda-assets":
            _preload_cuda_assets(pkg, manifest)
            _done[pkg] = None
        elif kind == "forked-libtorch":
            _done[pkg] = view_of_torch(pkg, manifest)
    return _done.get(pkg)


def on_torch_import(pkg: str) -> ModuleSpec | None:
    """The startup hook's call, as ``torch`` is about to be imported: the spec to import it from, or None.

    Never raises: ``import torch`` must not fail because of torch_fl's hook.  A
    failure is kept and reported by ``import torch_fl`` (torch's autoload).
    """
    if pkg in _errors:
        return None
    try:
        manifest = load_manifest(pkg)
        if manifest is None or manifest["x-kind"] not in _BEFORE_TORCH:
            return None
        entry = _prepare_before_torch(pkg, manifest)
        return None if entry is None else _torch_spec_from(entry)
    except BootstrapError as exc:
        _errors[pkg] = exc
    except Exception as exc:  # noqa: BLE001 - the hook must never break `import torch`
        _errors[pkg] = BootstrapError(f"torch_fl's bootstrap failed unexpectedly: {exc!r}; turn the startup hook "
                                      f"off with FLAGOS_NO_STARTUP_HOOK=1 and report this")
    return None


def ensure(pkg: str) -> None:
    """``import torch_fl``'s first step; raises BootstrapError (an ImportError) naming the fix."""
    manifest = load_manifest(pkg)
    if manifest is None:
        return
    kind = manifest["x-kind"]
    if kind == "native-sdk":
        _check_native_sdk(manifest)
        return
    if kind not in _BEFORE_TORCH:
        return
    if "torch" in sys.modules:
        _check_loaded(pkg, manifest)
        return
    if pkg in _errors:
        raise _errors[pkg]
    entry = _prepare_before_torch(pkg, manifest)
    if entry is not None and not any(isinstance(f, _ViewFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _ViewFinder(entry))
