"""Upload one wheel with the legacy upload protocol, retrying what is worth retrying.

Why a plain multipart POST and not twine's ``upload`` API: twine uploads one
file at a time, bounds socket operations but not a whole upload, decides
"already exists" from the server's error text (``--skip-existing``), and gives
no hook to re-read the index between attempts.  The protocol itself is small
and stable (``:action=file_upload``, ``protocol_version=1``, the core metadata
as form fields, the file as ``content``; pypi.org, devpi, pypiserver, Nexus and
Artifactory all accept it), so speaking it directly lets each attempt have a
hard deadline and lets every retry first ask the index whether an earlier
attempt, whose response was lost, already stored the file.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from torch_fl_publish import transport
from torch_fl_publish.index import IndexReadError, SimpleIndex
from torch_fl_publish.wheels import LocalWheel


class Status(str, Enum):
    UPLOADED = "uploaded"  # sent by this run and found on the index with the right sha256
    PRESENT = "present"  # already on the index with the same sha256: skipped
    REFUSED = "refused"  # on the index with another sha256, or refused by the release gate
    FAILED = "failed"  # could not be uploaded
    UNVERIFIED = "unverified"  # sent, but the index does not list it once with the right sha256
    PLANNED = "planned"  # --dry-run: would be uploaded


OK_STATUSES = frozenset({Status.UPLOADED, Status.PRESENT, Status.PLANNED})


@dataclass
class Outcome:
    """What happened to one wheel."""

    wheel: LocalWheel
    status: Status
    detail: str = ""
    attempts: int = 0
    index_sha256: str | None = None
    verified: bool = False


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    timeout: float = 300.0
    backoff: float = 1.0
    backoff_max: float = 30.0

    def delay(self, retry: int) -> float:
        """Exponential backoff with jitter, so that parallel uploads do not retry in lockstep."""
        base: float = min(self.backoff_max, self.backoff * 2.0 ** (retry - 1))
        return base * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not cryptography


class Lookup(str, Enum):
    SAME = "same"
    DIFFERENT = "different"
    ABSENT = "absent"
    UNKNOWN = "unknown"


def lookup(index: SimpleIndex, wheel: LocalWheel) -> tuple[Lookup, str | None, str]:
    """Whether the index holds ``wheel``'s file name, and with which sha256."""
    try:
        listed = [f for f in index.files(wheel.project) if f.filename == wheel.filename]
        if not listed:
            return Lookup.ABSENT, None, ""
        digests = {index.sha256_of(f) for f in listed}
    except IndexReadError as exc:
        return Lookup.UNKNOWN, None, str(exc)
    if wheel.sha256 in digests:
        return Lookup.SAME, wheel.sha256, ""
    return Lookup.DIFFERENT, min(digests), ""


def _form(wheel: LocalWheel, boundary: str) -> tuple[list[transport.BodyPart], int]:
    fields: list[tuple[str, str]] = [
        (":action", "file_upload"),
        ("protocol_version", "1"),
        *wheel.metadata,
        ("filetype", "bdist_wheel"),
        ("pyversion", wheel.python_tag),
        ("sha256_digest", wheel.sha256),
        ("blake2_256_digest", wheel.blake2_256),
    ]
    head = bytearray()
    for name, value in fields:
        head += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        head += value.encode("utf-8") + b"\r\n"
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="content"; '
        f'filename="{wheel.filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    return [bytes(head), wheel.path, tail], len(head) + wheel.size + len(tail)


def _first_line(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text.splitlines()[0][:200] if text else ""


def upload(
    wheel: LocalWheel,
    *,
    repository_url: str,
    index: SimpleIndex,
    authorization: str | None,
    policy: RetryPolicy,
    log: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Upload ``wheel`` until the index has it, it is refused, or the attempts run out."""
    auth = (transport.origin(repository_url), authorization) if authorization else None
    last = ""
    for attempt in range(1, policy.attempts + 1):
        if attempt > 1:
            delay = policy.delay(attempt - 1)
            log(f"{wheel.filename}: attempt {attempt - 1} failed ({last}); retrying in {delay:.1f}s")
            sleep(delay)
            # The failed attempt may have stored the file before its response was lost.
            state, digest, _ = lookup(index, wheel)
            if state is Lookup.SAME:
                return Outcome(wheel, Status.UPLOADED, "stored by an earlier attempt", attempt - 1, digest)
            if state is Lookup.DIFFERENT:
                return Outcome(
                    wheel, Status.REFUSED, "the index holds this file name with another sha256", attempt - 1, digest
                )
        boundary = "torch-fl-publish-" + secrets.token_hex(16)
        body, length = _form(wheel, boundary)
        try:
            response = transport.request(
                "POST",
                repository_url,
                headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
                body=body,
                length=length,
                timeout=policy.timeout,
                auth_for=auth,
            )
        except transport.TransportError as exc:
            last = str(exc)
            continue
        status = response.status
        if 200 <= status < 300:
            return Outcome(wheel, Status.UPLOADED, "", attempt, wheel.sha256)
        if status >= 500 or status in (408, 429):
            last = f"HTTP {status} {response.reason}".strip()
            continue
        if status in (401, 403):
            return Outcome(
                wheel,
                Status.FAILED,
                f"the index refused the credentials (HTTP {status}); set TORCH_FL_PUBLISH_USERNAME "
                "and TORCH_FL_PUBLISH_PASSWORD",
                attempt,
            )
        # 400/409: most often "file exists" (pypi.org says 400, pypiserver 409); ask the index.
        state, digest, why = lookup(index, wheel)
        if state is Lookup.SAME:
            stored = Status.UPLOADED if attempt > 1 else Status.PRESENT
            return Outcome(wheel, stored, "already on the index", attempt, digest)
        if state is Lookup.DIFFERENT:
            return Outcome(wheel, Status.REFUSED, "the index holds this file name with another sha256", attempt, digest)
        if state is Lookup.UNKNOWN:
            last = f"HTTP {status}, then {why}"
            continue
        detail = f"HTTP {status}: {_first_line(response.body) or response.reason}"
        return Outcome(wheel, Status.FAILED, detail, attempt)
    return Outcome(wheel, Status.FAILED, f"gave up after {policy.attempts} attempts: {last}", policy.attempts)
