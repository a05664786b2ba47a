"""Who is asking: bound to loopback, everyone is the local operator; bound anywhere else, a login (scrypt-hashed
passwords from ``web.users`` or ``web.users_file``) makes a session that expires, and every edit carries the
session's CSRF token. ``python -m appliance.web.auth`` prints a password hash for the config."""

from __future__ import annotations

import getpass
import ipaddress
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from appliance.config.shown import shown
from appliance.logs import AUDIT
from appliance.passwords import hash_password, verify_password
from appliance.web.config import Role, UserConfig, WebConfig

log = logging.getLogger(__name__)
COOKIE = "appliance_session"
check_password = verify_password  # the name this module's callers know


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Session:
    user: str
    role: Role
    csrf: str
    expires: float

    @property
    def can_edit(self) -> bool:
        return self.role == "operator"


def load_users(config: WebConfig) -> dict[str, UserConfig]:
    users = {u.name: u for u in config.users}
    if config.users_file is not None:
        doc = yaml.safe_load(Path(config.users_file).read_text()) or []
        for entry in doc:
            user = UserConfig.model_validate(entry)
            users[user.name] = user
    return users


class Auth:
    """Sessions in memory (a restart logs everyone out). ``open_access``: loopback, no login."""

    def __init__(self, users: dict[str, UserConfig], *, open_access: bool, session_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self._users, self.open_access, self._session_s, self._clock = users, open_access, session_s, clock
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._local = Session("local", "operator", secrets.token_urlsafe(24), float("inf"))
        self._no_user = hash_password(secrets.token_urlsafe(16))  # an unknown name costs one scrypt, as a known one

    def login(self, name: str, password: str) -> tuple[str, Session] | None:
        user = self._users.get(name)
        # A name that does not exist costs as much as a wrong password: no telling which it was.
        ok = check_password(password, user.password_hash if user else self._no_user)
        if user is None or not ok:
            log.warning("web: failed login for %s", shown(name), extra=AUDIT)
            return None
        token = secrets.token_urlsafe(32)
        session = Session(user.name, user.role, secrets.token_urlsafe(24), self._clock() + self._session_s)
        with self._lock:
            self._sessions = {t: s for t, s in self._sessions.items() if s.expires > self._clock()}
            self._sessions[token] = session
        log.info("web: %s logged in (%s)", user.name, user.role)
        return token, session

    def logout(self, token: str | None) -> None:
        with self._lock:
            self._sessions.pop(token or "", None)

    def session(self, token: str | None) -> Session | None:
        if self.open_access:
            return self._local
        with self._lock:
            session = self._sessions.get(token or "")
            if session is not None and session.expires <= self._clock():
                del self._sessions[token or ""]
                return None
        return session


def make_auth(config: WebConfig, host: str) -> Auth:
    open_access = is_loopback(host)
    users = load_users(config)
    if not open_access and not users:
        log.error("web: bound to %s with no users (web.users or web.users_file): nobody can log in to the page",
                  host)
    return Auth(users, open_access=open_access, session_s=config.session_s)


def main(argv: Sequence[str] | None = None) -> int:
    password = getpass.getpass("password: ")
    if password != getpass.getpass("again: "):
        print("the two differ")
        return 1
    print(hash_password(password))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
