"""Read what an index already holds for a project: its simple page (PEP 691 JSON or PEP 503 HTML)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import PurePosixPath
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import NormalizedName

from torch_fl_publish import transport

# PEP 691 content negotiation: prefer JSON, accept the HTML form that every index serves.
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


class IndexReadError(Exception):
    """The simple page could not be read (after the caller's retries); ``retryable`` says whether to try again."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


@dataclass(frozen=True)
class IndexFile:
    """One file the index lists."""

    filename: str
    url: str
    sha256: str | None
    """From the page (``#sha256=`` or the JSON ``hashes``); ``None`` when the index gives none."""


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _filename_of(url: str) -> str:
    return unquote(PurePosixPath(urlsplit(url).path).name)


def parse_html(page: str, base: str) -> list[IndexFile]:
    parser = _LinkParser()
    parser.feed(page)
    parser.close()
    files = []
    for href, text in parser.links:
        url, _, fragment = href.partition("#")
        algo, _, digest = fragment.partition("=")
        files.append(
            IndexFile(
                filename=text or _filename_of(url),
                url=urljoin(base, url),
                sha256=digest.lower() if algo == "sha256" and digest else None,
            )
        )
    return files


def parse_json(page: bytes, base: str) -> list[IndexFile]:
    document = json.loads(page)
    files = []
    for entry in document.get("files", []):
        hashes = entry.get("hashes") or {}
        files.append(
            IndexFile(
                filename=str(entry["filename"]),
                url=urljoin(base, str(entry["url"])),
                sha256=str(hashes["sha256"]).lower() if "sha256" in hashes else None,
            )
        )
    return files


class SimpleIndex:
    """The read side of an index lane."""

    def __init__(self, simple_url: str, *, authorization: str | None, timeout: float) -> None:
        self.simple_url = simple_url if simple_url.endswith("/") else simple_url + "/"
        self.timeout = timeout
        self._auth = (transport.origin(self.simple_url), authorization) if authorization else None

    def project_url(self, project: NormalizedName) -> str:
        return urljoin(self.simple_url, f"{project}/")

    def files(self, project: NormalizedName) -> list[IndexFile]:
        """Every file listed for ``project``; empty when the index does not know it."""
        url = self.project_url(project)
        try:
            response = transport.request(
                "GET",
                url,
                headers={"Accept": ACCEPT, "Cache-Control": "no-cache"},
                timeout=self.timeout,
                auth_for=self._auth,
            )
        except transport.TransportError as exc:
            raise IndexReadError(f"reading {url}: {exc}", retryable=True) from None
        if response.status == 404:
            return []
        if response.status != 200:
            retryable = response.status >= 500 or response.status == 429
            raise IndexReadError(
                f"reading {url}: HTTP {response.status} {response.reason}",
                retryable=retryable,
                status=response.status,
            )
        content_type = response.headers.get("content-type", "").split(";")[0].strip()
        try:
            if content_type == "application/vnd.pypi.simple.v1+json":
                return parse_json(response.body, response.url)
            return parse_html(response.body.decode("utf-8", "replace"), response.url)
        except (ValueError, KeyError, TypeError) as exc:
            raise IndexReadError(f"reading {url}: malformed page ({exc})", retryable=True) from None

    def sha256_of(self, file: IndexFile) -> str:
        """The sha256 of a listed file: from the page, else by downloading it."""
        if file.sha256:
            return file.sha256
        digest = hashlib.sha256()
        try:
            response = transport.request("GET", file.url, timeout=self.timeout, auth_for=self._auth, sink=digest.update)
        except transport.TransportError as exc:
            raise IndexReadError(f"downloading {file.url}: {exc}", retryable=True) from None
        if response.status != 200:
            raise IndexReadError(
                f"downloading {file.url}: HTTP {response.status}",
                retryable=response.status >= 500,
                status=response.status,
            )
        return digest.hexdigest()
