"""TerminalChannel: the terminal as a channel on the bus (`nanobot agent`).

Each line the user types is published as an InboundMessage on the bus, like a Telegram update,
and goes through the agent loop: the per-session lock (a one-shot `nanobot agent` in the same
process as other publishers never overlaps a turn on the same session), the concurrency limit
and the slash commands. Lines are published as soon as they are read, so `/stop` reaches the turn
that is running; replies are printed in the order of the lines that asked for them (a turn
cancelled by `/stop` prints nothing, the `/stop` prints "Stopped.").

Only replies, and what the agent sends to this chat with the `message` tool, go to stdout;
the banner goes to stderr and nothing is prompted when stdin is not a TTY. Input is read by a
daemon thread one line at a time, and the next line only once the previous one is on the bus,
so a long piped input waits in the pipe (bounded) and Ctrl-C at the prompt never hangs the exit.

Replies lose their control characters wherever they go (a steered model's escape sequences could
clear the screen, hide text or write the clipboard, also through `| tee` or a file later shown with
`cat`); on a terminal a reply arriving while the user types is shown
above the prompt, which is drawn again with what was typed, and lines are read through readline
(the terminal's own line buffer cut a pasted line at 4,095 characters).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any, TextIO

from nanobot.bus.events import ChannelUnavailable, InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.errors import EXIT_FAILURE
from nanobot.util.text import printable, typed_line

EXIT_WORDS = frozenset({"/exit", "/quit", "exit", "quit", ":q"})
BANNER = "nanobot — interactive chat. /new starts a fresh session, /help lists commands, /exit quits."
PROMPT = "You: "

ReplyFuture = asyncio.Future[OutboundMessage | None]
_CLEAR_LINE = "\r\x1b[K"
_PASTE_MODE_OFF = b"\x1b[?2004l"
# signals that end the chat by their default action: the terminal is restored first (Ctrl-C ends it
# through KeyboardInterrupt, which the chat's own finally covers)
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)



def _readline() -> ModuleType | None:
    """The readline module (line editing, no length limit), when this Python has it. With GNU
    readline, a paste is one message: bracketed paste keeps its line breaks and indentation in the
    line (a pasted function became one turn per line, each without its indentation)."""
    try:
        import readline
    except ImportError:  # a Python built without it
        return None
    if "libedit" not in (readline.__doc__ or ""):  # libedit reads another syntax and has no such mode
        readline.parse_and_bind("set enable-bracketed-paste on")
    return readline


def _write_to_terminal(data: bytes) -> None:
    """`data` to the controlling terminal itself (stdout may be a pipe); nothing when there is none."""
    with contextlib.suppress(OSError):
        fd = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _terminal_restored(stdin: TextIO | None) -> Iterator[None]:
    """The terminal's settings as they were, whatever ends the chat. readline turns echo and line
    editing off while it waits for a line, and puts them back only when the line is read: a Ctrl-C,
    a Ctrl-\\ or a SIGTERM at the prompt left the shell without echo and with Enter not ending a line,
    and in bracketed-paste mode (a paste into the shell then came wrapped in ESC[200~ … ESC[201~)."""
    try:
        import termios

        fd = stdin.fileno() if stdin is not None else -1
        saved = termios.tcgetattr(fd) if fd >= 0 else None
    except (ImportError, OSError, ValueError, io.UnsupportedOperation):  # no terminal to keep
        saved = None
    if saved is None:
        yield
        return

    def restore(*, at_prompt: bool = False) -> None:
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        if at_prompt:  # readline left waiting: paste mode off, and the shell's prompt on a line of its own
            _write_to_terminal(_PASTE_MODE_OFF + b"\r\n")

    def on_signal(signum: int, _frame: object) -> None:
        restore(at_prompt=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # ended by the signal, as before (exit status 128 + signum)

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in ENDING_SIGNALS:
            previous[signum] = signal.signal(signum, on_signal)
    cut_short = True
    try:
        yield
        cut_short = False
    finally:
        restore(at_prompt=cut_short)  # Ctrl-C (a cancellation) or an error, not /exit or end of input
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class TerminalChannel:
    name = "cli"

    def __init__(
        self,
        bus: MessageBus,
        session_key: str,
        *,
        tty: bool,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        channel, _, chat_id = session_key.partition(":")
        self.bus = bus
        self.session_key = session_key
        self.channel = channel or "cli"
        self.chat_id = chat_id or "direct"
        self.tty = tty
        self.stdin = stdin or sys.stdin
        if isinstance(self.stdin, io.TextIOWrapper):
            # a line in another encoding is read in the locale's (typed_line); strict decoding
            # raised, which ended the chat as if the input had ended
            self.stdin.reconfigure(errors="surrogateescape")
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.screen = self.stdout.isatty()  # a terminal shows what we print: no control characters
        self._readline = _readline() if tty else None
        self._conversing = False  # an interactive chat shows a prompt (not `agent -m`)
        self._input_ended = False  # Ctrl-D or /exit read: no prompt is drawn again

    # ------------------------------------------------------------------ inbound
    def _inbound(self, text: str, reply: ReplyFuture) -> InboundMessage:
        return InboundMessage(
            channel=self.channel,
            sender_id="user",
            chat_id=self.chat_id,
            content=text,
            session_key_override=self.session_key,
            reply_future=reply,
        )

    async def _publish(self, text: str) -> ReplyFuture:
        reply: ReplyFuture = asyncio.get_running_loop().create_future()
        await self.bus.publish_inbound(self._inbound(text, reply))  # waits while the bus is full
        return reply

    async def one_shot(self, text: str) -> OutboundMessage | None:
        """`agent -m`: one message, its reply printed; returns the reply (None when there is none:
        the `message` tool already said everything)."""
        out = await (await self._publish(text))
        if out is not None:
            print(printable(out.content), file=self.stdout, flush=True)
        return out

    async def converse(self) -> int:
        """Interactive chat until /exit or end of input; returns the exit code: 0, or with piped
        input 1 when some turn failed (a script cannot tell the failure notice from an answer)."""
        self._conversing = True
        with _terminal_restored(self.stdin if self.tty else None), self._terminal_as_fd1():
            return await self._converse()

    @contextlib.contextmanager
    def _terminal_as_fd1(self) -> Iterator[None]:
        """`nanobot agent | tee chat.log`: CPython's input() uses readline only when file descriptor 1
        is a terminal too; without it the terminal's line buffer cut a typed line at 4,095 characters
        and a paste became one message per line. For the chat, descriptor 1 is the terminal (the
        prompt goes there, not into the log) and the replies go on into the pipe through a copy."""
        if not self.tty or self.screen or self._readline is None or self.stdout is not sys.stdout:
            yield
            return
        try:
            terminal = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
        except OSError:  # no controlling terminal: lines are read as before
            yield
            return
        original = self.stdout
        original.flush()
        piped = os.dup(1)
        os.dup2(terminal, 1)
        os.close(terminal)
        self.stdout = open(piped, "w", encoding=original.encoding, errors=original.errors)  # noqa: SIM115
        try:
            yield
        finally:
            with contextlib.suppress(OSError):  # the reader of the pipe is gone
                self.stdout.flush()
                sys.stdout.flush()  # the prompt, on the terminal
            os.dup2(piped, 1)
            self.stdout.close()
            self.stdout = original

    async def _converse(self) -> int:
        if self.tty:
            self._notice(BANNER)
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        want_next = threading.Semaphore(1)
        self._start_reader(lines, want_next)
        pending: asyncio.Queue[ReplyFuture | None] = asyncio.Queue()
        printer = asyncio.create_task(self._print_in_order(pending), name="terminal-replies")
        try:
            while (line := await self._next_line(lines, printer)) is not None:
                text = line.strip()
                if text.lower() in EXIT_WORDS:
                    break
                if text:
                    # a paste of several lines keeps its first line's indentation (code)
                    said = line.lstrip("\r\n").rstrip() if "\n" in line.strip() else text
                    pending.put_nowait(await self._publish(said))
                want_next.release()
            pending.put_nowait(None)
            failed = await printer  # every reply asked for so far is printed before the exit
        finally:
            printer.cancel()
        return EXIT_FAILURE if failed and not self.tty else 0

    @staticmethod
    async def _next_line(lines: asyncio.Queue[str | None], printer: asyncio.Task[bool]) -> str | None:
        """The next line typed, unless printing the replies failed first (`| head` left: its error
        ends the chat; with the prompt on the terminal nothing else would, and each line typed
        still ran a turn nobody saw)."""
        getter = asyncio.ensure_future(lines.get())
        try:
            await asyncio.wait({getter, printer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if printer.done():
            printer.result()  # the printer's error (a BrokenPipeError: exit 141)
        return getter.result() if getter.done() and not getter.cancelled() else None

    def _start_reader(self, lines: asyncio.Queue[str | None], want_next: threading.Semaphore) -> None:
        loop = asyncio.get_running_loop()

        def put(line: str | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the process is exiting
                loop.call_soon_threadsafe(lines.put_nowait, line)

        def run() -> None:
            while True:
                want_next.acquire()
                line = self._read_line()
                ended = line is None or line.strip().lower() in EXIT_WORDS
                self._input_ended = ended  # before the line is handed over: a reply may follow at once
                put(line)
                if ended:
                    return

        # A daemon thread, not to_thread: a blocked read must not hold up the interpreter's exit.
        threading.Thread(target=run, name="terminal-input", daemon=True).start()

    def _read_line(self) -> str | None:
        try:
            if self.tty:
                return typed_line(input(PROMPT))
            return typed_line(self.stdin.readline()) or None
        except (EOFError, OSError, ValueError):  # closed stdin ends the chat like end of input
            return None

    async def _print_in_order(self, pending: asyncio.Queue[ReplyFuture | None]) -> bool:
        """Print the replies as they come, in order; whether some turn failed."""
        failed = False
        while (reply := await pending.get()) is not None:
            out = await reply
            if out is not None:  # None: cancelled by /stop, which answers for it
                self._show(out.content)
                failed = failed or bool(out.metadata.get("failed"))
        return failed

    # ------------------------------------------------------------------ outbound
    async def show_outbound(self) -> None:
        """Print what the agent sends on its own to this channel (the `message` tool) like a reply;
        progress, typing and stream events are not shown in the terminal."""
        while True:
            out = await self.bus.consume_outbound()
            if out.channel != self.channel:  # no chat channel runs beside the terminal
                out.settle(ChannelUnavailable(f"channel {out.channel!r} does not run in `nanobot agent`"))
            elif out.kind == "message" and (out.content or out.files):
                # a file sent without text is named, and settled like any message (its sender waits)
                shown = [out.content] if out.content else []
                shown += [f"[file: {file.name}, {len(file.data)} bytes]" for file in out.files]
                self._show("\n".join(shown))
                out.settle()

    def _show(self, text: str) -> None:
        if not (self.tty and self._conversing):  # piped input, or `agent -m`: the text alone
            print(printable(text), file=self.stdout, flush=True)
            return
        if not self.screen:  # `nanobot agent | tee chat.log`: the user still watches it
            print(f"\nnanobot: {printable(text)}\n", file=self.stdout, flush=True)
            return
        # The reader waits at the prompt (maybe with half a line typed): the reply goes above it,
        # then the prompt and the typed text are drawn again, unless the input has ended (Ctrl-D
        # during a turn: a prompt drawn then would be left for the shell to write after).
        typed = self._readline.get_line_buffer() if self._readline is not None else ""
        prompt = "" if self._input_ended else f"{PROMPT}{typed}"
        self.stdout.write(f"{_CLEAR_LINE}nanobot: {printable(text)}\n\n{prompt}")
        self.stdout.flush()

    def _notice(self, text: str) -> None:
        print(text, file=self.stderr, flush=True)
