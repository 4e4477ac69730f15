"""torch_fl_bootstrap.cache: where the forked-libtorch views live, and the folders above it.

Every folder above the cache must be owned by you or root and not writable by
group or others unless sticky (OpenSSH's rule for key paths): whoever can write
a parent can rename the cache away and put their own torch/_C.so in its place.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from support.bootstrap import load_bootstrap

load_bootstrap()
from torch_fl_bootstrap import cache  # noqa: E402
from torch_fl_bootstrap.errors import BootstrapError, BootstrapWarning  # noqa: E402

NOBODY = 65534


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A private temporary directory (the fallback's parent) and nothing configured yet."""
    private = tmp_path / "private-tmp"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.delenv("FLAGOS_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return {"tmp": tmp_path, "fallback": private / f"torch_fl-{os.geteuid()}"}


def _shared(tmp_path: Path, *, owner: int | None, mode: int) -> Path:
    """A folder like /srv/shared: owned by ``owner`` (None: you) with ``mode``."""
    shared = tmp_path / "shared"
    shared.mkdir()
    if owner is not None:
        if os.geteuid() != 0:
            pytest.skip("needs root to hand a directory to another user")
        os.chown(shared, owner, owner)
    shared.chmod(mode)
    return shared


def test_the_default_cache_under_another_users_open_folder_falls_back_with_one_warning(
        places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _shared(places["tmp"], owner=NOBODY, mode=0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    with pytest.warns(BootstrapWarning) as warned:
        views = cache.views_directory()
    assert Path(views) == places["fallback"] / "torch-views"
    assert len(warned) == 1
    message = str(warned[0].message)
    assert "\n" not in message
    assert message.startswith(f"torch_fl does not use the cache directory {shared}/torch_fl: {shared} is owned by "
                              f"uid {NOBODY}, neither you (uid {os.geteuid()}) nor root")
    assert f"using {places['fallback']} instead" in message and "FLAGOS_CACHE_DIR" in message
    assert not list(shared.iterdir()), "nothing may be created under the unsafe folder"
    for d in (places["fallback"], Path(views)):
        assert d.stat().st_mode & 0o777 == 0o700 and d.stat().st_uid == os.geteuid()


def test_an_explicit_cache_dir_under_another_users_open_folder_is_refused(
        places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _shared(places["tmp"], owner=NOBODY, mode=0o777)
    monkeypatch.setenv("FLAGOS_CACHE_DIR", str(shared / "cache"))
    with pytest.raises(BootstrapError) as err:
        cache.views_directory()
    assert str(err.value) == (
        f"torch_fl refuses its cache directory {shared}/cache: {shared} is owned by uid {NOBODY}, neither you "
        f"(uid {os.geteuid()}) nor root, so someone else could put their own torch in its place; set "
        f"FLAGOS_CACHE_DIR to a directory that only you can write, below folders that only you or root can write")
    assert not list(shared.iterdir())
    assert not places["fallback"].exists(), "an explicit choice is refused, never replaced"


@pytest.mark.parametrize(("mode", "safe"), [(0o777, False), (0o775, False), (0o757, False), (0o1777, True),
                                            (0o755, True), (0o700, True)])
def test_a_parent_you_own_is_safe_unless_others_can_write_it_without_the_sticky_bit(
        places: dict[str, Path], monkeypatch: pytest.MonkeyPatch, mode: int, safe: bool) -> None:
    shared = _shared(places["tmp"], owner=None, mode=mode)
    monkeypatch.setenv("FLAGOS_CACHE_DIR", str(shared / "deeper" / "cache"))
    if safe:
        assert cache.views_directory() == str(shared / "deeper" / "cache" / "torch-views")
    else:
        with pytest.raises(BootstrapError, match=rf": {shared} is writable by group or others and not sticky "
                                                 rf"\(mode {mode:o}\), so someone else"):
            cache.views_directory()


def test_a_symlink_to_an_open_folder_is_judged_by_its_target(places: dict[str, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _shared(places["tmp"], owner=None, mode=0o777)
    link = places["tmp"] / "looks-private"
    link.symlink_to(shared)
    monkeypatch.setenv("FLAGOS_CACHE_DIR", str(link / "cache"))
    with pytest.raises(BootstrapError, match=f": {shared} is writable by group or others"):
        cache.views_directory()


def test_a_symlink_in_an_open_folder_is_refused_even_to_a_private_target(
        places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _shared(places["tmp"], owner=None, mode=0o777)
    private = places["tmp"] / "private"
    private.mkdir(mode=0o700)
    (shared / "link").symlink_to(private)
    monkeypatch.setenv("FLAGOS_CACHE_DIR", str(shared / "link" / "cache"))
    with pytest.raises(BootstrapError, match=f": {shared} is writable by group or others"):
        cache.views_directory()


def test_no_safe_place_at_all_is_refused_naming_both(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _shared(places["tmp"], owner=None, mode=0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    with pytest.raises(BootstrapError) as err:
        cache.views_directory()
    assert str(err.value).startswith(f"torch_fl has no safe cache directory: not {shared}/torch_fl ({shared} is "
                                     f"writable by group or others and not sticky (mode 777)), nor {shared}/torch_fl-")


def test_folders_the_bootstrap_makes_are_owner_only_whatever_the_umask(
        places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    base = places["tmp"] / "home" / ".cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(base))
    old = os.umask(0)
    try:
        views = Path(cache.views_directory())
    finally:
        os.umask(old)
    assert views == base / "torch_fl" / "torch-views"
    for d in (places["tmp"] / "home", base, base / "torch_fl", views):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    # ...so that the next import finds every folder above the cache safe, without a warning.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.views_directory() == str(views)
