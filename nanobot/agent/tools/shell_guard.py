"""The exec tool's path guard: the words of a command that may name a path outside the workspace.

A first filter (with restrictToWorkspace) that gives the model a clear refusal for `cat /etc/passwd`
or `ls ~/.ssh`. Commands compute paths at run time, so nothing rests on it. With the sandbox off it
is all there is: every word starting with a slash counts. In a sandbox (bubblewrap, Landlock), whose
walls hold whatever passes, it must not refuse ordinary commands (an awk address `/error/`,
`ls -d */`, `cut -d '/'`, `$((total / 60))`): it reads the command as bash would, far enough — what
single quotes keep literal, what double quotes expand, where a glob, braces or a variable may still
turn a first path part into the name of a folder at the root.
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


def outside_candidates(command: str, sandboxed: bool) -> list[str]:
    """The absolute paths `command` may name. Without a sandbox (the guard is all there is) every
    word that starts with a slash. In a sandbox, whose walls hold whatever passes here, left out: a
    slash quoted alone (a character: `tr '/' _`, `IFS='/'`), a slash after a glob (`*/`) or going
    on from a quoted word or a variable (`"$dir"/*.txt`), and a path whose first part names nothing
    at the root of this machine (an awk or sed address, a URL path, `print(6 /2)`), unless the shell
    may still expand that part (a glob, braces, a variable; single quotes expand nothing)."""
    if not sandboxed:
        return _ABS_PATH.findall(command)
    text = _ARITHMETIC.sub(" ", command)
    found = []
    quotes = _QuoteScan(text)
    for match in _ABS_PATH.finditer(text):
        raw, start, end = match.group(1), match.start(1), match.end(1)
        quote = quotes.at(start)
        before = text[start - 1] if start else ""
        if before in "*?" and before and text[start - 2 : start - 1] != "$":
            continue  # `ls -d */`, `find -path '*/tests/*'`: inside a glob, relative
        if not quote and before in ("'", '"', "}"):
            continue  # after a closing quote or a variable: `"$dir"/*.txt`, `${out}/x`
        if raw == "/":
            if not _quoted_alone(text, start):
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


class _QuoteScan:
    """The quote a position of `text` stands in: "'", '"' or "" (as bash reads it, without $'…'
    escapes), asked for positions in increasing order: one pass over the text for all of them (a
    scan from the start for each slash took 17 s for a 24 KB command of 8,000 paths)."""

    def __init__(self, text: str) -> None:
        self.text, self.k, self.quote = text, 0, ""

    def at(self, pos: int) -> str:
        text, k, quote = self.text, self.k, self.quote
        while k < pos:
            ch = text[k]
            if ch == "\\" and quote != "'":
                k += 2
                continue
            if ch in ("'", '"') and quote in ("", ch):
                quote = "" if quote == ch else ch
            k += 1
        self.k, self.quote = k, quote
        return quote


def _quoted_alone(text: str, at: int) -> bool:
    """Whether the slash at `at` is quoted alone ('/' or "/"): a character given to a program
    (`tr '/' _`, `IFS='/'`, `split("/")`); `cd '/'` is the root, which the sandbox holds."""
    quote = text[at - 1] if at else ""
    return quote in ("'", '"') and text[at + 1 : at + 2] == quote
