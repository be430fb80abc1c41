"""The exec tool's path guard: the words of a command that may name a path outside the workspace.

A first filter in front of the sandbox (with restrictToWorkspace): it gives the model a clear
refusal for `cat /etc/passwd` or `ls ~/.ssh`. Commands compute paths at run time, so nothing rests
on it; but it must neither refuse ordinary commands (an awk address `/error/`, `ls -d */`,
`cut -d '/'`, `$((total / 60))`) nor let through what it refused before. So it reads the command as
bash would, far enough: what single quotes keep literal, what double quotes expand, where a glob,
braces or a variable may still turn a first path part into the name of a folder at the root.
"""

from __future__ import annotations

import os
import re

# A slash that starts a word: not inside one (`a/b`, `-F/`, `~/x`, `x:/y`).
_ABS_PATH = re.compile(r"(?<![\w.~:/-])(/[^\s'\";|&<>()]*)")
# $((total / 60)): arithmetic on one line, holding no command, quote or heredoc
_ARITHMETIC = re.compile(r"\$\(\([^()\n'\"`;\\]*\)\)")
# what bash may still expand in a first path part, unquoted and inside double quotes
_EXPANDS_UNQUOTED = re.compile(r"[{}$`\\,\[*?@!+]")
_EXPANDS_IN_DOUBLE_QUOTES = re.compile(r"[$`\\]")
# `~`, `~user`, `~+`, also where bash expands it after `{`, `,`, `(`, `=` or `:` (`{~root,x}/.profile`)
HOME_TILDE = re.compile(r"(?:^|(?<=[\s{,(=:'\"]))~(?=[A-Za-z_/+-]|$|[\s,})])")
# commands whose lone '/' argument is a character, not a folder (tr '/' '_', cut -d '/')
_DELIMITER_COMMANDS = frozenset(
    {"tr", "cut", "awk", "gawk", "sed", "grep", "egrep", "fgrep", "rg", "printf", "echo", "sort", "paste",
     "join", "column", "split", "csplit"}
)
_OPTION_BEFORE = re.compile(r"(?:^|\s)--?[A-Za-z][\w-]*(?:=|\s*)$")
_SEGMENT_START = re.compile(r"[|;&(\n`]")


def outside_candidates(command: str) -> list[str]:
    """The absolute paths `command` may name. Left out: a slash quoted alone as a character (`tr '/'
    _`), a slash after a glob (`*/`), and a path whose first part names nothing at the root of this
    machine (an awk or sed address, a URL path, `print(6 /2)`), unless the shell may still expand
    that part (a glob, braces, a variable; single quotes expand nothing)."""
    text = _ARITHMETIC.sub(" ", command)
    found = []
    for match in _ABS_PATH.finditer(text):
        raw, start, end = match.group(1), match.start(1), match.end(1)
        quote = _quote_at(text, start)
        before = text[start - 1] if start else ""
        if before in "*?" and before and text[start - 2 : start - 1] != "$":
            continue  # `ls -d */`, `find -path '*/tests/*'`: inside a glob, relative
        if raw == "/":
            if not _delimiter(text, start):
                found.append(raw)
            continue
        first = raw[1:].split("/", 1)[0]
        # `/e'tc'/passwd`, `/@(etc)`: a first part a quote or a parenthesis cuts short; `{/etc,x}`
        as_given = ("/" not in raw[1:] and text[end : end + 1] in ("'", '"', "(")) or before in ("{", ",")
        expands = {"'": None, '"': _EXPANDS_IN_DOUBLE_QUOTES}.get(quote, _EXPANDS_UNQUOTED)
        if not as_given and not (expands and expands.search(first)) and not os.path.lexists("/" + first):
            continue  # it names nothing at the root of this machine
        found.append(raw)
    return found


def _quote_at(text: str, at: int) -> str:
    """The quote `text[at]` stands in: "'", '"' or "" (as bash reads it, without $'…' escapes)."""
    quote, k = "", 0
    while k < at:
        ch = text[k]
        if ch == "\\" and quote != "'":
            k += 2
            continue
        if ch in ("'", '"') and quote in ("", ch):
            quote = "" if quote == ch else ch
        k += 1
    return quote


def _delimiter(text: str, at: int) -> bool:
    """Whether the lone slash at `at` is a character given to a program, not the root folder:
    quoted alone and given to an option (`-d '/'`, `-F'/'`), to a call inside a program's text
    (`split("/")`), or to a command that takes characters (`tr '/' _`). `cd '/'`, `x='/'` and
    `$'/'` are the root."""
    quote = text[at - 1] if at else ""
    if quote not in ("'", '"') or text[at + 1 : at + 2] != quote:
        return False
    before = text[: at - 1]
    if before.endswith("(") or _OPTION_BEFORE.search(before):
        return True
    segment = _SEGMENT_START.split(before)[-1].split()
    words = [word for word in segment if "=" not in word or word.startswith("-")]  # VAR=x tr …
    return bool(words) and os.path.basename(words[0]) in _DELIMITER_COMMANDS
