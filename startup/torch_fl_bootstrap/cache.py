"""The private per-user cache the forked-libtorch view lives in, and what makes a place safe for it.

Where: ``$FLAGOS_CACHE_DIR``, else ``$XDG_CACHE_HOME/torch_fl``, else
``~/.cache/torch_fl``.  What the cache holds decides which ``torch/_C.so`` the
process loads, so nobody else may be able to change it:

* the cache folder and its ``torch-views`` folder are owned by this user and
  writable by nobody else;
* every folder above the cache is owned by this user or root and writable by
  nobody else unless it is sticky -- the rule OpenSSH applies to the paths of
  key files (``safe_path`` in its ``misc.c``).  Whoever can write a parent can
  rename the whole cache away and put a folder of their own, with their own
  ``torch/_C.so``, in its place, however private the cache itself is.  A sticky
  folder (``/tmp``) lets each user rename only their own entries.

An explicit ``FLAGOS_CACHE_DIR`` under an unsafe parent is refused, naming the
parent and the fix.  The default location under one is replaced by a private
folder in the temporary directory, with a one-line warning: the user did not
choose it, and the import still works.
"""

from __future__ import annotations

import os
import stat

from torch_fl_bootstrap.errors import BootstrapError, BootstrapWarning

_CHOOSE = "set FLAGOS_CACHE_DIR to a directory that only you can write, below folders that only you or root can write"


def _why_unsafe(path: str, st: os.stat_result) -> str | None:
    """Why others could rename or replace entries of the folder ``path``; None when they cannot."""
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        return f"{path} is owned by uid {st.st_uid}, neither you (uid {uid}) nor root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"{path} is writable by group or others and not sticky (mode {st.st_mode & 0o7777:o})"
    return None


def _ancestors(path: str) -> list[str]:
    """The folders above ``path``, from ``/`` down."""
    out = []
    d = os.path.dirname(path)
    while True:
        out.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            return out[::-1]
        d = parent


def unsafe_parent(path: str) -> str | None:
    """The first folder above ``path`` that someone else could change, with why; None when there is none.

    Both the path as given and its resolved form are checked: a symlink in the
    way is as good as the folder holding it, and its target's folders count too.
    Folders that do not exist yet are skipped: this process makes them, privately.
    """
    seen: set[str] = set()
    for start in (os.path.abspath(path), os.path.realpath(path)):
        for d in _ancestors(start):
            if d in seen:
                continue
            seen.add(d)
            try:
                st = os.lstat(d)
            except FileNotFoundError:
                continue
            except OSError as exc:
                return f"{d} cannot be checked ({exc.strerror})"
            if stat.S_ISLNK(st.st_mode):
                continue  # its folder is checked here, its target in the resolved path
            why = _why_unsafe(d, st)
            if why:
                return why
    return None


def _make_private(path: str) -> None:
    """Create ``path`` and each missing folder above it owner-only (os.makedirs gives the parents umask modes)."""
    missing = []
    d = path
    while not os.path.isdir(d) and os.path.dirname(d) != d:
        missing.append(d)
        d = os.path.dirname(d)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except OSError as exc:
            if not os.path.isdir(d):
                raise BootstrapError(f"torch_fl cannot create its cache directory {path} ({exc.strerror}); set "
                                     f"FLAGOS_CACHE_DIR to a directory you own") from None


def private_dir(path: str) -> None:
    """Make sure ``path`` exists and is a directory only this user can write; refuse it otherwise."""
    _make_private(path)
    st = os.stat(path)
    fix = f"set FLAGOS_CACHE_DIR to a directory only you own and can write, or remove {path}"
    if st.st_uid != os.geteuid():
        raise BootstrapError(f"torch_fl refuses its cache directory {path}: it is owned by uid {st.st_uid}, not by "
                             f"you (uid {os.geteuid()}), so its contents could be replaced; {fix}")
    if st.st_mode & 0o022:
        raise BootstrapError(f"torch_fl refuses its cache directory {path}: it is writable by group or others "
                             f"(mode {st.st_mode & 0o777:o}); chmod 700 {path}, or {fix}")


def _fallback() -> str:
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"torch_fl-{os.geteuid()}")


def cache_root() -> str:
    """The cache folder to use: the configured one when every folder above it is safe (see the module doc)."""
    given = os.environ.get("FLAGOS_CACHE_DIR")
    if given:
        root = os.path.abspath(given)
        why = unsafe_parent(root)
        if why:
            raise BootstrapError(f"torch_fl refuses its cache directory {root}: {why}, so someone else could put "
                                 f"their own torch in its place; {_CHOOSE}")
        return root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(os.path.abspath(base), "torch_fl")
    why = unsafe_parent(root)
    if why is None:
        return root
    fallback = _fallback()
    why_fallback = unsafe_parent(fallback)
    if why_fallback:
        raise BootstrapError(f"torch_fl has no safe cache directory: not {root} ({why}), nor {fallback} "
                             f"({why_fallback}); {_CHOOSE}")
    import warnings

    # warn_explicit: one line, no source line of this module under it.
    warnings.warn_explicit(f"torch_fl does not use the cache directory {root}: {why}, so someone else could put "
                           f"their own torch in its place; using {fallback} instead ({_CHOOSE} to choose another)",
                           BootstrapWarning, filename="torch_fl", lineno=0, module="torch_fl_bootstrap.cache")
    return fallback


def views_directory() -> str:
    """``<cache root>/torch-views``, made private if needed; raises BootstrapError naming the fix."""
    root = cache_root()
    private_dir(root)
    views = os.path.join(root, "torch-views")
    private_dir(views)
    return views
