"""The whole run: inspect -> release gate -> read the index -> upload -> verify."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from packaging.utils import NormalizedName

from torch_fl_publish import release, upload, wheels
from torch_fl_publish.credentials import Credentials
from torch_fl_publish.errors import PublishError
from torch_fl_publish.index import IndexFile, IndexReadError, SimpleIndex
from torch_fl_publish.upload import OK_STATUSES, Outcome, RetryPolicy, Status

_LANE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class Settings:
    """What one run publishes, and where."""

    lane: str
    repository_url: str
    """Where to POST uploads; ``{lane}`` in it is replaced by the lane."""
    wheels: tuple[Path, ...]
    simple_url: str | None = None
    """The index's simple root; default: ``simple/`` under the repository URL."""
    tag: str | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: int = 4
    dry_run: bool = False
    bundlers: Path | None = None
    """The platform recipes; in release mode each wheel's platform must publish to the lane."""


@dataclass
class Result:
    lane: str
    repository_url: str
    simple_url: str
    tag: str | None
    dry_run: bool
    outcomes: list[Outcome]

    @property
    def ok(self) -> bool:
        return all(o.status in OK_STATUSES and (o.verified or o.status is Status.PLANNED) for o in self.outcomes)

    @property
    def not_published(self) -> list[Outcome]:
        return [
            o for o in self.outcomes if not (o.status in OK_STATUSES and (o.verified or o.status is Status.PLANNED))
        ]


def _check_url(url: str, what: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PublishError(f"{what} is not an http(s) URL", url, "pass e.g. https://index.example/lane/")
    return url


def resolve_urls(settings: Settings) -> tuple[str, str]:
    if not _LANE_RE.match(settings.lane):
        raise PublishError("not a lane name", settings.lane, "lanes are the recipes' index_lane values, e.g. host")
    repository = _check_url(settings.repository_url.replace("{lane}", settings.lane), "--repository-url")
    if settings.simple_url:
        simple = _check_url(settings.simple_url.replace("{lane}", settings.lane), "--simple-url")
    else:
        simple = urljoin(repository if repository.endswith("/") else repository + "/", "simple/")
    return repository, simple


def _read(
    index: SimpleIndex, project: NormalizedName, policy: RetryPolicy, log: Callable[[str], None]
) -> list[IndexFile]:
    """The project's files, retried like an upload; authentication problems stop the run."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return index.files(project)
        except IndexReadError as exc:
            if exc.status in (401, 403):
                raise PublishError(
                    "the index refused the credentials",
                    f"HTTP {exc.status} at {index.project_url(project)}",
                    "set TORCH_FL_PUBLISH_USERNAME and TORCH_FL_PUBLISH_PASSWORD (or TWINE_*)",
                ) from None
            if not exc.retryable or attempt == policy.attempts:
                raise
            delay = policy.delay(attempt)
            log(f"{project}: {exc}; retrying in {delay:.1f}s")
            time.sleep(delay)
    raise AssertionError("unreachable")


def _classify(wheel: wheels.LocalWheel, listed: list[IndexFile], index: SimpleIndex) -> Outcome | None:
    """An outcome for a wheel the index already lists, or ``None`` when it must be uploaded."""
    same = [f for f in listed if f.filename == wheel.filename]
    if not same:
        return None
    digests = {index.sha256_of(f) for f in same}
    if digests == {wheel.sha256}:
        return Outcome(wheel, Status.PRESENT, "already on the index", 0, wheel.sha256, verified=True)
    other = min(digests - {wheel.sha256})
    return Outcome(wheel, Status.REFUSED, "the index holds this file name with another sha256", 0, other)


def _verify(outcomes: list[Outcome], index: SimpleIndex, policy: RetryPolicy, log: Callable[[str], None]) -> None:
    """Re-read each project's page: every sent or present wheel must be listed once, with its sha256."""
    todo = [o for o in outcomes if o.status in (Status.UPLOADED, Status.PRESENT)]
    for project in sorted({o.wheel.project for o in todo}):
        try:
            listed = _read(index, project, policy, log)
        except IndexReadError as exc:
            for o in todo:
                if o.wheel.project == project:
                    o.status, o.detail = Status.UNVERIFIED, f"cannot re-read the index: {exc}"
            continue
        for o in (o for o in todo if o.wheel.project == project):
            o.verified = False
            same = [f for f in listed if f.filename == o.wheel.filename]
            if not same:
                o.status, o.detail = Status.UNVERIFIED, "not listed on the index after upload"
                continue
            if len(same) > 1:
                o.status, o.detail = Status.UNVERIFIED, f"listed {len(same)} times on the index"
                continue
            try:
                o.index_sha256 = index.sha256_of(same[0])
            except IndexReadError as exc:
                o.status, o.detail = Status.UNVERIFIED, f"cannot read its sha256: {exc}"
                continue
            if o.index_sha256 != o.wheel.sha256:
                o.status, o.detail = Status.UNVERIFIED, "the index serves another sha256"
                continue
            o.verified = True


def run(settings: Settings, credentials: Credentials | None, log: Callable[[str], None]) -> Result:
    repository, simple = resolve_urls(settings)
    if settings.concurrency < 1:
        raise PublishError("--concurrency must be at least 1", str(settings.concurrency), "pass e.g. --concurrency 4")
    local = wheels.inspect_all(list(settings.wheels))
    result = Result(settings.lane, repository, simple, settings.tag, settings.dry_run, [])

    if settings.tag is not None:
        refusals = {
            r.wheel.filename: r.reason for r in release.gate(local, settings.tag, settings.lane, settings.bundlers)
        }
        if refusals:
            for w in local:
                reason = refusals.get(w.filename, "not published: another wheel of this release was refused")
                result.outcomes.append(Outcome(w, Status.REFUSED, reason))
            return result

    authorization = credentials.authorization() if credentials else None
    index = SimpleIndex(simple, authorization=authorization, timeout=settings.policy.timeout)
    pending: list[wheels.LocalWheel] = []
    by_name: dict[str, Outcome] = {}
    for project in sorted({w.project for w in local}):
        mine = [w for w in local if w.project == project]
        try:
            listed = _read(index, project, settings.policy, log)
            for w in mine:
                known = _classify(w, listed, index)
                if known is None:
                    pending.append(w)
                else:
                    by_name[w.filename] = known
        except IndexReadError as exc:
            for w in mine:
                by_name[w.filename] = Outcome(w, Status.FAILED, f"cannot read the index: {exc}")

    if settings.dry_run:
        for w in pending:
            by_name[w.filename] = Outcome(w, Status.PLANNED, "would be uploaded")
    elif pending:
        log(f"uploading {len(pending)} wheel(s) to lane {settings.lane}, {settings.concurrency} at a time")
        with ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="upload") as pool:
            done = pool.map(
                lambda w: upload.upload(
                    w,
                    repository_url=repository,
                    index=index,
                    authorization=authorization,
                    policy=settings.policy,
                    log=log,
                ),
                pending,
            )
            for outcome in done:
                log(f"{outcome.wheel.filename}: {outcome.status.value}")
                by_name[outcome.wheel.filename] = outcome

    result.outcomes = [by_name[w.filename] for w in local]
    if not settings.dry_run:
        _verify(result.outcomes, index, settings.policy, log)
    return result
