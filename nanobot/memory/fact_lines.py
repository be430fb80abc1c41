"""The fact lines of a MEMORY.md text: which lines are facts, whether a fact is still there after an
update (also as put back), and how a dropped one is put back under its section's name.
"""

from __future__ import annotations

from nanobot.memory.store import BULLET_MARKS, normalise_fact

KEPT_FACTS_HEADING = "## Kept from the previous version"


def fact_lines(text: str) -> list[str]:
    """The fact lines of a MEMORY.md text (headings, blanks, comments such as the template's, and our
    own kept-heading excluded)."""
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip()
        and not line.strip().startswith(("#", "<!--"))
        and line.strip() != KEPT_FACTS_HEADING
    ]


def without_repeated_facts(text: str) -> str:
    """`text` with each fact bullet once within its section (the first kept): a model restating
    what the file already holds had it appended again at every `/new`, the copies filling the
    prompt. The same words under two sections ("## Anna", "## Bob": "- Birthday: 3 March") are
    two facts and both stay."""
    seen: set[tuple[str, str]] = set()
    section, kept = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            section = line
        elif line.startswith(BULLET_MARKS):
            key = (section, normalise_fact(line))
            if key in seen:
                continue
            seen.add(key)
        kept.append(raw)
    return "\n".join(kept)


def still_there(fact: str, new_norm: set[str]) -> bool:
    """Whether a fact is among the new file's (normalised) facts, also as put back under its section
    by `restored_lines` ("anna (sister): birthday: 3 march" holds "birthday: 3 march")."""
    norm = normalise_fact(fact)
    return norm in new_norm or any(line.endswith(": " + norm) for line in new_norm)


def restored_lines(previous: str, dropped: list[str]) -> list[str]:
    """The dropped facts of `previous` as lines to put back under KEPT_FACTS_HEADING, each naming
    the section it came from ("- Anna (sister): Birthday: 3 March"): under the kept heading a bare
    "- Birthday: 3 March" no longer says whose birthday it is."""
    section: dict[str, str] = {}
    heading = ""
    for raw in previous.splitlines():
        line = raw.strip()
        if line.startswith("##"):  # a section; a top "# Memory" title names nothing
            heading = "" if line == KEPT_FACTS_HEADING else line.lstrip("#").strip()
        elif line and not line.startswith("#"):
            section.setdefault(line, heading)
    out = []
    for fact in dropped:
        body = fact.lstrip("-*• ").strip()
        where = section.get(fact.strip(), "")
        out.append(f"- {where}: {body}" if where and not body.lower().startswith(where.lower()) else f"- {body}")
    return out
