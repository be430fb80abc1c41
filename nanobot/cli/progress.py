"""Progress of long work on stderr: done/total, rate and ETA.

On a terminal the line is redrawn in place; otherwise (journald, a pipe, a test) a plain line is
written at most every LINE_INTERVAL_S seconds and once at the end, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

REDRAW_INTERVAL_S = 0.1
LINE_INTERVAL_S = 5.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """Call it as `progress(phase, done, total)`; `finish()` ends the current line."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self._phase = ""
        self._started = 0.0
        self._shown_at = 0.0
        self._open = False

    def line(self, phase: str, done: int, total: int) -> str:
        elapsed = max(time.monotonic() - self._started, 1e-6)
        rate = done / elapsed
        text = f"{phase}: {done}/{total} ({rate:.1f}/s"
        if 0 < done < total and rate > 0:
            text += f", ETA {_duration((total - done) / rate)}"
        return text + ")"

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != self._phase:
            self.finish()
            self._phase, self._started, self._shown_at = phase, now, 0.0
        last = done >= total
        interval = REDRAW_INTERVAL_S if self.tty else LINE_INTERVAL_S
        if not last and now - self._shown_at < interval:
            return
        self._shown_at = now
        text = self.line(phase, done, total)
        if self.tty:
            self.stream.write("\r\033[K" + text)
            self._open = not last
            if last:
                self.stream.write("\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
