"""Progress on stderr for long work: `memory reindex` through a real process, and the line format
(rate, ETA, in-place redraw on a terminal)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from nanobot.cli.progress import Progress
from tests.conftest import run_cli


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_reindex_reports_progress_and_its_result(home: Path) -> None:
    assert run_cli("onboard", home=home).returncode == 0
    memory = home / "workspace" / "memory"
    for day in range(1, 26):
        (memory / f"2026-01-{day:02d}.md").write_text(f"# Day {day}\n\nThe owner walked {day} km.\n")
    result = run_cli("memory", "reindex", home=home)
    assert result.returncode == 0, result.stderr
    assert re.search(r"indexing files: 26/26 \(\d+(\.\d)?/s\)", result.stderr), result.stderr
    assert result.stdout.startswith("Indexed 26 files")  # the result stays alone on stdout


def test_progress_line_has_rate_and_eta_and_redraws_on_a_terminal(monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr("nanobot.cli.progress.time.monotonic", lambda: now[0])
    out = _Tty()
    progress = Progress(out)
    for t, done in ((0.0, 0), (2.0, 25), (4.0, 50), (8.0, 100)):  # 25 in 2 s: 12.5/s, 75 left: 6 s
        now[0] = t
        progress("embedding chunks", done, 100)
    text = out.getvalue()
    assert "\r\033[Kembedding chunks: 25/100 (12.5/s, ETA 6s)" in text
    assert text.endswith("embedding chunks: 100/100 (12.5/s)\n")
    plain = io.StringIO()
    Progress(plain)("indexing files", 3, 3)
    assert plain.getvalue().startswith("indexing files: 3/3 (") and "\r" not in plain.getvalue()
