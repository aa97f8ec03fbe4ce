"""Text the store cannot hold is refused where it enters: before any route runs.

Every string of a request can reach the store's PostgreSQL (a name looked up, an entry saved, a
filter of the audit log), and two kinds of text cannot: a NUL character (U+0000; PostgreSQL's text
and JSONB refuse it), and a lone surrogate (U+D800 to U+DFFF: half of a UTF-16 pair, which is no
character and cannot be encoded as UTF-8; a JSON body's ``"\\ud800"`` decodes to one). Percent-encoded
bytes in a path or a query that are not UTF-8 (``%FF``, ``%ED%A0%80``) are no text either.

:class:`RefuseUnstorableText` looks at the path's parameters (as the route that will answer names
them), the query's names and values, and a JSON body's keys and values at any depth, and answers
with each problem named where the client put it: ``path.key``, ``query.destination_id``,
``destination.connection.password`` (a body's fields as its other problems name them).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from transfer_platform.errors import Problem

#: at most this many problems are named in one answer (a body full of NULs is one mistake)
MAX_PROBLEMS = 20

#: how an answer is made of the problems: (scope, problems) -> an ASGI application that sends it
Refusal = Callable[[Scope, list[Problem]], Callable[[Scope, Receive, Send], Awaitable[None]]]


def _is_surrogate(character: str) -> bool:
    return "\ud800" <= character <= "\udfff"


def _bad(character: str) -> bool:
    return character == "\x00" or _is_surrogate(character)


def shown(text: str, *, from_bytes: bool = False, limit: int = 60) -> str:
    """``text`` as an answer can show it: a NUL or a surrogate written as its JSON escape, a byte
    of a URL that is not UTF-8 (``from_bytes``) as its percent-encoding."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return "".join(f"%{ord(c) - 0xDC00:02X}" if from_bytes and "\udc80" <= c <= "\udcff"
                   else f"\\u{ord(c):04x}" if _bad(c) else c for c in cut)


def text_problem(where: str, text: str, *, from_bytes: bool, what: str = "") -> Problem | None:
    """What is wrong with ``text`` at ``where`` for the store, or ``None``. ``from_bytes``: it was
    percent-decoded from a URL (a surrogate then stands for a byte that is not UTF-8)."""
    subject = f"{what or 'the value'} '{shown(text, from_bytes=from_bytes)}'"
    if "\x00" in text:
        return Problem(where, f"{subject} holds a NUL character (\\u0000), which cannot be stored",
                       "remove the NUL character (%00 in a URL, \\u0000 in JSON)")
    bad = [c for c in text if _is_surrogate(c)]
    if not bad:
        return None
    if from_bytes:
        return Problem(where, f"{subject} is not UTF-8 once percent-decoded",
                       "percent-encode the text's UTF-8 bytes (e.g. é is %C3%A9)")
    return Problem(where, f"{subject} holds a lone surrogate (\\u{ord(bad[0]):04x}), half of a "
                          "UTF-16 pair, which is no character and cannot be stored",
                   "send the character itself, or both halves of its pair (\\ud83d\\ude00 for one emoji)")


def _decoded(raw: bytes) -> str:
    """Percent-decoded URL bytes as text; a byte that is not UTF-8 becomes a lone surrogate."""
    return unquote_to_bytes(raw).decode("utf-8", "surrogateescape")


def route_templates(routes: Any, prefix: str = "") -> list[str]:
    """The path of every route, as declared (``/destinations/{key}``), the included routers' too."""
    found: list[str] = []
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's included router
        if included is not None:
            context = getattr(route, "include_context", None)
            found += route_templates(included.routes, prefix + getattr(context, "prefix", ""))
        elif isinstance(getattr(route, "path", None), str):
            found.append(prefix + route.path)
    return found


def path_problems(scope: Scope) -> list[Problem]:
    """The path's parameters, as the route that answers names them (``path.key``); the whole path
    if no route does."""
    raw = scope.get("raw_path")
    path = _decoded(raw) if raw else scope["path"]
    if not any(_bad(c) for c in path):
        return []
    for template in route_templates(getattr(scope.get("app"), "routes", ())):
        regex, _, convertors = compile_path(template)
        match = regex.match(path)
        if match and convertors:
            found = [text_problem(f"path.{name}", value, from_bytes=True) for name, value in match.groupdict().items()]
            return [p for p in found if p is not None]
    return [p for p in [text_problem("path", path, from_bytes=True)] if p is not None]


def query_problems(query_string: bytes) -> list[Problem]:
    """The query's parameters, names and values (``query.destination_id``)."""
    if not query_string:
        return []
    problems = []
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, encoding="utf-8",
                      errors="surrogateescape")
    for name, value in pairs:
        where = f"query.{shown(name, from_bytes=True)}"
        problem = (text_problem(where, name, from_bytes=True, what="the parameter's name")
                   or text_problem(where, value, from_bytes=True))
        if problem is not None:
            problems.append(problem)
    return problems


def body_problems(document: Any) -> list[Problem]:
    """A JSON document's keys and values at any depth (``destination.connection.password``,
    ``webhook.events[0]``); walked without recursion, however deep it nests."""
    problems: list[Problem] = []
    stack: list[tuple[str, Any]] = [("", document)]
    while stack and len(problems) < MAX_PROBLEMS:
        path, value = stack.pop()
        if isinstance(value, str):
            problem = text_problem(_short(path) or "body", value, from_bytes=False)
            if problem is not None:
                problems.append(problem)
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                where = f"{path}.{shown(key)}" if path else shown(key)
                problem = text_problem(_short(where), key, from_bytes=False, what="the field's name")
                if problem is not None:
                    problems.append(problem)
                stack.append((where, item))
        elif isinstance(value, list):
            stack.extend((f"{path or 'body'}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return problems


def _short(path: str, limit: int = 200) -> str:
    """A body's path as an answer shows it: its end, where the problem is, if it is long."""
    return path if len(path) <= limit else "..." + path[-limit:]


def _is_json(scope: Scope) -> bool:
    """The body is JSON the way FastAPI reads it: ``application/json`` or ``application/*+json``."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            kind = value.decode("latin-1").split(";", 1)[0].strip().lower()
            return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))
    return False


def _json_problems(body: bytes) -> list[Problem]:
    try:
        document = json.loads(body)
    except UnicodeDecodeError as exc:
        return [Problem("body", f"is not UTF-8 (the byte 0x{body[exc.start]:02X} at offset {exc.start})"
                        if exc.start < len(body) else "is not UTF-8",
                        "send the JSON document encoded as UTF-8")]
    except (ValueError, RecursionError):  # not JSON: the route's own validation answers it
        return []
    return body_problems(document)


class RefuseUnstorableText:
    """ASGI middleware: a request holding text the store cannot hold is answered by ``refuse``
    (the API's 422) before any route runs; any other passes through, its body unchanged."""

    def __init__(self, app: ASGIApp, refuse: Refusal) -> None:
        self.app, self.refuse = app, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problems = path_problems(scope) + query_problems(scope.get("query_string", b""))
        if _is_json(scope):
            messages, body = await _read_body(receive)
            problems += _json_problems(body)
            receive = _replay(messages, receive)
        if problems:
            await self.refuse(scope, problems[:MAX_PROBLEMS])(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _read_body(receive: Receive) -> tuple[list[Message], bytes]:
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return messages, b"".join(chunks)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives ``messages`` again, then what the client sends next (a disconnect)."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
