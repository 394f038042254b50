"""Prometheus exporter-toolkit's web configuration file: TLS and basic auth, reloaded on change.

The YAML format is exporter-toolkit's (`--web.config.file` of node_exporter and
Prometheus)::

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file
      key_file: server.key
      client_ca_file: ca.crt         # optional; given alone it means RequireAndVerifyClientCert
      client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven, NoClientCert
      min_version: TLS12             # TLS10..TLS13 (default TLS12)
      max_version: TLS13
    basic_auth_users:
      prometheus: $2b$12$...         # bcrypt hashes

`load_web_config` refuses a bad file with one clear message (WebConfigError).
`WebConfigWatcher` re-reads the file and the files it names when any of them
changes: a good new version takes effect for new connections and requests, a
bad one is logged and the last good one kept. Keys this implementation cannot
honour (cipher_suites, curve_preferences, ...) are refused rather than ignored.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .background import BackgroundTask
from .web_auth import BasicUsers

log = logging.getLogger(__name__)

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version",
             "max_version"}
_UNSUPPORTED = {
    "cipher_suites": "cipher suites follow OpenSSL's defaults for the TLS version",
    "curve_preferences": "curves follow OpenSSL's defaults",
    "prefer_server_cipher_suites": "cipher order follows OpenSSL's defaults",
    "client_allowed_sans": "client certificates are checked against client_ca_file only",
    "cert": "give the certificate as cert_file",
    "key": "give the key as key_file",
    "RequestClientCert": "an unverified client certificate is never accepted",
    "RequireAnyClientCert": "an unverified client certificate is never accepted",
}
DEFAULT_POLL_S = 2.0
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


class WebConfigError(ValueError):
    """The web configuration file cannot be used; the message says why."""


@dataclass
class WebConfig:
    """One loaded version of the file."""

    path: Path
    tls: ssl.SSLContext | None = None
    users: BasicUsers = field(default_factory=lambda: BasicUsers({}))
    watched: tuple[Path, ...] = ()  # the file and every file it names


def load_web_config(path: str | Path) -> WebConfig:
    """Reads and checks the file; raises WebConfigError naming the file and the problem."""
    import yaml  # only agents started with a web configuration file need it

    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise WebConfigError(f"{path}: cannot read it: {error.strerror or error}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise WebConfigError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise WebConfigError(f"{path}: expected a mapping at the top level")
    unknown = sorted(set(document) - {"tls_server_config", "basic_auth_users",
                                      "http_server_config"})
    if unknown:
        raise WebConfigError(f"{path}: unknown key(s) {', '.join(map(str, unknown))}")
    if document.get("http_server_config"):
        raise WebConfigError(f"{path}: http_server_config is not supported (HTTP/1.1 only, no "
                             "extra headers); remove it")
    config = WebConfig(path=path, watched=(path,))
    tls = document.get("tls_server_config")
    if tls is not None:
        config.tls, named = _tls_context(path, tls)
        config.watched += named
    users = document.get("basic_auth_users")
    config.users = BasicUsers(_users(path, {} if users is None else users))
    return config


def _tls_context(path: Path, tls: Any) -> tuple[ssl.SSLContext, tuple[Path, ...]]:
    if not isinstance(tls, dict):
        raise WebConfigError(f"{path}: tls_server_config must be a mapping")
    for key, value in tls.items():
        name = next((n for n in (key, value) if isinstance(n, str) and n in _UNSUPPORTED), None)
        if name is not None:
            raise WebConfigError(f"{path}: tls_server_config {name} is not supported: "
                                 f"{_UNSUPPORTED[name]}")
    unknown = sorted(str(key) for key in tls if key not in _TLS_KEYS)
    if unknown:
        raise WebConfigError(f"{path}: unknown tls_server_config key(s) {', '.join(unknown)}")
    for key, value in tls.items():
        if value is not None and not isinstance(value, str):
            raise WebConfigError(f"{path}: tls_server_config {key} must be a string, got "
                                 f"{type(value).__name__}")
    if not tls.get("cert_file") or not tls.get("key_file"):
        raise WebConfigError(f"{path}: tls_server_config needs cert_file and key_file")

    def named(key: str) -> Path:
        given = Path(str(tls[key]))
        return given if given.is_absolute() else path.parent / given

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _version(path, tls, "min_version", "TLS12")
    if tls.get("max_version"):
        context.maximum_version = _version(path, tls, "max_version", "TLS13")
        if context.maximum_version < context.minimum_version:
            raise WebConfigError(f"{path}: max_version is below min_version")
    files = [named("cert_file"), named("key_file")]
    try:
        context.load_cert_chain(files[0], files[1])
    except (OSError, ssl.SSLError) as error:
        raise WebConfigError(f"{path}: cannot load cert_file {files[0]} with key_file "
                             f"{files[1]}: {error}") from None
    auth = tls.get("client_auth_type") or (
        "RequireAndVerifyClientCert" if tls.get("client_ca_file") else "NoClientCert")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"{path}: client_auth_type must be one of "
                             f"{', '.join(CLIENT_AUTH)}, got {auth!r}")
    if CLIENT_AUTH[auth] != ssl.CERT_NONE:
        if not tls.get("client_ca_file"):
            raise WebConfigError(f"{path}: client_auth_type {auth} needs client_ca_file")
        files.append(named("client_ca_file"))
        try:
            context.load_verify_locations(cafile=files[2])
        except (OSError, ssl.SSLError) as error:
            raise WebConfigError(f"{path}: cannot load client_ca_file {files[2]}: "
                                 f"{error}") from None
        context.verify_mode = CLIENT_AUTH[auth]
    return context, tuple(files)


def _version(path: Path, tls: dict, key: str, default: str) -> ssl.TLSVersion:
    name = tls.get(key) or default
    if name not in TLS_VERSIONS:
        raise WebConfigError(f"{path}: {key} must be one of {', '.join(TLS_VERSIONS)}, "
                             f"got {name!r}")
    return TLS_VERSIONS[name]


def _users(path: Path, users: Any) -> dict[str, bytes]:
    if not isinstance(users, dict):
        raise WebConfigError(f"{path}: basic_auth_users must map user names to bcrypt hashes")
    hashes = {}
    for user, hashed in users.items():
        text = str(hashed or "")
        if not _is_bcrypt_hash(text):
            raise WebConfigError(f"{path}: basic_auth_users {user}: not a bcrypt hash (make "
                                 "one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'` or "
                                 "python -c 'import bcrypt; print(bcrypt.hashpw(b\"pw\", "
                                 "bcrypt.gensalt()).decode())')")
        hashes[str(user)] = text.encode()
    return hashes


def _is_bcrypt_hash(text: str) -> bool:
    """Whether `text` is a bcrypt hash that bcrypt can check a password against: its form
    (version, cost 4-31, 53 characters of bcrypt's alphabet) and a salt bcrypt accepts
    (tried at the lowest cost, so that checking a file costs about a millisecond)."""
    if not _BCRYPT_HASH.fullmatch(text):
        return False
    import bcrypt

    try:
        bcrypt.hashpw(b"", b"$2b$04$" + text[7:29].encode())
    except ValueError:
        return False
    return True


class WebConfigWatcher:
    """The current good version of a web configuration file, re-read when it changes."""

    def __init__(self, path: str | Path, poll_s: float = DEFAULT_POLL_S) -> None:
        """Loads the file; raises WebConfigError when it is bad."""
        self.current = load_web_config(path)
        self.poll_s = poll_s
        self.reloads = 0
        self.failed_reloads = 0
        self._stamps = _stamps(self.current.watched)
        self._polling = BackgroundTask("ray-accel-web-config", self._poll)
        self._front = self.current.tls
        if self._front is not None:
            self._front.sni_callback = self._choose_context

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to serve with: new handshakes get the current version's certificates."""
        return self._front

    def users(self) -> BasicUsers:
        return self.current.users

    def _choose_context(self, connection: ssl.SSLObject, server_name: str | None,
                        context: ssl.SSLContext) -> None:
        current = self.current.tls
        if current is not None and current is not connection.context:
            connection.context = current

    def check(self) -> bool:
        """Re-reads the file if it or a file it names changed; True when a new version is in use."""
        stamps = _stamps(self.current.watched)
        if stamps == self._stamps:
            return False
        self._stamps = stamps
        try:
            loaded = load_web_config(self.current.path)
            if (loaded.tls is None) != (self._front is None):
                raise WebConfigError(f"{loaded.path}: TLS cannot be turned on or off while "
                                     "serving; restart to change it")
        except WebConfigError as error:
            self.failed_reloads += 1
            log.warning("web configuration not reloaded, keeping the last good one: %s", error)
            return False
        self._stamps = _stamps(loaded.watched)
        self.current = loaded
        self.reloads += 1
        log.info("web configuration reloaded from %s", loaded.path)
        return True

    async def start(self) -> None:
        """Re-reads the file every `poll_s` until `stop`."""
        self._polling.start()

    async def stop(self) -> None:
        await self._polling.stop()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                self.check()
            except Exception:  # the watcher must outlive one bad pass
                log.exception("checking the web configuration failed")


def _stamps(paths: tuple[Path, ...]) -> tuple[tuple[int, int] | None, ...]:
    stamps = []
    for path in paths:
        try:
            stat = path.stat()
            stamps.append((stat.st_mtime_ns, stat.st_size))
        except OSError:
            stamps.append(None)
    return tuple(stamps)
