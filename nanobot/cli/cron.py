"""`nanobot cron list|add|remove|run`: manage the jobs in workspace/cron/jobs.json.

A running gateway picks up changes made here within a few seconds (it watches the file).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer

from nanobot.cli.common import (
    EXIT_USAGE,
    ConfigOption,
    command_group,
    config_path,
    err,
    fail,
    load_cli_config,
    out,
)
from nanobot.config.schema import Config
from nanobot.errors import UserError
from nanobot.scheduler.cron import CronJob, CronService, CronStoreError, DeliverTo, jobs_path
from nanobot.scheduler.schedules import schedule_problem
from nanobot.util.text import one_line, truncate_head, typed_text

app = command_group(help="Manage scheduled jobs.")


async def _run_job_once(config: Config, job: CronJob, path: Path) -> str:
    """Run one job through a freshly built agent and its loop, in the job's own session (the
    same path as in the gateway); returns the reply. `path` is the config file, which the job's
    exec commands must not see (wherever -c put it)."""
    from nanobot.agent.cron_turn import run_cron_job
    from nanobot.agent.factory import build_runtime

    runtime = build_runtime(config, config_path=str(path))
    runtime.loop.start()
    try:
        return await run_cron_job(runtime.bus, job, runtime.agent.sessions)
    finally:
        await runtime.aclose()


def _service(option: Path | None, config: Config | None = None) -> CronService:
    """The jobs of the config that -c names (or the default one)."""
    config = config or load_cli_config(option)
    return CronService(
        jobs_path(config.workspace_path),
        on_job=lambda job: _run_job_once(config, job, config_path(option)),
        timezone=config.agents.defaults.timezone,
    )


def _load(service: CronService) -> list[CronJob]:
    try:
        return service.list()
    except CronStoreError as exc:
        fail(f"Error: {exc}")


@app.command("list")
def list_jobs(
    config: ConfigOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print the jobs as JSON."),
) -> None:
    """List all jobs."""
    service = _service(config)
    jobs = _load(service)
    if as_json:
        typer.echo(json.dumps([j.to_dict() for j in jobs], indent=2, ensure_ascii=False))
        return
    if not jobs:
        err("No scheduled jobs.")
        return
    for job in jobs:
        target = f"{job.deliver_to.channel}:{job.deliver_to.chat_id}" if job.deliver_to else "-"
        state = "enabled" if job.enabled else "disabled"
        if job.enabled and (problem := schedule_problem(job, service.tz)):
            state = f"unusable ({problem})"  # the gateway disables it at its start: said here first
        out(
            f"{job.id}\t{one_line(job.name)}\t{job.schedule.describe()}\t{state}\tnext={job.next_run_at or '-'}"
            f"\tto={target}\tlast={job.last_status or '-'}"
        )


@app.command("add")
def add(
    message: str = typer.Option(..., "--message", "-m", help="What the agent should do when the job runs."),
    name: str = typer.Option("", "--name", "-n", help="Short label (default: the message)."),
    every: int | None = typer.Option(None, "--every", help="Repeat every SECONDS."),
    cron: str | None = typer.Option(None, "--cron", help="Crontab expression, e.g. '0 9 * * 1-5'."),
    tz: str = typer.Option(
        "", "--tz", help="IANA time zone for --cron/--at (default: agents.defaults.timezone)."
    ),
    at: str | None = typer.Option(None, "--at", help="Run once at this ISO-8601 time."),
    channel: str = typer.Option(
        "", "--channel", help="Channel that receives the result (telegram, discord)."
    ),
    to: str = typer.Option("", "--to", help="Chat id that receives the result."),
    config: ConfigOption = None,
) -> None:
    """Add a job; prints its id."""
    message, name = typed_text(message), typed_text(name)
    if bool(channel) != bool(to):
        fail("Error: --channel and --to go together", EXIT_USAGE)
    cfg = load_cli_config(config)
    if channel:
        _check_channel(cfg, channel)
    service = _service(config, cfg)
    try:
        job = service.add(
            name or truncate_head(message, 80, marker=""),
            message,
            at=at,
            every_s=every,
            expr=cron,
            tz=tz,
            deliver_to=DeliverTo(channel, to) if channel else None,
        )
    except ValueError as exc:
        fail(f"Error: {exc}", EXIT_USAGE)
    except CronStoreError as exc:
        fail(f"Error: {exc}")
    if job.deliver_to is None:
        err("Note: no --channel/--to given; the gateway will only log this job's results.")
    err(f"Added job {job.id} ({job.schedule.describe()}), next run {job.next_run_at}")
    out(job.id)


def _check_channel(config: Config, channel: str) -> None:
    """A job's results go to a chat channel: an unknown name is a usage error (the results would be
    dropped at every run); a known one that is not enabled gets a warning (it may be enabled later)."""
    from nanobot.channels.manager import CHANNEL_CLASSES

    if channel not in CHANNEL_CLASSES:
        fail(f"Error: unknown channel {channel!r} (one of: {', '.join(CHANNEL_CLASSES)})", EXIT_USAGE)
    if not getattr(config.channels, channel).enabled:
        err(
            f"Warning: channels.{channel}.enabled is false; this job's results cannot be sent until it is enabled."
        )


@app.command("remove")
def remove(
    job_id: str = typer.Argument(..., help="The job id (see `nanobot cron list`)."),
    config: ConfigOption = None,
) -> None:
    """Remove a job."""
    service = _service(config)
    try:
        removed = service.remove(job_id)
    except CronStoreError as exc:
        fail(f"Error: {exc}")
    if not removed:
        fail(f"Error: no job {job_id!r}")
    err(f"Removed job {job_id}")


@app.command("run")
def run(
    job_id: str = typer.Argument(..., help="The job id (see `nanobot cron list`)."),
    config: ConfigOption = None,
) -> None:
    """Run a job once now through the agent and print its reply (its schedule is unchanged)."""
    service = _service(config)
    try:
        result = asyncio.run(service.run_now(job_id, raise_errors=True))
    except KeyError:
        fail(f"Error: no job {job_id!r}")
    except CronStoreError as exc:
        fail(f"Error: {exc}")
    except UserError:
        raise  # a config problem, not the job's: reported by the CLI (exit 2)
    except Exception as exc:  # noqa: BLE001 - the failure is recorded in the job; report it briefly
        fail(f"Error: job {job_id} failed: {type(exc).__name__}: {exc}")
    if result:
        out(result)
