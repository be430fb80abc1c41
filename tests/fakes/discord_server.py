"""A fake Discord REST API + websocket gateway on 127.0.0.1 for discord.py.

Point discord.py at `server.api_base` (Route.BASE) and `server.gateway_url`. The gateway sends
HELLO, answers IDENTIFY with READY + GUILD_CREATE, RESUME with RESUMED, heartbeats with ACK, and
dispatches MESSAGE_CREATE for `push_message`. REST serves /users/@me, /gateway/bot, channel
messages (with the 2000-character limit), typing and attachment downloads. JSON answers carry
Content-Type exactly `application/json` (discord.py compares it literally) and, like Discord's API
behind its proxy, a `Via` header (discord.py takes a 429 without one for a Cloudflare ban and does
not retry it); set `via` to None to answer like Cloudflare.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes._aiohttp_thread import ThreadedAiohttpServer

MAX_CONTENT_CHARS = 2000
BOT_ID = 900000000000000001
GUILD_ID = 910000000000000001
BOT_ROLE_ID = 910000000000000777  # the bot's own managed role, which Discord gives every bot
GUILD_CHANNEL_ID = 920000000000000001
THREAD_ID = 930000000000000001
DM_CHANNEL_ID = 940000000000000001
USER_ID = 950000000000000001
HEARTBEAT_INTERVAL_MS = 41250
_snowflakes = itertools.count(960000000000000001)


def _user(user_id: int, name: str, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": name,
        "discriminator": "0",
        "global_name": name,
        "avatar": None,
        "bot": bot,
    }


class FakeDiscordServer(ThreadedAiohttpServer):
    def __init__(self) -> None:
        super().__init__()
        self.rejected_tokens: set[str] = set()
        self.sockets: list[web.WebSocketResponse] = []
        self.attachments: dict[str, bytes] = {}
        self.download_delay_s = 0.0  # an attachment download takes this long (a big photo)
        self.pushed_at: dict[str, float] = {}
        self._failures: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self._seq = itertools.count(1)
        self.via: str | None = "1.1 google"

    # ---------------------------------------------------------------- addresses
    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{name}", self._attachment)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        return app

    # ---------------------------------------------------------------- scripting
    def fail_next(self, action: str, status: int, count: int = 1, **body: Any) -> None:
        """The next `count` REST calls of `action` (e.g. "send_message") answer `status` with `body`."""
        with self._lock:
            self._failures.setdefault(action, []).extend([(status, body or {"message": "scripted"})] * count)

    def add_attachment(self, name: str, content: bytes, content_type: str = "image/png") -> dict[str, Any]:
        self.attachments[name] = content
        return {
            "id": str(next(_snowflakes)),
            "filename": name,
            "size": len(content),
            "url": f"http://127.0.0.1:{self.port}/attachments/{name}",
            "proxy_url": f"http://127.0.0.1:{self.port}/attachments/{name}",
            "content_type": content_type,
        }

    def push_message(
        self,
        content: str = "hello",
        *,
        channel_id: int = DM_CHANNEL_ID,
        guild: bool = False,
        author_id: int = USER_ID,
        author_name: str = "alice",
        author_bot: bool = False,
        mention_bot: bool = False,
        mention_bot_role: bool = False,
        reply_to_bot: bool = False,
        attachments: list[dict[str, Any]] | None = None,
        message_type: int = 0,
        guild_id: int = GUILD_ID,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """Dispatch MESSAGE_CREATE to every connected client; returns the message id.

        `message_type` is Discord's message type (0 default; 6 pin, 7 member join... are system ones);
        `guild_id` another than GUILD_ID names a guild the client never heard of.
        """
        message_id = str(next(_snowflakes))
        data: dict[str, Any] = {
            "id": message_id,
            "channel_id": str(channel_id),
            "author": _user(author_id, author_name, author_bot),
            "content": content,
            "timestamp": datetime.now(UTC).isoformat(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mention_roles": [str(BOT_ROLE_ID)] if mention_bot_role else [],
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "type": message_type,
            "mentions": [_user(BOT_ID, "nanobot", True)] if mention_bot else [],
        }
        if guild:
            data["guild_id"] = str(guild_id)
            data["member"] = {
                "roles": [],
                "joined_at": "2024-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
            }
        if reply_to_bot:
            earlier = str(next(_snowflakes))
            data["message_reference"] = {"message_id": earlier, "channel_id": str(channel_id)}
            data["referenced_message"] = {
                **data,
                "id": earlier,
                "author": _user(BOT_ID, "nanobot", True),
                "content": "earlier answer",
                "mentions": [],
            }
            data["type"] = 19
        data.update(extra or {})  # fields of other kinds of message (a forward's snapshots)
        self.pushed_at[message_id] = time.perf_counter()
        self.call_soon(self._spawn_dispatch, "MESSAGE_CREATE", data)
        return message_id

    def _spawn_dispatch(self, event: str, data: dict[str, Any]) -> None:
        for ws in list(self.sockets):
            self.loop.create_task(self._dispatch(ws, event, data))

    async def _dispatch(self, ws: web.WebSocketResponse, event: str, data: dict[str, Any]) -> None:
        if not ws.closed:
            await ws.send_str(json.dumps({"op": 0, "t": event, "s": next(self._seq), "d": data}))

    def drop_connections(self) -> None:
        """Close every gateway connection abnormally (the client should reconnect and resume)."""
        for ws in list(self.sockets):
            self.call_soon(lambda w=ws: self.loop.create_task(w.close(code=4000, message=b"dropped")))

    # ---------------------------------------------------------------- gateway
    def _guild(self) -> dict[str, Any]:
        channel = {
            "id": str(GUILD_CHANNEL_ID),
            "type": 0,
            "name": "general",
            "position": 0,
            "guild_id": str(GUILD_ID),
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
        }
        thread = {
            "id": str(THREAD_ID),
            "type": 11,
            "name": "a thread",
            "guild_id": str(GUILD_ID),
            "parent_id": str(GUILD_CHANNEL_ID),
            "owner_id": str(USER_ID),
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": "2024-01-01T00:00:00+00:00",
                "locked": False,
            },
        }
        role = {
            "id": str(GUILD_ID),
            "name": "@everyone",
            "permissions": "1071698660929",
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
        }
        bot_role = {**role, "id": str(BOT_ROLE_ID), "name": "nanobot", "position": 1, "managed": True,
                    "mentionable": True, "tags": {"bot_id": str(BOT_ID)}}
        return {
            "id": str(GUILD_ID),
            "name": "Test guild",
            "owner_id": str(USER_ID),
            "member_count": 2,
            "roles": [role, bot_role],
            "emojis": [],
            "stickers": [],
            "features": [],
            "channels": [channel],
            "threads": [thread],
            "members": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "unavailable": False,
            "large": False,
        }

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": HEARTBEAT_INTERVAL_MS}}))
        try:
            async for raw in ws:
                if raw.type != WSMsgType.TEXT:
                    continue
                msg = json.loads(raw.data)
                op, data = msg.get("op"), msg.get("d") or {}
                self.record(f"gateway_op_{op}", data if isinstance(data, dict) else {"d": data})
                if op == 1:  # heartbeat
                    await ws.send_str(json.dumps({"op": 11}))
                elif op == 2:  # identify
                    if data.get("token") in self.rejected_tokens:
                        await ws.close(code=4004, message=b"Authentication failed.")
                        break
                    self.sockets.append(ws)
                    await self._dispatch(
                        ws,
                        "READY",
                        {
                            "v": 10,
                            "user": _user(BOT_ID, "nanobot", True),
                            "session_id": "fake-session",
                            "resume_gateway_url": self.gateway_url,
                            "guilds": [{"id": str(GUILD_ID), "unavailable": True}],
                            "application": {"id": str(BOT_ID), "flags": 0},
                            "private_channels": [],
                        },
                    )
                    await self._dispatch(ws, "GUILD_CREATE", self._guild())
                elif op == 6:  # resume
                    self.sockets.append(ws)
                    await self._dispatch(ws, "RESUMED", {})
        finally:
            if ws in self.sockets:
                self.sockets.remove(ws)
        return ws

    # ---------------------------------------------------------------- REST
    def _json(self, body: Any, status: int = 200) -> web.Response:
        # Exactly "application/json": aiohttp's json_response would add "; charset=utf-8".
        headers = {"Content-Type": "application/json"}
        if self.via:
            headers["Via"] = self.via
        return web.Response(body=json.dumps(body).encode(), status=status, headers=headers)

    async def _rest(self, request: web.Request) -> web.Response:
        path, method = request.match_info["path"], request.method
        token = request.headers.get("Authorization", "").removeprefix("Bot ")
        action, params = await self._classify(request, method, path)
        self.record(action, params)
        if token in self.rejected_tokens:
            return self._json({"message": "401: Unauthorized", "code": 0}, 401)
        with self._lock:
            queue = self._failures.get(action)
            failure = queue.pop(0) if queue else None
        if failure:
            return self._json(failure[1], failure[0])
        if action == "get_me":
            return self._json(
                _user(BOT_ID, "nanobot", True) | {"verified": True, "mfa_enabled": False, "flags": 0}
            )
        if action == "application":
            return self._json(
                {
                    "id": str(BOT_ID),
                    "name": "nanobot",
                    "description": "",
                    "icon": None,
                    "bot_public": False,
                    "bot_require_code_grant": False,
                    "verify_key": "00",
                    "owner": _user(USER_ID, "alice"),
                    "flags": 0,
                }
            )
        if action == "gateway_bot":
            return self._json(
                {
                    "url": self.gateway_url,
                    "shards": 1,
                    "session_start_limit": {
                        "total": 1000,
                        "remaining": 1000,
                        "reset_after": 0,
                        "max_concurrency": 1,
                    },
                }
            )
        if action == "typing":
            return web.Response(status=204)
        if action == "send_message":
            content = str(params.get("content") or "")
            if len(content.encode("utf-16-le")) // 2 > MAX_CONTENT_CHARS:
                return self._json({"message": "Invalid Form Body", "code": 50035}, 400)
            return self._json(self._message(path.split("/")[1], content))
        return self._json({})

    async def _classify(self, request: web.Request, method: str, path: str) -> tuple[str, dict[str, Any]]:
        parts = path.split("/")
        params: dict[str, Any] = {"path": path}
        if method == "POST" and len(parts) == 3 and parts[0] == "channels" and parts[2] == "messages":
            if request.content_type.startswith("multipart/"):
                files = []
                async for part in await request.multipart():
                    if part.name == "payload_json":
                        params.update(json.loads(await part.text()))
                    else:
                        files.append({"filename": part.filename, "size": len(await part.read())})  # type: ignore[union-attr]
                params["files"] = files
            else:
                params.update(await request.json())
            params["channel_id"] = parts[1]
            return "send_message", params
        if method == "POST" and len(parts) == 3 and parts[2] == "typing":
            return "typing", {"channel_id": parts[1]}
        if path == "users/@me":
            return "get_me", params
        if path == "oauth2/applications/@me":
            return "application", params
        if path.startswith("gateway"):
            return "gateway_bot", params
        return f"{method} {path}", params

    def _message(self, channel_id: str, content: str) -> dict[str, Any]:
        return {
            "id": str(next(_snowflakes)),
            "channel_id": channel_id,
            "author": _user(BOT_ID, "nanobot", True),
            "content": content,
            "timestamp": datetime.now(UTC).isoformat(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
        }

    async def _attachment(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.record("attachment", {"name": name})
        if name not in self.attachments:
            return web.Response(status=404)
        await asyncio.sleep(self.download_delay_s)
        return web.Response(body=self.attachments[name], content_type="application/octet-stream")
