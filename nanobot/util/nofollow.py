"""Listing and reading files without ever following a symlink.

Used where a planted link must not pull outside data in (the memory index reading the workspace).
A symlink anywhere on the way (a folder, a sub-folder, the file) is skipped, and files are opened with
O_NOFOLLOW and checked to be regular after opening, so a link swapped in between the walk and the
read is refused too. Dot-names are never listed.

`open_folder_beneath(root, folder)` is the same guarantee for a path checked earlier (the file tools
resolve a path, then open it): the folder is opened first and the folder actually opened is checked
to lie under `root`, and everything after goes through that descriptor. A command that swaps a
folder for a link to ~/.ssh between the check and the open gets a refusal, not the key.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from nanobot.util.text import decode_text

_OPEN_FILE = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # O_NONBLOCK: a planted FIFO must not hang the open
_MAX_DEPTH = 4096
FolderCheck = Callable[[Path], None]  # raises to refuse the folder an open landed in


def is_plain_dir(path: Path) -> bool:
    """A real folder (not a symlink to one)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_regular(path: Path) -> bool:
    """A regular file (not a symlink, FIFO or device)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def plain_path(root: Path, rel: str) -> bool:
    """Whether every folder of `rel` ("a/b") below `root` is a real folder, no link on the way."""
    parts = rel.split("/")
    return all(is_plain_dir(root.joinpath(*parts[: i + 1])) for i in range(len(parts)))


def regular_files(base: Path, suffix: str, *, recursive: bool) -> list[Path]:
    """Regular files ending in `suffix` under `base`, sorted; symlinked entries and dot-names are skipped."""
    found: list[Path] = []
    for root, dirs, files in os.walk(base, followlinks=False):
        here = Path(root)
        # os.walk lists a symlink to a folder under `dirs` but never descends it (followlinks=False);
        # dropping it here also keeps it out of the listing.
        dirs[:] = (
            sorted(d for d in dirs if not d.startswith(".") and is_plain_dir(here / d)) if recursive else []
        )
        for name in sorted(files):
            path = here / name
            if name.endswith(suffix) and not name.startswith(".") and is_regular(path):
                found.append(path)
    return found


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _is_beneath(fd: int, root: os.stat_result, avoid: list[os.stat_result]) -> bool:
    """Whether the folder open as `fd` is `root` or below it and not in one of `avoid` on the way,
    found by walking up its `..` entries (what the kernel says now, not what a path said when it was
    checked)."""
    current = os.dup(fd)
    try:
        for _ in range(_MAX_DEPTH):
            here = os.fstat(current)
            if any(_same(here, folder) for folder in avoid):
                return False
            if _same(here, root):
                return True
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=current)
            os.close(current)
            current = parent
            if _same(os.fstat(current), here):
                return False  # the file system's root
        return False
    finally:
        os.close(current)


def open_folder_beneath(
    root: Path, folder: Path, avoid: tuple[Path, ...] = (), check: FolderCheck | None = None
) -> int:
    """A descriptor of `folder`, which must be `root` or lie below it when it is opened, and not in
    one of the `avoid` folders; raises PermissionError when a link swapped in since the path was
    checked leads elsewhere. `check`, when given, is called with the path the kernel gives the folder
    actually opened and raises to refuse it (the caller's own rules, asked about where the open
    landed rather than about the path it was given)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        avoided = [st for st in (_stat_or_none(a) for a in avoid) if st is not None]
        if not _is_beneath(fd, os.stat(root), avoided):
            raise PermissionError(
                errno.EACCES, f"{folder} leads outside {root} or into a folder kept from it"
            )
        if check is not None:
            check(Path(os.readlink(f"/proc/self/fd/{fd}")))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def open_regular(
    path: Path, *, beneath: Path | None = None, avoid: tuple[Path, ...] = (), check: FolderCheck | None = None
) -> int:
    """A read-only descriptor of the regular file at `path`, refusing anything else at open time
    (no symlinks, FIFOs or devices) and a file outside `beneath` (see open_folder_beneath)."""
    if beneath is None:
        fd = os.open(path, os.O_RDONLY | _OPEN_FILE)
    else:
        folder = open_folder_beneath(beneath, path.parent, avoid, check)
        try:
            fd = os.open(path.name, os.O_RDONLY | _OPEN_FILE, dir_fd=folder)
        finally:
            os.close(folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_bytes(
    path: Path,
    *,
    beneath: Path | None = None,
    avoid: tuple[Path, ...] = (),
    max_bytes: int | None = None,
    check: FolderCheck | None = None,
) -> bytes:
    """The file's bytes (open_regular's refusals) and, with `max_bytes`, a larger file refused
    (OSError EFBIG, before anything is read)."""
    fd = open_regular(path, beneath=beneath, avoid=avoid, check=check)
    try:
        size = os.fstat(fd).st_size
        if max_bytes is not None and size > max_bytes:
            raise OSError(errno.EFBIG, f"{path.name} is larger than {max_bytes} bytes ({size})")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            if max_bytes is None:
                return fh.read()
            data = fh.read(max_bytes + 1)  # a file growing meanwhile is not read past the limit
        if len(data) > max_bytes:
            raise OSError(errno.EFBIG, f"{path.name} is larger than {max_bytes} bytes")
        return data
    finally:
        os.close(fd)


def read_regular_head(path: Path, max_bytes: int, *, beneath: Path | None = None) -> tuple[str, bool]:
    """The file's first `max_bytes` at most, cut after its last whole line when there is more (a
    character is never split), decoded as read_regular_text does; and whether the file goes on."""
    fd = open_regular(path, beneath=beneath)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    finally:
        os.close(fd)
    more = len(data) > max_bytes
    if more:
        data = data[:max_bytes]
        data = data[: data.rfind(b"\n") + 1] or data
    return decode_text(data), more


def read_regular_text(path: Path, *, beneath: Path | None = None) -> str:
    """read_regular_bytes decoded as text (UTF-8, else Windows-1252: `decode_text`)."""
    return decode_text(read_regular_bytes(path, beneath=beneath))
