"""Skills: frontmatter parsing, availability, workspace override, always-on inlining within its
budget, a byte-stable summary, the shipped built-ins and `nanobot skills list`."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger
from typer.testing import CliRunner

from nanobot.cli.skills import app as skills_app
from nanobot.skills.loader import BUILTIN_SKILLS_DIR, SkillError, SkillsLoader, parse_skill_file


def write_skill(base: Path, folder: str, frontmatter: str, body: str = "Do the thing.") -> Path:
    path = base / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{frontmatter.strip()}\n---\n{body}\n", encoding="utf-8")
    return path


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING")
    yield lines
    logger.remove(sink)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """(workspace, builtin dir), both empty."""
    workspace, builtin = tmp_path / "ws", tmp_path / "builtin"
    (workspace / "skills").mkdir(parents=True)
    builtin.mkdir()
    return workspace, builtin


def test_frontmatter_fields_are_parsed(tmp_path: Path) -> None:
    path = write_skill(
        tmp_path,
        "gh",
        "name: github\ndescription: |\n  Work with GitHub\n  via gh.\nalways: false\n"
        "requires:\n  bins: [sh]\n  env: [HOME]",
        body="# GitHub\n\nUse gh.",
    )
    skill = parse_skill_file(path, "workspace")
    assert (skill.name, skill.description, skill.always, skill.source) == (
        "github",
        "Work with GitHub via gh.",
        False,
        "workspace",
    )
    assert skill.available and skill.missing == [] and skill.body == "# GitHub\n\nUse gh."
    # The folder name is the default name.
    assert parse_skill_file(write_skill(tmp_path, "plain", "description: x"), "builtin").name == "plain"


def test_a_skill_in_windows_1252_is_read_as_such(tmp_path: Path) -> None:
    """A SKILL.md saved by a Windows editor reached the prompt with U+FFFD for every accent, while
    the same bytes in AGENTS.md were read right."""
    path = tmp_path / "cafe" / "SKILL.md"
    path.parent.mkdir()
    path.write_bytes("---\ndescription: Le café\n---\nFaire un café crème.\n".encode("cp1252"))
    skill = parse_skill_file(path, "workspace")
    assert (skill.description, skill.body) == ("Le café", "Faire un café crème.")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("# no frontmatter\n", "no YAML frontmatter"),
        ("---\ndescription: [unclosed\n---\nbody\n", "malformed YAML frontmatter at line"),
        ("---\n- a\n- b\n---\nbody\n", "must be a mapping"),
        ("---\nname: x\n---\nbody\n", "missing 'description'"),
        ("---\ndescription: d\nalways: sometimes\n---\n", "'always' must be true or false"),
        ("---\ndescription: d\nrequires: [gh]\n---\n", "'requires' must be a mapping"),
        ("---\ndescription: d\nrequires: {bins: [1]}\n---\n", "'requires.bins' must be a list"),
        ("---\ndescription: d\nrequires: {programs: [gh]}\n---\n", "unknown key(s) in 'requires': programs"),
        ("---\nname: ../escape\ndescription: d\n---\n", "invalid name"),
        ("---\ndescription: never closed\n", "no YAML frontmatter"),
        # read whole twice per prompt rebuild, a 300 MB one took ~1 GB of the gateway's memory
        ("---\ndescription: huge\n---\n" + "x" * (300 * 1024), "larger than 256 KiB"),
        # nested aliases: 368 bytes printed as a 52 MB warning after seconds, on every prompt build
        (
            "---\ndescription: d\na: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nname: [*c, *c, *c, *c, *c, *c, *c, *c]\n---\n",
            "aliases (*name) are not allowed here",
        ),
    ],
)
def test_malformed_skill_is_skipped_with_a_clear_warning(
    dirs: tuple[Path, Path], warnings: list[str], content: str, problem: str
) -> None:
    workspace, builtin = dirs
    bad = workspace / "skills" / "bad" / "SKILL.md"
    bad.parent.mkdir()
    bad.write_text(content, encoding="utf-8")
    write_skill(workspace / "skills", "good", "description: fine")
    loader = SkillsLoader(workspace, builtin)
    assert [s.name for s in loader.list_skills()] == ["good"]
    assert len(warnings) == 1 and str(bad) in warnings[0] and problem in warnings[0], warnings[0][:500]
    assert len(warnings[0]) < 1000
    loader.list_skills()  # the prompt is rebuilt often: the same broken file is reported once
    assert len(warnings) == 1


def test_availability_names_missing_binaries_and_env(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, builtin = dirs
    monkeypatch.setenv("SKILL_TEST_PRESENT", "1")
    monkeypatch.delenv("SKILL_TEST_ABSENT", raising=False)
    python = Path(sys.executable).name
    write_skill(
        workspace / "skills",
        "needs",
        f"description: d\nrequires:\n  bins: [{python}, no-such-binary-xyz]\n"
        "  env: [SKILL_TEST_PRESENT, SKILL_TEST_ABSENT]",
    )
    write_skill(
        workspace / "skills", "ok", f"description: d\nrequires: {{bins: [{python}], env: SKILL_TEST_PRESENT}}"
    )
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    skills = {s.name: s for s in SkillsLoader(workspace, builtin).list_skills()}
    assert not skills["needs"].available
    assert skills["needs"].missing == ["bin:no-such-binary-xyz", "env:SKILL_TEST_ABSENT"]
    assert skills["ok"].available and skills["ok"].missing == []
    summary = SkillsLoader(workspace, builtin).summary()
    missing = "[unavailable, missing bin:no-such-binary-xyz, env:SKILL_TEST_ABSENT]"
    assert f"- needs: d (skills/needs/SKILL.md) {missing}" in summary.splitlines()
    assert "- ok: d (skills/ok/SKILL.md)" in summary.splitlines()


def test_workspace_skill_overrides_builtin(dirs: tuple[Path, Path]) -> None:
    workspace, builtin = dirs
    write_skill(builtin, "notes", "description: built-in notes", body="BUILTIN BODY")
    write_skill(builtin, "other", "description: only built-in")
    write_skill(
        workspace / "skills", "my-notes", "name: notes\ndescription: my notes\nalways: true", body="MINE"
    )
    loader = SkillsLoader(workspace, builtin)
    skills = {s.name: s for s in loader.list_skills()}
    assert skills["notes"].source == "workspace" and skills["notes"].description == "my notes"
    assert skills["other"].source == "builtin"
    assert "MINE" in loader.always_on_content(10_000) and "BUILTIN BODY" not in loader.always_on_content(
        10_000
    )
    assert loader.display_path(skills["other"]) == (builtin / "other" / "SKILL.md").as_posix()


def test_always_on_skills_are_inlined_and_the_rest_summarised(dirs: tuple[Path, Path]) -> None:
    workspace, builtin = dirs
    write_skill(builtin, "rules", "description: house rules\nalways: true", body="Always be brief.")
    write_skill(workspace / "skills", "deploy", "description: How to deploy.", body="Run make deploy.")
    write_skill(
        workspace / "skills",
        "gated",
        "description: Needs a token.\nalways: true\nrequires: {env: [NO_SUCH_ENV_X1]}",
    )
    loader = SkillsLoader(workspace, builtin)
    assert loader.always_on_content(10_000) == "## Skill: rules\n\nAlways be brief."
    summary = loader.summary()
    # Inlined skills are not listed again; an always-on skill that cannot run is listed, marked.
    assert summary.splitlines() == [
        "- deploy: How to deploy. (skills/deploy/SKILL.md)",
        "- gated: Needs a token. (skills/gated/SKILL.md) [unavailable, missing env:NO_SUCH_ENV_X1]",
    ]


def test_a_skill_requiring_a_withheld_tool_is_left_out_of_that_turn(dirs: tuple[Path, Path]) -> None:
    """`requires.tools`: a group withholding memory_search was still told by the memory skill to
    search memory."""
    workspace, builtin = dirs
    write_skill(builtin, "recall", "description: r\nalways: true\nrequires: {tools: [memory_search]}", body="Search.")
    write_skill(workspace / "skills", "ops", "description: Run ops.\nrequires: {tools: [exec, read_file]}")
    write_skill(workspace / "skills", "plain", "description: Plain.")
    loader = SkillsLoader(workspace, builtin)
    assert loader.required_tools() == {"memory_search", "exec", "read_file"}
    assert loader.always_on_content(10_000) == "## Skill: recall\n\nSearch."
    assert [line.split(":")[0] for line in loader.summary().splitlines()] == ["- ops", "- plain"]
    group = frozenset({"memory_search", "memory_get", "exec"})
    assert loader.always_on_content(10_000, group) == ""
    assert loader.summary(None, group).splitlines() == ["- plain: Plain. (skills/plain/SKILL.md)"]
    assert loader.always_on_content(10_000, frozenset({"web_fetch"})) == "## Skill: recall\n\nSearch."
    with pytest.raises(SkillError, match="requires.tools"):
        parse_skill_file(write_skill(builtin, "bad", "description: b\nrequires: {tools: {exec: 1}}"), "builtin")


def test_always_on_content_shares_its_budget(dirs: tuple[Path, Path]) -> None:
    workspace, builtin = dirs
    write_skill(builtin, "a-small", "description: s\nalways: true", body="short rule")
    write_skill(builtin, "b-big", "description: b\nalways: true", body="B" * 5000)
    write_skill(builtin, "c-big", "description: c\nalways: true", body="C" * 5000)
    loader = SkillsLoader(workspace, builtin)
    full = loader.always_on_content(100_000)
    assert len(full) > 10_000 and full.startswith("## Skill: a-small")

    for budget in (3000, 1000, 400, 120, 10, 0):
        text = loader.always_on_content(budget)
        assert len(text) <= budget, budget
    text = loader.always_on_content(3000)
    assert "short rule" in text  # small skills fit whole; the big ones split the rest evenly
    assert abs(text.count("B") - text.count("C")) <= 2
    assert (
        text.count('read the rest with read_file("') == 2
        and (builtin / "b-big" / "SKILL.md").as_posix() in text
    )
    tight = loader.always_on_content(400)  # too little for any body: big skills become pointers
    assert tight.startswith("## Skill: a-small\n\nshort rule")
    assert tight.count("[left out for the prompt budget; read it with read_file(") == 2
    assert loader.always_on_content(3000) == text  # deterministic


def test_with_many_workspace_skills_the_built_ins_keep_their_path(dirs: tuple[Path, Path]) -> None:
    """With 400 workspace skills the built-ins were only named in the "More skills (read
    skills/<name>/SKILL.md)" tail, a path that does not exist for them (list_dir does not show them)."""
    workspace, builtin = dirs
    for n in range(400):
        write_skill(workspace / "skills", f"a{n:04d}", f"description: Workspace skill {n}.")
    write_skill(builtin, "cron", "description: Schedule reminders.")
    summary = SkillsLoader(workspace, builtin).summary(4_000)
    assert f"- cron: Schedule reminders. ({(builtin / 'cron' / 'SKILL.md').as_posix()})" in summary
    assert "a0399" in summary or "more" in summary.splitlines()[-1]


def test_summary_is_byte_stable(dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    workspace, builtin = dirs
    for name in ("zeta", "alpha", "mid"):
        write_skill(workspace / "skills", name, f"description: The {name} skill.")
    write_skill(builtin, "long", "description: " + "word " * 100)
    first = SkillsLoader(workspace, builtin).summary()
    loader = SkillsLoader(workspace, builtin)
    assert [loader.summary() for _ in range(3)] == [first] * 3
    # a built-in first (its path is not skills/<name>), then by name
    assert [line.split(":")[0] for line in first.splitlines()] == ["- long", "- alpha", "- mid", "- zeta"]
    assert max(len(line) for line in first.splitlines()) < 300
    signature = loader.signature()
    assert loader.signature() == signature
    write_skill(workspace / "skills", "alpha", "description: The alpha skill, edited.")
    assert loader.signature() != signature and loader.summary() != first


def test_shipped_builtin_skills_parse() -> None:
    loader = SkillsLoader(Path("/nonexistent-workspace"))
    assert loader.builtin_dir == BUILTIN_SKILLS_DIR
    skills = {s.name: s for s in loader.list_skills()}
    assert {"memory", "skill-creator", "cron"} <= set(skills)
    assert skills["memory"].always and not skills["skill-creator"].always
    assert "## Skill: memory" in loader.always_on_content(20_000)
    assert "skill-creator" in loader.summary() and "memory:" not in loader.summary()


def test_cli_skills_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "ws"
    write_skill(workspace / "skills", "deploy", "description: Deploy it.\nrequires: {env: [NO_SUCH_ENV_X2]}")
    write_skill(workspace / "skills", "broken", "description: [oops")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    runner = CliRunner()
    result = runner.invoke(skills_app, ["list", "-c", str(config)])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert "workspace" in lines["deploy"] and "missing env:NO_SUCH_ENV_X2" in lines["deploy"]
    assert "always" in lines["memory"] and "builtin" in lines["memory"] and "available" in lines["memory"]
    assert "broken" not in lines

    result = runner.invoke(skills_app, ["list", "-c", str(config), "--json"])
    rows = {row["name"]: row for row in json.loads(result.stdout)["skills"]}
    assert rows["deploy"]["path"] == "skills/deploy/SKILL.md" and rows["deploy"]["missing"] == [
        "env:NO_SUCH_ENV_X2"
    ]
