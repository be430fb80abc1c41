"""The `message` tool: send a message to a chat (the current one by default)."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.agent.tools.files import PathGuard
from nanobot.agent.tools.policy import TrustPolicy
from nanobot.bus.events import OutboundFile, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.secrets import mask_registered_bytes, masked_pieces, registered_in
from nanobot.util.nofollow import read_regular_bytes
from nanobot.util.text import decode_text, utf16_encoding

MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024  # the most any channel takes (Telegram: 50 MB)
MAX_ATTACHMENTS = 10  # per message (Discord's limit); they are held in memory until sent
CONFIRM_TIMEOUT_S = 30.0  # a send to another chat is awaited this long (retries under rate limits)


class MessageTool(Tool):
    name = "message"
    description = (
        "Send a message to the user now (e.g. a progress update or a file), or to another chat by "
        "channel and chat_id. Your final answer is delivered anyway; do not repeat it here."
    )
    parameters = {
        "type": "object",
        "properties": {
            "content": {"type": "string"},
            "channel": {"type": "string", "description": "telegram, discord, cli (default: this chat's)"},
            "chat_id": {"type": "string", "description": "target chat (default: this chat)"},
            "media": {"type": "array", "items": {"type": "string"}, "description": "file paths to attach"},
        },
        "required": ["content"],
    }

    def __init__(
        self,
        bus: MessageBus,
        workspace: Path,
        policy: TrustPolicy | None = None,
        confirm_timeout_s: float = CONFIRM_TIMEOUT_S,
        *,
        restrict: bool = True,
        private_dirs: tuple[Path, ...] = (),
        private_files: tuple[Path, ...] = (),
    ) -> None:
        self.bus = bus
        # nanobot's own files (NANOBOT_HOME, the config, the log) are never attached, whatever
        # restrictToWorkspace says: their bytes would leave unmasked, keys and tokens in clear
        self._private_dirs = tuple(d.resolve() for d in private_dirs)
        self._private_files = frozenset(f.resolve() for f in private_files)
        # an attachment is found and opened as read_file finds and opens a file: inside the workspace
        # unless tools.restrictToWorkspace is false, and the trust policy asked again about the
        # folder the open landed in
        self.guard = PathGuard(workspace, restrict, policy=policy)
        self.confirm_timeout_s = confirm_timeout_s

    def _read_attachments(self, media: list[str], ctx: ToolContext) -> list[OutboundFile]:
        """Each attachment read once, here, as the trust policy allows it in this context: a missing
        one, a folder or one outside was dropped by the channel with a log line (the model told the
        user it was attached), and a path the channel opened again later could meanwhile be a link
        to memory/ (a group's command swapped one in: the owner's MEMORY.md went to the group)."""
        if len(media) > MAX_ATTACHMENTS:
            raise ToolError(f"at most {MAX_ATTACHMENTS} files per message; send the others in another")
        files: list[OutboundFile] = []
        for item in media:
            try:
                path = self.guard.resolve(item)
            except ToolError as exc:
                raise ToolError(f"cannot attach {item!r}: {exc}") from None
            except (OSError, RuntimeError) as exc:  # a symlink loop
                raise ToolError(f"cannot attach {item!r}: {exc}") from None
            if path.is_dir():
                raise ToolError(f"cannot attach {item!r}: a folder")
            if self._nanobots_own(path):
                raise ToolError(f"cannot attach {item!r}: nanobot's own files (config, keys, logs) are never sent")
            if path.is_relative_to("/proc") or path.is_relative_to("/sys"):
                # a process's environment and command line hold the daemon's keys in clear
                raise ToolError(f"cannot attach {item!r}: files of the kernel's /proc and /sys are never sent")
            try:
                # the folder actually opened is asked about again, the file opened without following
                # a link: what is sent is what the policy allowed, whatever was swapped in since
                root, avoid, check = self.guard.open_limits(path, ctx, self.name, attached=True)
                data = read_regular_bytes(path, beneath=root, avoid=avoid, max_bytes=MAX_ATTACHMENT_BYTES, check=check)
            except FileNotFoundError:
                raise ToolError(f"cannot attach {item!r}: no such file") from None
            except OSError as exc:
                if exc.errno == errno.EFBIG:
                    raise ToolError(f"cannot attach {item!r}: larger than {MAX_ATTACHMENT_BYTES // 2**20} MB") from None
                raise ToolError(f"cannot attach {item!r}: {exc.strerror or exc}") from None
            try:
                files.append(OutboundFile(path.name, _masked(data)))
            except ToolError as exc:
                raise ToolError(f"cannot attach {item!r}: {exc}") from None
        return files

    def _nanobots_own(self, path: Path) -> bool:
        """Whether `path` (resolved) is nanobot's config, log or another file of NANOBOT_HOME outside
        the workspace (which may lie inside NANOBOT_HOME)."""
        if any(path.parent == own.parent and _copy_of(path.name, own.name) for own in self._private_files):
            return True
        inside = path.is_relative_to(self.guard.workspace)
        return not inside and any(path.is_relative_to(d) for d in self._private_dirs)

    async def execute(
        self,
        ctx: ToolContext,
        content: str,
        channel: str | None = None,
        chat_id: str | None = None,
        media: list[str] | None = None,
        **_: Any,
    ) -> str:
        if not content.strip() and not media:
            raise ToolError("content is empty")
        files = self._read_attachments(media or [], ctx)  # the registry checked it is a list of strings
        target_channel = str(channel or ctx.channel)
        target_chat = str(chat_id or ctx.chat_id)
        elsewhere = (target_channel, target_chat) != (ctx.channel, ctx.chat_id)
        # Another chat, or a file: wait until the channel sent it, so the model does not tell the
        # user "done" for a message that never left (a channel not running, a chat that does not
        # exist, an upload the platform refused).
        sent = asyncio.get_running_loop().create_future() if elsewhere or media else None
        await self.bus.publish_outbound(
            OutboundMessage(
                channel=target_channel,
                chat_id=target_chat,
                content=content,
                files=files,
                sent=sent,
            )
        )
        if sent is not None:
            try:
                await asyncio.wait_for(sent, self.confirm_timeout_s)
            except TimeoutError:
                return f"Message queued for {target_channel}:{target_chat}; not confirmed as sent yet"
            except Exception as exc:  # noqa: BLE001 - what the channel said, for the model to report
                raise ToolError(f"the message to {target_channel}:{target_chat} was not sent: {exc}") from None
        return f"Message sent to {target_channel}:{target_chat}"


def _copy_of(name: str, own: str) -> bool:
    """Whether `name` is the file `own` or a copy of it beside it: a rotated log (loguru names it
    `nanobot.2026-11-27_17-24-53_924339.log`, compressed `….log.gz`), a `config.json.bak`."""
    stem, dot, suffix = own.rpartition(".")
    if name == own or name.startswith(own + "."):
        return True
    return bool(dot) and name.startswith(stem + ".") and f".{suffix}" in name[len(stem):]


def _masked(data: bytes) -> bytes:
    """An attachment with the known secrets masked where read_file shows them masked (a project's
    .env holding nanobot's provider key), every other byte as it was: the text is read as read_file
    reads it (`decode_text`: UTF-8, a Windows-1252 line, UTF-16 by its byte order mark), and each
    masked piece — ASCII: keys and token shapes — is replaced in the bytes in the file's own
    encoding. What is still there after that (a piece across lines of two encodings) and a binary
    file holding one of nanobot's keys or a token shape are refused: masking would corrupt it."""
    utf16 = utf16_encoding(data)
    text = decode_text(data)
    if b"\0" in data and utf16 is None:
        if registered_in(data) or masked_pieces(data.decode("latin-1")) or masked_pieces(text):
            raise ToolError("it holds a key or a token, which are never sent")
        return data
    encodings = (utf16,) if utf16 else ("utf-8", "cp1252")  # decode_text reads a line not UTF-8 as cp1252
    for piece, replacement in sorted(masked_pieces(text).items(), key=lambda item: -len(item[0])):
        for encoding in encodings:
            try:
                data = data.replace(piece.encode(encoding), replacement.encode(encoding))
            except UnicodeEncodeError:
                continue
    data = mask_registered_bytes(data)  # also where the text was read otherwise (a stray byte order mark)
    if masked_pieces(decode_text(data)):
        raise ToolError("it holds a key or a token that cannot be masked in place, and they are never sent")
    return data
