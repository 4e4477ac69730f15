"""``forked-libtorch``: import torch from a view whose ``torch/lib`` holds the vendor's core libraries.

The view is a directory in the private per-user cache (``cache.py``) whose
``torch/`` holds a symlink to every entry of the installed torch package, except
``torch/lib``, a real directory whose core libraries are symlinks to the vendor
copies bundled in the wheel.  ``torch/_C.so`` is then opened through the view,
so its ``RUNPATH $ORIGIN/lib`` (the dynamic loader takes ``$ORIGIN`` from the
path it opened, without resolving symlinks) names the view's ``lib``, and
``torch/__init__.py``'s absolute-path load of ``libtorch_global_deps.so`` goes
there too.  Every later DT_NEEDED ``libc10.so`` (torch_fl's own plugin,
extensions) is satisfied by SONAME from the objects already loaded.  The
installed torch is never written.
"""

from __future__ import annotations

import json
import os
from importlib.machinery import ModuleSpec, PathFinder

from torch_fl_bootstrap import cache, installed_torch
from torch_fl_bootstrap.errors import BootstrapError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from torch_fl_bootstrap.manifest import Manifest

_VIEW_FORMAT = 1


def _sha256_bytes(data: bytes) -> str:
    import hashlib  # here, not at the top: it loads OpenSSL

    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return _sha256_bytes(f.read())


def _view_plan(pkg: str, manifest: Manifest, torch_dir: str) -> dict[str, str]:
    """The view's symlinks, relative path -> target: the installed torch with the vendor core libraries."""
    links: dict[str, str] = {}
    for name in sorted(os.listdir(torch_dir)):
        if name != "lib":
            links[f"torch/{name}"] = os.path.join(torch_dir, name)
    lib = os.path.join(torch_dir, "lib")
    for name in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
        links[f"torch/lib/{name}"] = os.path.join(lib, name)
    for _, path in manifest.bundled_files(pkg):
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

    lib = os.path.join(torch_dir, "lib")
    material = {
        "format": _VIEW_FORMAT, "torch": torch_dir, "torch_version": version, "pkg": os.path.realpath(pkg),
        "manifest": _sha256_file(manifest.path), "links": links,
        # The installed torch's libraries (also those the view replaces) and the bundled ones.
        "stock": {name: sig(os.path.join(lib, name)) for name in (os.listdir(lib) if os.path.isdir(lib) else ())},
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
    torch_dir, version = installed_torch.find_exact(manifest)
    links = _view_plan(pkg, manifest, torch_dir)
    key = _view_key(pkg, manifest, torch_dir, version, links)
    views = cache.views_directory()
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


def torch_spec_from(entry: str) -> ModuleSpec:
    """The spec of ``torch`` as the view at ``entry`` holds it."""
    spec = PathFinder.find_spec("torch", [entry])
    if spec is None:
        raise BootstrapError(f"torch_fl's view {entry} holds no importable torch; remove it (rm -rf {entry})")
    return spec


class ViewFinder:
    """``sys.meta_path`` entry: every lookup of ``torch`` is answered from the view.

    It stays in place: a library may call ``importlib.util.find_spec("torch")``
    long before anything imports torch, and the import must still come from the
    view.  Once torch is in ``sys.modules`` nobody asks the finders again.
    """

    def __init__(self, entry: str) -> None:
        self.entry = entry

    def find_spec(self, fullname: str, path: object = None,  # noqa: ARG002 - the finder protocol's signature
                  target: object = None) -> ModuleSpec | None:  # noqa: ARG002
        if fullname != "torch":
            return None
        return torch_spec_from(self.entry)

    def invalidate_caches(self) -> None:
        pass
