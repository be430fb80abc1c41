"""`nanobot onboard` setting up provider and bot tokens: on a terminal (a real pty: prompts, hidden
key entry, live checks against the fakes, the service offer) and with flags for scripts."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_server import FakeTelegramServer
from tests.gateway_harness import TG_TOKEN
from tests.terminal import Terminal


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegramServer]:
    server = FakeTelegramServer().start()
    yield server
    server.stop()


def onboard_on_a_terminal(home: Path, *args: str) -> Terminal:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(NANOBOT_HOME=str(home), PYTHONPATH=str(REPO), TERM="dumb")
    return Terminal([sys.executable, "-m", "nanobot", "onboard", *args], env, home)


def answer(term: Terminal, *steps: tuple[str, str]) -> None:
    """Type each answer once its question shows."""
    for question, typed in steps:
        term.expect(question)
        term.send(typed)


def test_onboard_on_a_terminal_asks_checks_and_saves(
    home: Path, fake_llm: FakeLLMServer, fake_telegram: FakeTelegramServer
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(
        NANOBOT_HOME=str(home),
        PYTHONPATH=str(REPO),
        TERM="dumb",
        # the Bot API base is not asked: the fake stands in for api.telegram.org
        NANOBOT_CHANNELS__TELEGRAM__BASE_URL=fake_telegram.base_url,
    )
    term = Terminal([sys.executable, "-m", "nanobot", "onboard"], env, home)
    term.expect("provider>")
    term.send("custom")
    term.expect("base URL")
    term.send(fake_llm.url)
    term.expect("API key (not shown")
    term.send("sk-typed-secret")
    term.expect("model (Enter")
    term.send("fake-model")
    term.expect("Telegram bot token")
    term.send(TG_TOKEN)
    term.expect("Discord bot token")
    term.send("")
    term.expect("systemd user service now? [y/N]>")
    term.send("n")
    code, output = term.finish()
    assert code == 0, output
    assert "provider: ok" in output and "telegram: ok" in output, output
    assert "sk-typed-secret" not in output and TG_TOKEN not in output  # hidden entry, masked checks
    data = json.loads((home / "config.json").read_text())
    assert data["agents"]["defaults"] == {
        **data["agents"]["defaults"],
        "provider": "custom",
        "model": "fake-model",
    }
    assert data["providers"]["custom"]["apiKey"] == "sk-typed-secret"
    assert (
        data["channels"]["telegram"]["enabled"] is True and data["channels"]["telegram"]["token"] == TG_TOKEN
    )
    assert (home / "config.json").stat().st_mode & 0o077 == 0
    assert fake_llm.requests and fake_telegram.calls_to("getMe")
    assert (home / "workspace" / "AGENTS.md").is_file()


def test_onboard_flags_for_scripts_check_live_and_name_the_failure(
    home: Path, fake_llm: FakeLLMServer, fake_telegram: FakeTelegramServer
) -> None:
    fake_telegram.rejected_tokens.add(TG_TOKEN)
    env = {"NANOBOT_CHANNELS__TELEGRAM__BASE_URL": fake_telegram.base_url}
    result = run_cli(
        "onboard",
        "--provider",
        "custom",
        "--api-base",
        fake_llm.url,
        "--api-key",
        "k",
        "--model",
        "fake-model",
        "--telegram-token",
        TG_TOKEN,
        home=home,
        env=env,
    )
    assert result.returncode == 1, result.stderr
    assert "provider: ok" in result.stderr and "telegram: fail" in result.stderr
    assert "provider>" not in result.stderr  # nothing asked without a terminal
    data = json.loads((home / "config.json").read_text())
    assert data["providers"]["custom"]["apiBase"] == fake_llm.url  # saved even so, for the user to fix
    bad = run_cli("onboard", "--provider", "nosuch", home=home)
    assert bad.returncode == 2 and "unknown provider 'nosuch'" in bad.stderr


def test_onboard_on_a_terminal_asks_after_the_quick_start_made_the_file_and_asks_again_on_a_typo(
    home: Path, fake_llm: FakeLLMServer
) -> None:
    """The quick start runs onboard without a terminal (it creates config.json); the README's next
    step, onboard on a terminal, then asked nothing. A mistyped provider was refused only after every
    question, the typed key thrown away."""
    assert run_cli("onboard", home=home).returncode == 0
    assert json.loads((home / "config.json").read_text()) == {}  # only what differs from the defaults
    term = onboard_on_a_terminal(home)
    term.expect("provider>")
    term.send("opneai")
    term.expect("unknown provider 'opneai'")
    answer(
        term,
        ("provider>", "custom"),
        ("base URL", fake_llm.url),
        ("API key (not shown", "sk-typed"),
        ("model (Enter", "fake-model"),
        ("Telegram bot token", ""),
        ("Discord bot token", ""),
    )
    code, output = term.finish()
    assert code == 0, output
    data = json.loads((home / "config.json").read_text())
    assert data["agents"]["defaults"] == {"provider": "custom", "model": "fake-model"}
    assert data["providers"]["custom"] == {"apiKey": "sk-typed", "apiBase": fake_llm.url}


def test_onboard_refuses_a_key_without_its_provider(home: Path) -> None:
    result = run_cli("onboard", "--api-key", "sk-lost", home=home)
    assert result.returncode == 2 and "need --provider" in result.stderr
    assert not (home / "config.json").exists()  # refused before anything is written
    custom = run_cli("onboard", "--provider", "custom", "--no-check", home=home)
    assert custom.returncode == 0 and "set providers.custom.apiBase" in custom.stderr  # not "an API key"


def test_a_mistyped_config_path_is_an_error_not_the_defaults(home: Path) -> None:
    """`-c` naming a missing file ran on the defaults: the demo model answered into the workspace."""
    result = run_cli("agent", "-m", "hi", "-c", str(home / "confg.json"), home=home)
    assert result.returncode == 2 and "no such config file" in result.stderr, result.stderr
    assert not (home / "workspace" / "sessions").exists()
    # doctor checked the defaults instead and said "healthy"
    doctor = run_cli("doctor", "-c", str(home / "confg.json"), home=home)
    assert doctor.returncode == 2 and "no such config file" in doctor.stderr, doctor.stdout
    # health checked the default workspace's gateway instead (exit 1 here: Docker reserves 2)
    health = run_cli("health", "-c", str(home / "confg.json"), home=home)
    assert health.returncode == 1 and "unhealthy: " in health.stderr and "no such config file" in health.stderr


def test_onboard_makes_a_home_someone_else_created_private(home: Path) -> None:
    """A Docker volume's /data comes 0755 from the image: onboard left it so, and the README's next
    step, `doctor`, failed on it."""
    home.chmod(0o755)
    assert run_cli("onboard", home=home).returncode == 0
    assert home.stat().st_mode & 0o077 == 0
    doctor = run_cli("doctor", "--json", home=home)
    assert "readable by others" not in doctor.stdout + doctor.stderr


@pytest.mark.parametrize("url", ["my-llm-box:8000/v1", "ftp://box/v1", "http:///v1", "http://box:port/v1"])
def test_an_endpoint_without_scheme_or_host_is_refused_before_any_request(home: Path, url: str) -> None:
    """`my-llm-box:8000/v1` was saved and read as a path on port 80 of no host: the request, API key
    included, went to whatever listened on 127.0.0.1:80."""
    result = run_cli("onboard", "--provider", "custom", "--api-base", url, "--api-key", "sk-x", "--no-check",
                     home=home)
    assert result.returncode == 2, result.stderr
    assert "apiBase" in result.stderr and "URL" in result.stderr and not (home / "config.json").exists()
    assert "Traceback" not in result.stderr
    (home / "config.json").write_text(json.dumps({"providers": {"custom": {"apiBase": url}}}))
    agent = run_cli("agent", "-m", "hi", home=home)
    assert agent.returncode == 2 and "providers.custom.apiBase" in agent.stderr, agent.stderr


def test_onboard_where_nothing_can_be_written_says_so_in_one_line(tmp_path: Path) -> None:
    """A NANOBOT_HOME that cannot be created (or a full disk) ended in a Python traceback."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    result = run_cli("onboard", "--provider", "openai", "--api-key", "sk-x", "--no-check",
                     home=blocker / "home", cwd=tmp_path)
    # a config error, as for every other command with such a home (exit 2; a full disk is exit 1)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "Error:" in result.stderr and "not-a-folder is not a folder" in result.stderr


def test_a_relative_workspace_lies_in_the_home_and_a_linked_config_stays_linked(home: Path, tmp_path: Path) -> None:
    """A relative workspace followed the current folder (another one from every folder, `/` for the
    service); onboard replaced a config.json linked to a dotfiles copy by a file of its own."""
    dotfiles = tmp_path / "dotfiles" / "nanobot.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps({"agents": {"defaults": {"workspace": "myws"}}}))
    (home / "config.json").symlink_to(dotfiles)
    result = run_cli("onboard", "--provider", "openai", "--api-key", "sk-new", "--no-check", home=home)
    assert result.returncode == 0, result.stderr
    assert (home / "config.json").is_symlink()
    assert json.loads(dotfiles.read_text())["providers"]["openai"]["apiKey"] == "sk-new"
    assert (home / "myws" / "memory").is_dir()
    for cwd in (tmp_path, tmp_path / "dotfiles"):
        status = run_cli("status", home=home, cwd=cwd)
        assert str(home / "myws") in status.stdout, status.stdout


def test_an_openai_base_url_from_the_environment_is_checked_too(home: Path) -> None:
    """The config's apiBase was checked, OPENAI_BASE_URL not: `my-box:8000/v1` there still sent
    the API key to port 80 of the loopback address."""
    result = run_cli("agent", "-m", "hi", home=home,
                     env={"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "my-box:8000/v1"})
    assert result.returncode == 2, result.stderr
    assert "OPENAI_BASE_URL" in result.stderr and "URL with a host" in result.stderr


def test_a_dangling_config_link_is_filled_and_pasted_values_are_trimmed(home: Path, tmp_path: Path) -> None:
    """A config.json linked into dotfiles not written yet became a plain file of its own; keys and
    tokens pasted with spaces around them were saved so (and later rejected)."""
    dotfiles = tmp_path / "dotfiles" / "nanobot.json"  # neither the file nor its folder exists yet
    (home / "config.json").symlink_to(dotfiles)
    result = run_cli(
        "onboard", "--provider", " openai ", "--api-key", " sk-abc123 ", "--telegram-token", " 123:ABC ",
        "--no-check", home=home,
    )
    assert result.returncode == 0, result.stderr
    assert (home / "config.json").is_symlink() and dotfiles.is_file()
    data = json.loads(dotfiles.read_text())
    assert data["providers"]["openai"]["apiKey"] == "sk-abc123"
    assert data["channels"]["telegram"]["token"] == "123:ABC"


def test_a_config_nested_too_deeply_is_a_config_error(home: Path) -> None:
    (home / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    result = run_cli("status", home=home)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "nested too deeply" in result.stderr


def test_a_key_or_token_pasted_over_two_lines_is_refused_and_never_shown(home: Path) -> None:
    """A key with a line break inside was saved; every request failed with "illegal header value",
    and that error showed the key with the break escaped, which the log's masking let through (a
    Discord token whole)."""
    secret_tail = "SECRETTAIL0123456789"
    for flag, value in (
        ("--api-key", f"sk-proj-AbCdEfGh\n{secret_tail}"),
        ("--discord-token", f"MTA4NzY1NDMyMTA5.GaBcDe\n.{secret_tail}"),
    ):
        extra = ["--provider", "openai"] if flag == "--api-key" else []
        result = run_cli("onboard", *extra, flag, value, "--no-check", home=home)
        assert result.returncode == 2 and flag in result.stderr and "one line" in result.stderr, result.stderr
        assert secret_tail not in result.stdout + result.stderr
        assert not (home / "config.json").exists()  # refused before anything is written
    # in the file (or the environment) it is a config error that does not repeat the value
    (home / "config.json").write_text(json.dumps({"providers": {"openai": {"apiKey": f"sk-a\n{secret_tail}"}}}))
    agent = run_cli("agent", "-m", "hi", home=home)
    assert agent.returncode == 2 and "providers.openai.apiKey" in agent.stderr, agent.stderr
    assert secret_tail not in agent.stdout + agent.stderr
    # ... and so it is from the provider's usual variable
    (home / "config.json").write_text(json.dumps({"agents": {"defaults": {"provider": "openai"}}}))
    agent = run_cli("agent", "-m", "hi", home=home, env={"OPENAI_API_KEY": f"sk-a\n{secret_tail}"})
    assert agent.returncode == 2 and "OPENAI_API_KEY" in agent.stderr and "one line" in agent.stderr, agent.stderr
    assert secret_tail not in agent.stdout + agent.stderr
    # spaces around it are dropped, as onboard does
    (home / "config.json").write_text(json.dumps({"channels": {"telegram": {"token": f"  {TG_TOKEN}\n"}}}))
    from nanobot.config.loader import load_config

    assert load_config(home / "config.json").channels.telegram.token == TG_TOKEN


def test_a_mistyped_ollama_url_is_asked_again(home: Path) -> None:
    """`localhost:11434` was taken, then refused after the file was written (naming a flag the user
    never typed), leaving an empty config and no workspace."""
    term = onboard_on_a_terminal(home, "--no-check")
    answer(term, ("provider>", "ollama"), ("Ollama URL", "localhost:11434"))
    term.expect("is not a http:// or https:// URL")
    answer(
        term,
        ("Ollama URL", "http://127.0.0.1:9"),
        ("model (Enter", "llama3"),
        ("Telegram bot token", ""),
        ("Discord bot token", ""),
    )
    code, output = term.finish()
    assert code == 0, output
    data = json.loads((home / "config.json").read_text())
    assert data["providers"]["ollama"] == {"apiBase": "http://127.0.0.1:9"}
    assert (home / "workspace").is_dir()


def test_an_emptied_config_is_an_error_and_onboard_makes_it_again(home: Path) -> None:
    """A zero-byte config.json (a save on a full disk, `> config.json`) was read as "no config": the
    demo model answered, the gateway ran no bot, and doctor said healthy."""
    assert run_cli("onboard", "--provider", "openai", "--api-key", "sk-kept", "--no-check", home=home).returncode == 0
    (home / "config.json").write_bytes(b"")
    for command in (("agent", "-m", "hi"), ("gateway",)):
        result = run_cli(*command, home=home, timeout=60)
        assert result.returncode == 2 and "the file is empty" in result.stderr, (command, result.stderr)
    doctor = run_cli("doctor", home=home)
    assert doctor.returncode == 1 and "the file is empty" in doctor.stdout and "unhealthy: config" in doctor.stdout
    (home / "config.json").write_text("\n")  # `echo > config.json`
    again = run_cli("onboard", "--provider", "openai", "--api-key", "sk-new", "--no-check", home=home)
    assert again.returncode == 0, again.stderr
    assert json.loads((home / "config.json").read_text())["providers"]["openai"]["apiKey"] == "sk-new"


def test_without_systemctl_no_service_is_offered(home: Path, fake_telegram: FakeTelegramServer) -> None:
    """In the Docker image (no systemd) onboard offered a user service, "installed" it and told the
    user to run systemctl and loginctl there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(NANOBOT_HOME=str(home), PYTHONPATH=str(REPO), TERM="dumb", PATH=str(home),
               NANOBOT_CHANNELS__TELEGRAM__BASE_URL=fake_telegram.base_url)
    term = Terminal([sys.executable, "-m", "nanobot", "onboard"], env, home)
    answer(term, ("provider>", ""), ("Telegram bot token", TG_TOKEN), ("Discord bot token", ""))
    code, output = term.finish()
    assert code == 0, output
    assert "[y/N]" not in output and "docker compose up -d" in output, output
    assert not (home / ".config" / "systemd").exists()


def test_a_home_that_is_a_file_is_a_usage_error(home: Path) -> None:
    """NANOBOT_HOME naming a file: "[Errno 20] Not a directory" and exit 1, where every other command
    says "is not a folder" with exit 2."""
    a_file = home / "not-a-folder"
    a_file.write_text("x")
    result = run_cli("onboard", home=home, env={"NANOBOT_HOME": str(a_file)})
    assert result.returncode == 2 and "is not a folder" in result.stderr and "Errno" not in result.stderr, result.stderr
    assert a_file.read_text() == "x"


def test_onboard_keeps_a_link_whose_target_is_not_there_yet(home: Path) -> None:
    """MEMORY.md and USER.md linked into a sync folder not mounted yet: onboard and doctor --fix
    replaced both links with templates, and the synced memory was no longer used once it came back."""
    assert run_cli("onboard", home=home).returncode == 0
    workspace = home / "workspace"
    synced = home / "sync-not-mounted"
    for rel in ("memory/MEMORY.md", "USER.md"):
        (workspace / rel).unlink()
        (workspace / rel).symlink_to(synced / Path(rel).name)
    assert run_cli("onboard", home=home).returncode == 0
    run_cli("doctor", "--fix", "--timeout", "1", home=home)
    for rel in ("memory/MEMORY.md", "USER.md"):
        assert (workspace / rel).is_symlink(), rel
        assert os.readlink(workspace / rel) == str(synced / Path(rel).name)
