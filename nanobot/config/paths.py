"""Where nanobot keeps things: NANOBOT_HOME, config.json and the workspace layout.

Every name of the workspace layout is spelled here once; the owner of each folder (docs/architecture.md)
builds its paths from these names. Folders nanobot creates are private (0700) and the files it writes
0600; `secure_installation` tightens an existing installation at start.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from loguru import logger

from nanobot.errors import ConfigError
from nanobot.util.fs import ensure_private_dir, repair_private

HOME_ENV = "NANOBOT_HOME"
NANOBOT_DIR = ".nanobot"  # the home folder's name in the user's home, when NANOBOT_HOME is not set
CONFIG_FILE = "config.json"
#: the download caches of the programs that start MCP servers (npm reads the second; uv, pip and
#: most others the first), inside NANOBOT_HOME: the systemd unit sets them there because
#: ProtectSystem=strict leaves the home folder (~/.npm, ~/.cache) read-only, and stdio MCP servers
#: get them from nanobot's environment
TOOL_CACHE_FOLDERS = {"XDG_CACHE_HOME": "cache", "npm_config_cache": "cache/npm"}

# Workspace layout. Folders: created at start, in this order.
MEMORY_DIR = "memory"  # MemoryStore (MEMORY.md, HISTORY.md, daily notes, .backups/, .backends/)
SESSIONS_DIR = "sessions"  # SessionStore (transcripts, archive/, retry markers of archives)
MEDIA_DIR = "media"  # channels (downloaded attachments)
SKILLS_DIR = "skills"  # the user's skills
CRON_DIR = "cron"  # CronStore (jobs.json)
WORKSPACE_FOLDERS = (MEMORY_DIR, SESSIONS_DIR, MEDIA_DIR, SKILLS_DIR, CRON_DIR)
ARCHIVE_DIR = "archive"  # inside sessions/
BACKUP_DIR = ".backups"  # inside memory/
BACKENDS_DIR = ".backends"  # inside memory/: one folder per external memory backend
INDEX_FILE = ".index.sqlite"  # inside memory/ (plus SQLite's -wal and -shm beside it)
GATEWAY_LOCK_FILE = ".gateway.lock"
GATEWAY_STATE_FILE = ".gateway.json"
# What of the workspace only nanobot writes: the file tools refuse to write it, and the sandboxes
# mount it read-only (folders made before a command runs; the rest when present).
OWNED_DIRS = (SESSIONS_DIR, CRON_DIR, f"{MEMORY_DIR}/{BACKUP_DIR}")
OWNED_IF_PRESENT = (GATEWAY_LOCK_FILE, GATEWAY_STATE_FILE, f"{MEMORY_DIR}/{BACKENDS_DIR}")
INDEX_PREFIX = ".index"  # in memory/: the search index and SQLite's journal files beside it
# Folders a shared (group) context must not see: the owner's memory, every chat's transcript and the
# owner's scheduled jobs (a reminder's text is as private as the chat it came from).
PRIVATE_DIRS = (MEMORY_DIR, SESSIONS_DIR, CRON_DIR)
# Memory files at the workspace root, where early versions kept them: still indexed and searched, so
# as private as memory/ (and a group must not plant "memory" there for the owner's searches).
LEGACY_MEMORY_FILES = ("MEMORY.md", "HISTORY.md")
PRIVATE_PATHS = (*PRIVATE_DIRS, *LEGACY_MEMORY_FILES)
# The owner's instructions, in every system prompt.
BOOTSTRAP_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md")
HEARTBEAT_FILE = "HEARTBEAT.md"  # the heartbeat's task list, done in a turn of the owner's
# What steers turns that run as the owner: a shared (group) context may read it, never change it,
# or a group member would write the owner's next instructions (a task for the heartbeat, a skill).
OWNER_STEERING = (*BOOTSTRAP_FILES, HEARTBEAT_FILE, SKILLS_DIR)


def nanobot_home() -> Path:
    """The home folder: $NANOBOT_HOME, default ~/.nanobot."""
    raw = os.environ.get(HOME_ENV, "").strip()
    return expanded_path(raw, HOME_ENV) if raw else Path.home() / NANOBOT_DIR


def expanded_path(raw: str, setting: str) -> Path:
    """`raw` with ~ and $VARS expanded. A path no file can have is a ConfigError naming `setting`:
    `~alice/…` on a machine without alice, or a NUL character, failed every command with a
    traceback and exit 1 (a restart loop under systemd)."""
    if "\0" in raw:
        raise ConfigError(f"{setting}: {raw!r} holds a NUL character, which no path can")
    try:
        return Path(os.path.expandvars(raw)).expanduser()
    except RuntimeError:  # ~name of a user this machine does not have
        raise ConfigError(f"{setting}: {raw!r} starts with the home folder of a user this machine "
                          "does not have") from None


def default_config_path() -> Path:
    return nanobot_home() / CONFIG_FILE


def resolve_in_home(configured: str, setting: str) -> Path:
    """A configured path: ``~`` and $VARS expanded, a relative one in $NANOBOT_HOME whatever the
    current folder (the service runs from /)."""
    return (nanobot_home() / expanded_path(configured.strip(), setting)).resolve()


def resolve_workspace(configured: str) -> Path:
    """The workspace folder: the configured path (see resolve_in_home) or $NANOBOT_HOME/workspace."""
    if not configured.strip():
        return (nanobot_home() / "workspace").resolve()
    return resolve_in_home(configured, "agents.defaults.workspace")


MAX_SESSION_STEM_CHARS = 120
#: file systems allow 255 bytes in a name; an archive adds a stamp and `.jsonl.pending`, its atomic
#: rewrite a temporary `.<name>.<hex>.tmp` (~55 bytes in all). Names within both limits are what
#: they always were: a session keeps its file across upgrades.
MAX_SESSION_STEM_BYTES = 190


def session_file_name(key: str) -> str:
    """`telegram:123` -> `telegram_123.jsonl` (docs/contract.md, Workspace files). A key with other
    characters a file name cannot hold (`cli:work/alice`), or a very long one, gets them as `_` plus
    a digest of the key: two keys never share a transcript, and no name is too long to create."""
    plain = key.replace(":", "_")
    safe = legacy_session_stem(key)
    if safe != plain or len(safe) > MAX_SESSION_STEM_CHARS or len(safe.encode()) > MAX_SESSION_STEM_BYTES:
        # cut by characters and by bytes, never inside a character (a CJK character takes three)
        head = safe[: MAX_SESSION_STEM_CHARS - 11].encode()[: MAX_SESSION_STEM_BYTES - 11]
        safe = f"{head.decode('utf-8', 'ignore')}-{_key_digest(key)}"
    return f"{safe}.jsonl"


def _key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def first_digest_session_stem(key: str) -> str:
    """The stem the first names with a digest gave (cut by characters only, so a long key in a
    script of multi-byte characters got a name over the limit, or one that differs from today's)."""
    safe = legacy_session_stem(key)
    if safe != key.replace(":", "_") or len(safe) > MAX_SESSION_STEM_CHARS:
        return f"{safe[: MAX_SESSION_STEM_CHARS - 11]}-{_key_digest(key)}"
    return safe


def legacy_session_stem(key: str) -> str:
    """The file name stem every key had before names got a digest: characters a file name cannot
    hold as `_` (so `cli:work/alice` and `cli:work_alice` shared one)."""
    plain = key.replace(":", "_")
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in plain).strip(".") or "session"


def file_name_part(text: str) -> str:
    """`text` with anything but [A-Za-z0-9._-] as `_`, without leading or trailing dots and `_`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")


def media_prefix(channel: str, chat_id: str | int) -> str:
    """How the downloads of one chat in media/ begin: `<channel>_<chat>_` (the message id and the
    file name follow); tools in shared chats reach only their own chat's files by it. A forum
    topic's `:` becomes `.`, which no chat id holds: as `_` the group's prefix began the topic's
    file names, and the topic's those of the group's message of that number."""
    return f"{channel}_{file_name_part(str(chat_id).replace(':', '.'))}_"


def index_path(workspace: Path) -> Path:
    return workspace / MEMORY_DIR / INDEX_FILE


def index_size_bytes(workspace: Path) -> int:
    """The index's size on disk with SQLite's write-ahead log beside it (most of it while a gateway
    writes: the main file alone read "4 KiB" for an index of 700)."""
    folder = workspace / MEMORY_DIR
    return sum(p.stat().st_size for p in folder.glob(INDEX_FILE + "*") if p.is_file())


def workspace_problem(workspace: Path) -> str:
    """Why `workspace` cannot be used ("" when it is a folder or can be created), without creating it."""
    existing = workspace
    while True:
        try:
            mode = existing.stat().st_mode
            break
        except (FileNotFoundError, NotADirectoryError):
            if existing.parent == existing:
                return f"{existing} cannot be found"
            existing = existing.parent
        except OSError as exc:  # a folder above it cannot be entered: another user's, say
            return f"{existing} cannot be reached ({exc.strerror}; owned by another user?)"
    if not stat.S_ISDIR(mode):
        return f"{existing} is not a folder"
    if existing != workspace and not os.access(existing, os.W_OK | os.X_OK):
        return f"it cannot be created in {existing} (permission denied)"
    if existing == workspace and not os.access(workspace, os.R_OK | os.X_OK):
        return "it cannot be read (permission denied; owned by another user?)"
    return ""


def moved_workspace_hint(workspace: Path) -> str:
    """When `workspace` does not exist but $NANOBOT_HOME/workspace holds one (memory, sessions):
    what to tell the user, who likely moved their home with the workspace configured by its old
    absolute path. "" otherwise."""
    default = nanobot_home() / "workspace"
    if workspace.exists() or workspace == default or not (default / MEMORY_DIR).is_dir():
        return ""
    return (
        f"the configured workspace {workspace} does not exist, but {default} holds one (memory, "
        "conversations): if you moved NANOBOT_HOME, set agents.defaults.workspace to it; for a new, "
        "empty workspace there, create the folder"
    )


def ensure_workspace(workspace: Path) -> None:
    """Create the workspace and its folders (0700) where missing; existing ones are left as they are."""
    for sub in WORKSPACE_FOLDERS:
        ensure_private_dir(workspace / sub)


def secure_installation(workspace: Path, home: Path | None = None) -> int:
    """Make an existing installation private (it may predate private files): NANOBOT_HOME, its files
    and the workspace folder lose group and other permissions, and so does everything below the
    folders nanobot owns. The user's own files elsewhere in the workspace are left as they are (the
    private workspace folder already hides them). Symlinks are not followed. Returns how many changed."""
    home = home or nanobot_home()
    changed = 0
    if home.is_dir():
        changed += repair_private(home, recursive=False)
        for entry in home.iterdir():
            if entry.is_file() and not entry.is_symlink():
                changed += repair_private(entry)
    changed += repair_private(workspace, recursive=False)
    for name in (*WORKSPACE_FOLDERS, GATEWAY_LOCK_FILE, GATEWAY_STATE_FILE):
        if name != SKILLS_DIR:
            changed += repair_private(workspace / name)
    if changed:
        logger.info("made {} file(s) and folder(s) private (owner-only permissions)", changed)
    return changed


def is_nanobot_owned(rel: Path) -> bool:
    """Whether a workspace-relative path lies in what only nanobot writes (OWNED_DIRS, OWNED_IF_PRESENT,
    the index files in memory/); the gateway's and the index's file names anywhere count too."""
    posix = rel.as_posix()
    if any(posix == owned or posix.startswith(f"{owned}/") for owned in (*OWNED_DIRS, *OWNED_IF_PRESENT)):
        return True
    in_memory = len(rel.parts) == 2 and rel.parts[0] == MEMORY_DIR and rel.name.startswith(INDEX_PREFIX)
    return in_memory or rel.name in (INDEX_FILE, GATEWAY_LOCK_FILE, GATEWAY_STATE_FILE)
