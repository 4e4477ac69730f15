"""Where the upload credentials come from, and how they are kept out of every output.

Order: ``TORCH_FL_PUBLISH_USERNAME``/``TORCH_FL_PUBLISH_PASSWORD``, then twine's
``TWINE_USERNAME``/``TWINE_PASSWORD`` (so a runner already set up for twine
needs nothing new), then the system keyring (service = the repository URL),
looked up only when no password is in the environment.  A password without a
user name means an API token, whose user name is ``__token__`` by convention
of PyPI-compatible indexes.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

USERNAME_VARIABLES = ("TORCH_FL_PUBLISH_USERNAME", "TWINE_USERNAME")
PASSWORD_VARIABLES = ("TORCH_FL_PUBLISH_PASSWORD", "TWINE_PASSWORD")
TOKEN_USERNAME = "__token__"  # noqa: S105 - a user name, the convention for API tokens


@dataclass(frozen=True)
class Credentials:
    """A user name and a secret; ``repr`` never shows the secret."""

    username: str
    password: str = field(repr=False)
    source: str
    """Where they came from, for the log: an environment variable's name or ``keyring``."""

    def authorization(self) -> str:
        """The value of an HTTP Basic ``Authorization`` header."""
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")

    def secrets(self) -> tuple[str, ...]:
        """Every form in which the secret could leak into a message."""
        return (self.password, self.authorization().split(" ", 1)[1])


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        value = env.get(name)
        if value:
            return name, value
    return None


def _from_keyring(service: str, username: str) -> str | None:
    try:
        import keyring  # optional, and slow to import
    except ImportError:
        return None
    try:
        password: str | None = keyring.get_password(service, username)
    except Exception:  # noqa: BLE001 - each keyring backend raises its own errors (D-Bus, locked store): none is a password
        return None
    return password


def split_url_credentials(url: str) -> tuple[str, Credentials | None]:
    """Take ``user:secret@`` out of a URL, so that the URL can be printed."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    clean = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    if parts.password is None:
        return clean, None
    user = parts.username or TOKEN_USERNAME
    return clean, Credentials(user, parts.password, "repository URL")


def resolve(repository_url: str, env: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials for ``repository_url``, or ``None`` to upload anonymously."""
    env = os.environ if env is None else env
    user = _first(env, USERNAME_VARIABLES)
    password = _first(env, PASSWORD_VARIABLES)
    if password is not None:
        username = user[1] if user else TOKEN_USERNAME
        return Credentials(username, password[1], password[0])
    username = user[1] if user else TOKEN_USERNAME
    secret = _from_keyring(repository_url, username)
    if secret:
        return Credentials(username, secret, "keyring")
    return None


def redact(text: str, credentials: Credentials | None) -> str:
    """``text`` with every form of the secret replaced, as a last line of defence."""
    if credentials is None:
        return text
    for secret in credentials.secrets():
        if secret:
            text = text.replace(secret, "***")
    return text
