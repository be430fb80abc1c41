"""Private, crash-safe files: every file nanobot writes is 0600 and every folder it creates 0700.

- `atomic_write(path, data)`: temp file in the same folder, fsync, `os.replace`; a crash leaves the old
  file or the new one, never half of either, and the temp file is removed when anything fails;
  `beneath=root` also refuses to write anywhere but under `root` (a link swapped in meanwhile).
- `append_whole(fd, data, end)`: write all of `data` or cut the file back to `end` and raise.
- `append_locked(path, text)`: one append under an exclusive OS lock (`flock`), so two processes
  never interleave lines.
- `open_private(path, flags)`: open (creating it 0600) a regular file, never through a symlink at
  the file itself; with `beneath=root` not through one on the way either (the folder opened must
  lie under `root`). A command run in the workspace can plant links: nanobot's own appends and locks
  must not follow one to ~/.bashrc. `append_locked` and `file_lock` take the same `beneath`.
- `file_lock(path)` / `fd_lock(fd)`: exclusive (or shared) `flock` on a lock file or an open file;
  `try_flock(fd)`: take it without waiting, False when another holder has it.
- `ensure_private_dir(path)`: create missing folders 0700 (umask cannot widen them).
- `unused_path(folder, stem, suffix)`: `stem + suffix`, or with a -2, -3 ... suffix when taken
  (`numbered_names` gives the names tried, for callers that create the file themselves).
- `cannot_write(exc)`: whether an OSError says the disk is full, read-only or not ours to write
  (what a user can fix), rather than a bug.
- `repair_private(root)`: tighten an existing file or tree (installations from before files were private):
  group/other bits are removed, symlinks are never followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from nanobot.util.nofollow import FolderCheck, open_folder_beneath

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_WRITE_FAILURES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})


def cannot_write(exc: BaseException) -> bool:
    """A full disk or quota, a read-only mount, a folder not ours to write, a failing disk."""
    return isinstance(exc, OSError) and exc.errno in _WRITE_FAILURES


def ensure_private_dir(path: Path, mode: int = PRIVATE_DIR_MODE) -> Path:
    """Create `path` and its missing parents with `mode`; existing folders are left as they are."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=mode)
        except FileExistsError:
            continue  # another process created it between our check and mkdir
        os.chmod(folder, mode)  # mkdir's mode is filtered through the umask
    return path


def private_dirs_beneath(root: Path, folder: Path) -> None:
    """Create the missing folders of `folder` below `root` (0700), each through a descriptor of its
    parent, never through a link: a folder swapped for a link after the caller checked the path made
    folders appear outside the workspace (mkdir follows links), before the checked open refused."""
    for base in (root, root.resolve()):  # the workspace may be named through a link
        if folder.is_relative_to(base):
            rel = folder.relative_to(base)
            break
    else:
        raise PermissionError(errno.EACCES, f"{folder} is not below {root}")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in rel.parts:
            try:
                os.mkdir(name, PRIVATE_DIR_MODE, dir_fd=fd)
                created = True
            except FileExistsError:
                created = False
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            if created:
                os.fchmod(below, PRIVATE_DIR_MODE)  # mkdir's mode went through the umask
            os.close(fd)
            fd = below
    finally:
        os.close(fd)


def numbered_names(stem: str, suffix: str) -> Iterator[str]:
    """`stem+suffix`, then `stem-2+suffix`, `stem-3+suffix` ... without end: the names tried when
    one is taken."""
    yield f"{stem}{suffix}"
    n = 2
    while True:
        yield f"{stem}-{n}{suffix}"
        n += 1


def unused_path(folder: Path, stem: str, suffix: str) -> Path:
    """`folder/stem+suffix`, or the first free `stem-2`, `stem-3` ...; the caller holds the lock that
    keeps another writer from taking it in between."""
    for name in numbered_names(stem, suffix):
        # a dangling link is taken too: writing "into" it would follow it
        if not os.path.lexists(folder / name):
            return folder / name
    raise AssertionError("unreachable")  # numbered_names never ends


def open_private(
    path: Path, flags: int, mode: int = PRIVATE_FILE_MODE, *, beneath: Path | None = None
) -> int:
    """`os.open` creating the file (and its folder) private; returns the descriptor. A symlink at
    the file, or anything but a regular file, is refused (OSError); with `beneath`, so is a folder
    on the way that leads outside it (PermissionError, see open_folder_beneath)."""
    ensure_private_dir(path.parent)
    # O_NONBLOCK: a planted FIFO must not hang the open (it has no effect on a regular file)
    flags |= os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        if beneath is None:
            fd = os.open(path, flags, mode)
        else:
            folder = open_folder_beneath(beneath, path.parent)
            try:
                fd = os.open(path.name, flags, mode, dir_fd=folder)
            finally:
                os.close(folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            problem = f"{path} is a symbolic link: nanobot never writes through one (remove it)"
            raise OSError(errno.ELOOP, problem) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def atomic_write(
    path: Path,
    data: str | bytes,
    mode: int = PRIVATE_FILE_MODE,
    *,
    fsync: bool = True,
    beneath: Path | None = None,
    avoid: tuple[Path, ...] = (),
    check: FolderCheck | None = None,
) -> None:
    """Replace `path` with `data` so a crash leaves either the old or the new file, never half.

    The temp file is created and renamed through a descriptor of the folder, so the write lands in
    the folder that was opened; with `beneath`, that folder must lie under it (a link swapped in
    after the caller checked the path raises PermissionError instead of writing elsewhere), and not
    in one of the `avoid` folders, and `check` is asked about the folder actually opened.
    """
    if beneath is None:
        ensure_private_dir(path.parent)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        private_dirs_beneath(beneath, path.parent)
        folder = open_folder_beneath(beneath, path.parent, avoid, check)
    tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder
            )
        except OSError as exc:  # name the file the caller writes, not the temp name beside it
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
                fh.flush()
                if fsync:
                    os.fsync(fh.fileno())
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)  # what flock says when another holder has it


def try_flock(fd: int, *, shared: bool = False) -> bool:
    """Take `flock` on `fd` without waiting: True when taken, False when another holder has it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _BUSY:
            return False
        raise
    return True


@contextmanager
def fd_lock(fd: int, *, shared: bool = False, blocking: bool = True) -> Iterator[int]:
    """Hold `flock` on an open descriptor; non-blocking raises BlockingIOError when it is taken."""
    flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
    fcntl.flock(fd, flags)
    try:
        yield fd
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextmanager
def file_lock(
    path: Path, *, shared: bool = False, blocking: bool = True, beneath: Path | None = None
) -> Iterator[int]:
    """Hold `flock` on the lock file `path` (created 0600) for the block; yields its descriptor."""
    fd = open_private(path, os.O_RDWR, beneath=beneath)
    try:
        with fd_lock(fd, shared=shared, blocking=blocking):
            yield fd
    finally:
        os.close(fd)


FILE_LOCK_POLL_S = 0.05


@asynccontextmanager
async def file_lock_waiting(path: Path) -> AsyncIterator[None]:
    """Hold an exclusive `flock` on the lock file `path` for the block, waiting for it without
    blocking the event loop (another process may hold it for as long as a model call takes)."""
    fd = open_private(path, os.O_RDWR)
    try:
        while not try_flock(fd):
            await asyncio.sleep(FILE_LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def append_whole(fd: int, data: bytes, end: int) -> None:
    """Write all of `data` at the end of the file, or nothing: os.write may write only part (a
    nearly full disk) and fail on the rest, so a failure cuts the file back to `end` (no half entry
    or line is left behind) and raises the OSError."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        with contextlib.suppress(OSError):  # read-only: nothing was written either
            os.ftruncate(fd, end)
        raise


def append_locked(
    path: Path, text: str, *, fsync: bool = True, separate: bool = False, beneath: Path | None = None
) -> None:
    """Append `text` under an exclusive lock; with `separate`, a blank line first if the file has text."""
    fd = open_private(path, os.O_WRONLY | os.O_APPEND, beneath=beneath)
    try:
        with fd_lock(fd):
            end = os.fstat(fd).st_size
            if separate and end > 0:
                text = "\n" + text
            append_whole(fd, text.encode("utf-8"), end)
            if fsync:
                os.fsync(fd)
    finally:
        os.close(fd)


def _tighten(path: Path, st: os.stat_result) -> bool:
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 == 0:
        return False
    os.chmod(path, mode & ~0o077)  # the owner's bits (an executable script stays executable)
    return True


def repair_private(root: Path, *, recursive: bool = True) -> int:
    """Remove group/other permissions from `root` (and with `recursive` everything below it); returns
    how many entries changed. Symlinks are neither followed nor changed; entries that vanish or cannot
    be changed are skipped."""
    try:
        st = os.lstat(root)
    except OSError:
        return 0
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return 0
    changed = 0
    with contextlib.suppress(OSError):
        changed += _tighten(root, st)
    if not recursive or not stat.S_ISDIR(st.st_mode):
        return changed
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not descend into symlinked folders
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            try:
                entry = os.lstat(path)
                if stat.S_ISDIR(entry.st_mode) or stat.S_ISREG(entry.st_mode):
                    changed += _tighten(path, entry)
            except OSError:
                continue
    return changed


#: below this the gateway's state file (and every session append) may not fit
MIN_FREE_BYTES = 1024 * 1024


def unwritable_reason(folder: Path) -> str | None:
    """Why nothing can be written in `folder` now (not writable, or its disk full), or None. The
    gateway's status uses it: a gateway that could not write its state file on a full disk, and
    still answered, was reported "not responding", sending the owner looking for a hung process."""
    try:
        if not os.access(folder, os.W_OK):
            return f"the workspace {folder} is not writable (read-only?)"
        if shutil.disk_usage(folder).free < MIN_FREE_BYTES:
            return f"the disk of {folder} is full"
    except OSError:
        return None
    return None
