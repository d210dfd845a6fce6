"""Guards of the HTTP service that sit in front of its handlers (`solveplan.service`): which
Host headers are served (`HostCheck`), an optional bearer token (`BearerToken`), and the caps
on connections that hold no complete request (`IncompleteConnections`, used by the service's
uvicorn protocol). They know ASGI and sockets, nothing of plans."""

from __future__ import annotations

import hashlib
import hmac
import json

from ..errors import InputError, escape_text


async def reject(send, status: int, kind: str, msg: str, extra_headers: list | None = None) -> None:
    body = json.dumps({"detail": [{"loc": ["body"], "msg": msg, "type": kind}]}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.extend(extra_headers or ())
    if status in (400, 401, 408, 413, 429):
        headers.append((b"connection", b"close"))
    if status == 429:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class HostCheck:
    """ASGI middleware: a request whose Host header names none of `allowed` (lower case, no
    port; "*" allows any) is 400 before anything else is read. A browser on a DNS-rebinding
    page sends its own domain as the Host, so a service bound to 127.0.0.1 cannot be reached
    through it."""

    def __init__(self, app, *, allowed: frozenset[str]):
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or "*" in self.allowed:
            return await self.app(scope, receive, send)
        host = _host_name(dict(scope.get("headers") or ()).get(b"host", b""))
        if host not in self.allowed:
            return await reject(send, 400, "host_not_allowed",
                                 "this Host header is not served here; the operator can allow it with --allow-host")
        return await self.app(scope, receive, send)


def _host_name(header: bytes) -> str:
    """'127.0.0.1:8080' -> '127.0.0.1', '[::1]:80' -> '::1', 'LocalHost.' -> 'localhost'."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else ""
    return text.rpartition(":")[0].rstrip(".") if text.count(":") == 1 else text.rstrip(".")


def allowed_hosts(bind_host: str, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The Host names a service bound to `bind_host` answers: that address, localhost (by name,
    127.0.0.1 and ::1) and the operator's `extra` ones (names or addresses, no port)."""
    names = {"localhost", "127.0.0.1", "::1", *(_host_name(h.encode()) if h != "*" else h for h in extra)}
    if bind_host not in ("0.0.0.0", "::", ""):
        names.add(_host_name(bind_host.encode()) if not bind_host.count(":") > 1 else bind_host.lower())
    return frozenset(names)


class BearerToken:
    """ASGI middleware: every request must carry `Authorization: Bearer <token>` (401 without
    it, before its body is read). Both sides are hashed before the constant-time comparison,
    so neither the token's bytes nor its length leak through timing."""

    def __init__(self, app, *, token: str):
        self.app = app
        self.digest = hashlib.sha256(b"Bearer " + token.encode()).digest()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if not hmac.compare_digest(hashlib.sha256(given).digest(), self.digest):
            return await reject(send, 401, "unauthorized", "give the service's token: Authorization: Bearer <token>",
                                 [(b"www-authenticate", b"Bearer")])
        return await self.app(scope, receive, send)


MIN_TOKEN_CHARS = 16


def read_token(path: str) -> str:
    """The bearer token of `--token-file` (read once, at start): printable ASCII without spaces,
    at least MIN_TOKEN_CHARS characters; surrounding whitespace (a final newline) is dropped."""
    from ..specs.reading import read_text

    token = read_text(path, "token_file").strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise InputError("token_file", f"the token has {len(token)} characters; give at least {MIN_TOKEN_CHARS} "
                                       f"(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if not all(33 <= ord(c) < 127 for c in token):
        raise InputError("token_file", "the token must be printable ASCII without spaces")
    return token


class IncompleteConnections:
    """Connections that hold no complete request -- waiting for a request head or for the rest
    of a body, or idle between keep-alive requests -- oldest first, per client address and in
    all. Such a connection costs the server a socket and a timer but no work, so it is never a
    reason to refuse an honest client: when a client address holds `max_per_client` of them its
    own oldest one is closed, and when all addresses together hold `max_total` the oldest one of
    any address is closed, to make room for the new one. (Requests whose body is complete are
    counted by `Guard`, which refuses with 429 beyond its caps.) An idle attacker therefore only
    evicts itself or other idle connections, never a request being served."""

    def __init__(self, max_total: int, max_per_client: int):
        self.max_total = max_total
        self.max_per_client = max_per_client
        self.all: dict = {}  # connection -> client address, oldest first (dicts keep insertion order)
        self.by_client: dict[str, dict] = {}  # address -> {connection: None}, oldest first
        self.evicted = 0

    def incomplete(self, conn, client: str) -> None:
        """`conn` (from `client`) now holds no complete request; close the oldest beyond the caps."""
        if conn in self.all:
            return
        mine = self.by_client.setdefault(client, {})
        if len(mine) >= self.max_per_client:
            self._evict(next(iter(mine)))
        if len(self.all) >= self.max_total:
            self._evict(next(iter(self.all)))
        self.all[conn] = client
        self.by_client.setdefault(client, {})[conn] = None

    def complete(self, conn) -> None:
        """`conn` holds a complete request (or is gone): it no longer counts."""
        client = self.all.pop(conn, None)
        if client is None:
            return
        mine = self.by_client.get(client, {})
        mine.pop(conn, None)
        if not mine:
            self.by_client.pop(client, None)

    def _evict(self, conn) -> None:
        self.complete(conn)
        self.evicted += 1
        conn.evict()



def require_unicode(data, name: str) -> None:
    """Refuse a string (key or value) of parsed JSON that holds a lone surrogate (JSON's
    "\\ud800" escape is valid syntax but no Unicode text): it could not be printed or answered."""
    stack = [data]
    while stack:
        obj = stack.pop()
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list):
            stack.extend(obj)
        elif isinstance(obj, str) and any("\ud800" <= ch <= "\udfff" for ch in obj):
            raise InputError("body", f"{name} holds a lone surrogate in {escape_text(repr(obj), 60)}; "
                                     f"text must be valid Unicode")
