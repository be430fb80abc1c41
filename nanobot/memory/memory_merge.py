"""How a consolidation's new MEMORY.md meets the one on disk (for the Consolidator).

`protect_memory`: an update that drops more than a share of the existing facts gets them back under
a heading of their own (logged), unless the user asked to forget them; lines the user had removed
never come back. `three_way_merge`: two consolidations that ran at once, both kept.
"""

from __future__ import annotations

from loguru import logger

from nanobot.memory.fact_lines import KEPT_FACTS_HEADING, fact_lines, restored_lines, still_there
from nanobot.memory.fact_words import fact_words
from nanobot.memory.store import (
    MAX_DROPPED_FACT_SHARE,
    MIN_FACTS_FOR_PROTECTION,
    SAME_BULLET_SHARE,
    normalise_fact,
    tombstone,
)


def protect_memory(old: str, new: str, forgotten: set[str]) -> tuple[str, list[str]]:
    """The MEMORY.md to write and the facts that protection put back.

    Lines whose tombstone is in `forgotten` never survive, whatever the LLM wrote.
    """
    new_lines = [
        line for line in new.splitlines() if not line.strip() or tombstone(line) not in forgotten
    ]
    if len(new_lines) < len(new.splitlines()):
        logger.info(
            "consolidation wrote back {} line(s) the user had asked to forget; left out",
            len(new.splitlines()) - len(new_lines),
        )
    new = "\n".join(new_lines).strip()
    old_facts = [f for f in fact_lines(old) if tombstone(f) not in forgotten]
    if len(old_facts) < MIN_FACTS_FOR_PROTECTION:
        return new, []
    new_norm = {normalise_fact(f) for f in fact_lines(new)}
    dropped = [f for f in old_facts if not still_there(f, new_norm)]
    if len(dropped) / len(old_facts) <= MAX_DROPPED_FACT_SHARE:
        return new, []
    merged = (
        new.rstrip()
        + ("\n\n" if new.strip() else "")
        + KEPT_FACTS_HEADING
        + "\n"
        + "\n".join(restored_lines(old, dropped))
    )
    return merged.strip(), dropped


def three_way_merge(base: str, ours: str, theirs: str) -> str:
    """Line-level merge for concurrent consolidations: `ours` plus the lines another writer added
    since `base`, minus the lines another writer removed since `base` — also where `ours` reworded
    one ("- Bank card PIN: 4821" for a removed "- Bank card PIN is 4821": a forget, or the owner's
    own edit, made while a consolidation ran, was undone by its rewording)."""
    base_set = {normalise_fact(x) for x in base.splitlines() if x.strip()}
    theirs_set = {normalise_fact(x) for x in theirs.splitlines() if x.strip()}
    # as the model wrote it: a line the validation put back under KEPT_FACTS_HEADING word for word
    # (it missed it, having reworded it) is no line the model kept
    ours_all = {normalise_fact(x) for x in ours.split(KEPT_FACTS_HEADING)[0].splitlines() if x.strip()}
    # lines the other writer removed or changed that `ours` no longer has as they were either: what
    # `ours` wrote instead may be their rewording (a line `ours` kept has no rewording in it: its
    # new "- Mother lives in Lyon" beside a kept "- Lives in Lyon" is a new fact)
    removed = [w for x in base.splitlines()
               if x.strip() and normalise_fact(x) not in theirs_set and normalise_fact(x) not in ours_all
               if len(w := fact_words(x)) >= 2]

    def restates_removed(line: str) -> bool:
        words = fact_words(line)
        return any(fact <= words and len(fact) >= SAME_BULLET_SHARE * len(words) for fact in removed)

    ours_lines = [x for x in ours.splitlines()
                  if not x.strip() or normalise_fact(x) in theirs_set
                  or (normalise_fact(x) not in base_set and not restates_removed(x))]
    ours_set = {normalise_fact(x) for x in ours_lines if x.strip()}
    added = [x for x in theirs.splitlines() if x.strip() and normalise_fact(x) not in base_set
             and normalise_fact(x) not in ours_set]
    return "\n".join([*ours_lines, *added]).strip()
