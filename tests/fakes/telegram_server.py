"""A fake Telegram Bot API on 127.0.0.1 for python-telegram-bot.

Point the bot at `server.base_url` / `server.base_file_url`. Serves getMe, deleteWebhook,
getUpdates (long poll), sendMessage (validating HTML and the 4096-character limit like Telegram),
editMessageText, sendChatAction, setMyCommands, getFile and file downloads. Unknown methods get
`ok: true`. Tokens in `rejected_tokens` get 401 (an invalid token); `fail_next` scripts errors.

getUpdates keeps Telegram's confirmation rule: an update stays on the server until a call passes an
`offset` above its id, and every call (from any client, e.g. a restarted bot) returns all updates
with id >= the highest offset confirmed so far. So what a crashed bot did not confirm is served again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from html.parser import HTMLParser
from typing import Any

from aiohttp import web

from tests.fakes._aiohttp_thread import ThreadedAiohttpServer

MAX_TEXT_CHARS = 4096
BOT_ID = 7000001
BOT_USERNAME = "nano_test_bot"
_TAG = re.compile(r"</?[a-zA-Z][\w-]*(\s[^<>]*)?>")
_STRAY = re.compile(r"[<>]|&(?!#?\w+;)")  # searched in the text with the tags removed
_ALLOWED_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-spoiler",
    "span",
    "tg-emoji",
}


class _EntityParser(HTMLParser):
    """Checks HTML the way Telegram does (known tags, properly nested) and collects the plain text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _ALLOWED_TAGS:
            self.error = self.error or f'unsupported start tag "{tag}"'
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.error = self.error or f'unmatched end tag "{tag}"'
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_html(text: str) -> tuple[str, str | None]:
    """(visible text, error or None)."""
    parser = _EntityParser()
    parser.feed(text)
    parser.close()
    if parser.stack and not parser.error:
        parser.error = f'unclosed tag "{parser.stack[-1]}"'
    stray = _STRAY.search(_TAG.sub("", text))
    if parser.error is None and stray:
        parser.error = f"unescaped {stray.group(0)!r} outside a tag"
    return "".join(parser.text), parser.error


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _decode(value: str) -> Any:
    if value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class FakeTelegramServer(ThreadedAiohttpServer):
    def __init__(self) -> None:
        super().__init__()
        self.rejected_tokens: set[str] = set()
        self.updates: list[dict[str, Any]] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, content)
        self.get_file_reports_size = True  # file_size is optional in getFile's answer too
        self.pushed_at: dict[int, float] = {}  # update_id -> perf_counter when pushed
        self.sent_at: list[float] = []
        self._failures: dict[str, list[tuple[int, dict[str, Any]] | None]] = {}  # None: answer normally
        self.delays: dict[str, float] = {}  # method -> seconds to wait before answering (a slow API)
        self.peer_ports: list[tuple[str, int]] = []  # (method, client port): shows reused connections
        self.confirmed_offset = 0  # updates below this id are confirmed and gone for good
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(100)
        self._new_update: asyncio.Event | None = None
        self._closed = False

    # ---------------------------------------------------------------- addresses
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file/bot"

    def build_app(self) -> web.Application:
        self._new_update = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        return app

    # ---------------------------------------------------------------- scripting
    def fail_next(self, method: str, status: int, count: int = 1, *, after: int = 0, **payload: Any) -> None:
        """The next `count` calls of `method` (after `after` answered normally) answer `status` with
        `payload` (e.g. parameters=...)."""
        body = {"ok": False, "error_code": status, "description": payload.pop("description", "scripted")}
        body.update(payload)
        with self._lock:
            self._failures.setdefault(method, []).extend([None] * after + [(status, body)] * count)

    def drop_next(self, method: str, count: int = 1) -> None:
        """The next `count` calls of `method` lose their connection without any answer."""
        with self._lock:
            self._failures.setdefault(method, []).extend([(0, {})] * count)

    def push_update(self, update: dict[str, Any]) -> int:
        """Queue an update (update_id assigned here) and wake any pending getUpdates."""
        update_id = next(self._update_ids)
        self.pushed_at[update_id] = time.perf_counter()

        def add() -> None:
            self.updates.append({"update_id": update_id, **update})
            assert self._new_update is not None
            self._new_update.set()

        self.call_soon(add)
        return update_id

    def push_message(
        self,
        text: str | None = "hello",
        *,
        chat_id: int = 555,
        user_id: int = 555,
        username: str | None = "alice",
        chat_type: str = "private",
        entities: list[dict[str, Any]] | None = None,
        reply_to_bot: bool = False,
        **extra: Any,
    ) -> int:
        message_id = next(self._message_ids)
        sender: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": "User"}
        if username:
            sender["username"] = username
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type != "private":
            chat["title"] = "A group"
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            **extra,
        }
        if text is not None:
            message[
                "caption" if ("photo" in extra or "document" in extra or "voice" in extra) else "text"
            ] = text
        if entities:
            message["entities"] = entities
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": 1,
                "date": int(time.time()),
                "chat": chat,
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Nano", "username": BOT_USERNAME},
                "text": "earlier answer",
            }
        return self.push_update({"message": message})

    def held_ids(self) -> list[int]:
        """Ids of the updates not yet confirmed (what the next getUpdates would serve)."""
        return self.run(self._held_ids())

    async def _held_ids(self) -> list[int]:
        return [u["update_id"] for u in self.updates if u["update_id"] >= self.confirmed_offset]

    download_delay_s = 0.0  # how long every file download takes (a slow or large attachment)

    def add_file(self, file_id: str, file_path: str, content: bytes) -> dict[str, Any]:
        self.files[file_id] = (file_path, content)
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(content)}

    def closing(self) -> None:
        self._closed = True
        if self._new_update is not None:
            self._new_update.set()

    # ---------------------------------------------------------------- handlers
    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            return dict(await request.json())
        form = await request.post()
        return {k: _decode(v) if isinstance(v, str) else v for k, v in form.items()}

    async def _api(self, request: web.Request) -> web.Response:
        token, method = request.match_info["token"], request.match_info["method"]
        params = await self._params(request)
        if token in self.rejected_tokens:
            self.record(method, {**params, "_rejected": True})
            return self._json({"ok": False, "error_code": 401, "description": "Unauthorized"}, 401)
        if method != "getUpdates":
            self.record(method, params)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        with self._lock:
            self.peer_ports.append((method, peer[1] if peer else 0))
        with self._lock:
            queue = self._failures.get(method)
            failure = queue.pop(0) if queue else None
        if failure:
            if method == "getUpdates":
                self.record(method, {**params, "_failed": failure[0]})
            if failure[0] == 0:  # a network drop: close the socket mid-request
                assert request.transport is not None
                request.transport.close()
                raise ConnectionResetError("dropped by the test")
            return self._json(failure[1], failure[0])
        if self.delays.get(method):
            await asyncio.sleep(self.delays[method])
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return self._ok(True)
        return await handler(params)

    def _json(self, body: Any, status: int = 200) -> web.Response:
        return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")

    def _ok(self, result: Any) -> web.Response:
        return self._json({"ok": True, "result": result})

    def _bad_request(self, description: str) -> web.Response:
        return self._json({"ok": False, "error_code": 400, "description": f"Bad Request: {description}"}, 400)

    async def _m_getMe(self, params: dict[str, Any]) -> web.Response:
        return self._ok(
            {
                "id": BOT_ID,
                "is_bot": True,
                "first_name": "Nano",
                "username": BOT_USERNAME,
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        )

    async def _m_getUpdates(self, params: dict[str, Any]) -> web.Response:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        self.record("getUpdates", params)
        assert self._new_update is not None
        deadline = time.monotonic() + timeout
        self.confirmed_offset = max(self.confirmed_offset, offset)
        while True:
            self.updates = [u for u in self.updates if u["update_id"] >= self.confirmed_offset]
            if self.updates or self._closed or time.monotonic() >= deadline:
                return self._ok(list(self.updates))
            self._new_update.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_update.wait(), deadline - time.monotonic())

    def _message(self, params: dict[str, Any], message_id: int | None = None) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        return {
            "message_id": message_id or next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Nano", "username": BOT_USERNAME},
            "text": str(params.get("text", "")),
        }

    def _check_text(self, params: dict[str, Any]) -> str | None:
        text = str(params.get("text", ""))
        if params.get("parse_mode") == "HTML":
            text, error = parse_html(text)
            if error:
                return f"can't parse entities: {error}"
        if not text.strip():
            return "message text is empty"
        if utf16_len(text) > MAX_TEXT_CHARS:
            return "message is too long"
        return None

    async def _m_sendMessage(self, params: dict[str, Any]) -> web.Response:
        error = self._check_text(params)
        if error:
            return self._bad_request(error)
        self.sent_at.append(time.perf_counter())
        return self._ok(self._message(params))

    async def _m_editMessageText(self, params: dict[str, Any]) -> web.Response:
        error = self._check_text(params)
        if error:
            return self._bad_request(error)
        return self._ok(self._message(params, int(params["message_id"])))

    async def _m_sendDocument(self, params: dict[str, Any]) -> web.Response:
        message = self._message(params)
        message["document"] = {"file_id": "sent", "file_unique_id": "usent"}
        return self._ok(message)

    async def _m_getFile(self, params: dict[str, Any]) -> web.Response:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            return self._bad_request("invalid file_id")
        path, content = self.files[file_id]
        found: dict[str, Any] = {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_path": path}
        if self.get_file_reports_size:
            found["file_size"] = len(content)
        return self._ok(found)

    async def _download(self, request: web.Request) -> web.Response:
        token, path = request.match_info["token"], request.match_info["path"]
        self.record("download", {"path": path})
        await asyncio.sleep(self.download_delay_s)
        if token in self.rejected_tokens:
            return web.Response(status=401)
        for file_path, content in self.files.values():
            if file_path == path:
                return web.Response(body=content, content_type="application/octet-stream")
        return web.Response(status=404)
