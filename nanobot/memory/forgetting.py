"""Requests to forget: which user messages of a chunk ask to forget or correct something, and which
facts such a request lets a consolidation drop from MEMORY.md (validation.check_memory_update puts
any other dropped fact back). "Forget" is matched in the languages users write in most, CJK
included; a fact goes only when a request names one of its words, or most of them for a request
that only removes something ("delete the draft email to Alice" is no reason to lose "Sister Alice
is diabetic").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nanobot.memory.fact_words import fact_words

# "forget" in the languages users write in most (the tool's instructions are English, the user's
# request need not be); CJK words have no word boundaries
_FORGET_WORDS = (
    r"oublie|oubliez|oublier|vergiss|vergessen|olvida|olvides|olvidar|dimentica|esquece|esqueça"
)
_FORGET_CJK = r"忘记|忘掉|忘了|別記|别记|不要记|忘れて|忘れる|잊어"
_FORGET_RE = re.compile(
    r"\b(forget|remove|delete|erase|drop|no longer|not true|isn't true|is wrong|stop remembering|"
    + _FORGET_WORDS
    + r"|supprime|efface|lösche|borra|elimina|cancella|apaga)\b|"
    + _FORGET_CJK
    + r"|删除|刪除|削除|삭제",
    re.I,
)
_OTHER_LANGUAGE_FORGET_RE = re.compile(r"\b(" + _FORGET_WORDS + r")\b|" + _FORGET_CJK, re.I)
#: a request about what is remembered (not a task such as "delete the draft email")
_ABOUT_MEMORY_RE = re.compile(
    r"\b(forget|forgot|no longer|not true|isn't true|wrong|incorrect|anymore|any more|stop remembering"
    r"|memory|memories|remember|notes?|" + _FORGET_WORDS + r")\b|" + _FORGET_CJK,
    re.I,
)


def forget_requests(user_texts: Iterable[str]) -> list[str]:
    """The user messages of the chunk that ask to forget or correct something."""
    return [t for t in user_texts if _FORGET_RE.search(t)]


def may_drop(fact: str, requests: list[str]) -> bool:
    """A fact may go when a request of the user to forget or correct something, or to remove
    something from memory, mentions one of its content words (short ones, numbers and CJK text
    included: "forget my PIN", "忘记我的银行卡密码"); a request that only removes something ("delete
    the draft email to Alice") must name most of them, since a name it shares with a fact ("Sister
    Alice is diabetic") is no reason to lose the fact."""
    keys = fact_words(fact)
    for request in requests:
        shared = keys & fact_words(request)
        if shared and (_ABOUT_MEMORY_RE.search(request) or 2 * len(shared) >= len(keys)):
            return True
    return False


def asks_to_forget_in_another_language(requests: list[str]) -> bool:
    """Whether the chunk asks to forget in a language other than English ("oublie", "vergiss"):
    its words cannot be matched with the facts', which the model may keep in English."""
    return any(_OTHER_LANGUAGE_FORGET_RE.search(request) for request in requests)
