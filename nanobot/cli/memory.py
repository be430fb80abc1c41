"""`nanobot memory search|reindex|status`: the memory search index from the command line.

Only results go to stdout; progress and errors go to stderr.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated

import typer

from nanobot.cli import memory_backend
from nanobot.cli.common import ConfigOption, command_group, err, fail, load_cli_config, out
from nanobot.config.schema import Config
from nanobot.util.text import typed_text

#: how long `memory search` embeds not yet embedded chunks before it answers (a months-old
#: workspace's backlog takes hours with the local model; what is left is found by its words)
VECTOR_WAIT_S = 10.0

if TYPE_CHECKING:  # the index (and numpy) load when a memory command runs, not with every command
    from nanobot.memory.index import MemoryIndex

app = command_group(help="Search and maintain the memory index.")


def _index(config: Config) -> MemoryIndex:
    from nanobot.memory.embeddings import EmbeddingError
    from nanobot.memory.index import build_index

    try:
        return build_index(config)
    except EmbeddingError as exc:
        fail(f"Error: {exc}", 2)


@app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    max_results: Annotated[int | None, typer.Option("--max-results", "-n", min=1, max=50)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: {mode, results}.")] = False,
    config_path: ConfigOption = None,
) -> None:
    """Search memory like the memory_search tool."""
    from nanobot.memory.embeddings import EmbeddingError
    from nanobot.memory.index_file import IndexUnavailable
    from nanobot.service.state import gateway_running

    query = typed_text(query)
    config = load_cli_config(config_path)
    index = _index(config)
    # A one-shot command embeds what is not embedded yet instead of leaving it to a background task,
    # unless a running gateway is doing that already: both embedded the same chunks, the command
    # silent for minutes. Text not embedded yet is still found by its words.
    embedding_elsewhere = index.embedder is not None and gateway_running(config.workspace_path)
    index.embeds_in_background = not embedding_elsewhere
    pending = 0
    try:
        response = asyncio.run(
            index.search(
                query, max_results=max_results, wait_for_vectors=not embedding_elsewhere, vector_wait_s=VECTOR_WAIT_S
            )
        )
        if index.embedder is not None:
            counts = index.status()
            pending = counts["chunks"] - counts["embeddedChunks"]
    except (EmbeddingError, IndexUnavailable) as exc:
        fail(f"Error: {exc}")
    finally:
        index.close()
    if pending and embedding_elsewhere:
        err(f"({pending} chunk(s) still being embedded by the running gateway: found by their words for now)")
    elif pending:
        err(
            f"({pending} chunk(s) not embedded yet: found by their words for now; `nanobot memory reindex` "
            "embeds them all with progress shown, as a running gateway does in the background)"
        )
    if response.stale:
        err(f"Warning: {response.stale}")
    if as_json:
        typer.echo(json.dumps(response.to_json(), ensure_ascii=False))
        return
    if not response.results:
        out(f"No memories found ({response.mode} search).")
        return
    for i, r in enumerate(response.results, 1):
        out(f"[{i}] {r.citation}  score {r.score:.2f}")
        out("    " + r.snippet.replace("\n", "\n    "))


@app.command("reindex")
def reindex(config_path: ConfigOption = None) -> None:
    """Rebuild the memory index from the memory files (progress, rate and ETA on stderr)."""
    from nanobot.cli.progress import Progress
    from nanobot.memory.embeddings import EmbeddingError
    from nanobot.memory.index_file import IndexUnavailable

    config = load_cli_config(config_path)
    index = _index(config)
    index.progress = progress = Progress()
    try:
        stats = asyncio.run(index.sync(force=True))
    except (EmbeddingError, IndexUnavailable) as exc:
        fail(f"Error: {exc}")
    finally:
        progress.finish()
        index.close()
    out(
        f"Indexed {stats.files_indexed} files, {stats.chunks_indexed} chunks "
        f"({stats.chunks_embedded} embedded, {stats.embedding_cache_hits} from cache) "
        f"in {stats.duration_s:.2f}s"
    )
    if stats.embedding_errors:
        fail("Warning: some chunks could not be embedded; keyword search covers them.")


@app.command("status")
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config_path: ConfigOption = None,
) -> None:
    """Show what is indexed (without syncing first)."""
    from nanobot.memory.index_file import IndexUnavailable

    config = load_cli_config(config_path)
    index = _index(config)
    try:
        info = index.status()
    except IndexUnavailable as exc:
        fail(f"Error: {exc}")
    finally:
        index.close()
    if as_json:
        typer.echo(json.dumps(info))
        return
    for key, value in info.items():
        out(f"{key}: {value}")


app.add_typer(memory_backend.app, name="backend")
