"""Requests to forget or change: which user messages of a chunk ask to forget, correct or update
something, and which facts such a request lets a consolidation drop from MEMORY.md
(validation.check_memory_update puts any other dropped fact back). "Forget" is matched in the
languages users write in most, CJK included; a fact goes only when a request names one of its
words, or most of them for a request that only removes something ("delete the draft email to
Alice" is no reason to lose "Sister Alice is diabetic"). A fact the model rewrote with a new value
goes when a message that says something changed ("I moved to Berlin", "不对，我妹妹叫安娜") gave
that value; "I'm also allergic to shellfish" changes no allergy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nanobot.memory.fact_words import changed_as_said, fact_words, short_words

# "forget" in the languages users write in most (the tool's instructions are English, the user's
# request need not be); CJK words have no word boundaries
_FORGET_WORDS = (
    r"oublie|oubliez|oublier|vergiss|vergessen|olvida|olvides|olvidar|olvídate|olvidate|dimentica|scordati"
    r"|esquece|esqueça"
)
_FORGET_CJK = r"忘记|忘掉|忘了|別記|别记|不要记|忘れて|忘れる|잊어"
_FORGET_RE = re.compile(
    r"\b(forget|remove|delete|erase|drop|no longer|any ?more|not true|isn't true|is wrong|stop remembering|"
    + _FORGET_WORDS
    + r"|supprime|efface|lösche|entferne|borra|quita|elimina|cancella|rimuovi|apaga|remova)\b|"
    + _FORGET_CJK
    + r"|删除|刪除|削除|삭제",
    re.I,
)
_OTHER_LANGUAGE_FORGET_RE = re.compile(r"\b(" + _FORGET_WORDS + r")\b|" + _FORGET_CJK, re.I)
#: a reminder, not a request to forget, with what it names: "don't (you) forget X", "I don't want
#: you to forget X", "vergiss X nicht", "no te olvides", "não se esqueça", "ne l'oublie pas", 别忘了
#: ("why don't you forget …" is a request)
_NEGATION = r"(?<!why )\b(?:don['’]?t|do\s+not|never|must\s+not|mustn['’]?t)\s+(?:\w+\s+){0,4}?"
#: "don't forget to delete my PIN": a task follows, which may be a request of its own
_FORGET_TO_RE = re.compile(_NEGATION + r"forget\s+to\b", re.I)
#: what a reminder names runs to the end of its clause, or to a joined one ("… and forget my PIN")
_REMINDED = (
    r"(?:(?!\s(?:and|but|y|e|und|aber|et|mais|pero|ma|mas)\s|\s[—–-]\s|\s{2}|\s(?=\S*忘)"
    r"|forget|olvid|vergiss|oubli|dimentic|esque|scord)[^,.;!?\n。，；！？])*"
)
_NEGATED_FORGET_RE = re.compile(
    r"(?:" + _NEGATION + r"forget\b"
    r"|\bvergiss\b[^,.;!?\n]{0,80}?\bnicht\b(?!\s+mehr)|\bvergessen\s+sie\b[^,.;!?\n]{0,80}?\bnicht\b(?!\s+mehr)"
    r"|\bno\s+(?:te\s+|se\s+)?olvid\w*|\bnão\s+(?:se\s+|te\s+)?esque\w*|\bnon\s+(?:ti\s+)?dimentic\w*"
    r"|\bne\s+(?:l['’]\s*)?oubli\w*\s+pas\b|\bn['’]\s*oubli\w*\s+pas\b"
    r"|别忘了?|別忘了?|不要忘[记記了]?|忘れるな|忘れないで)" + _REMINDED,
    re.I,
)
#: a request about what is remembered (not a task such as "delete the note about the draft email"
#: or "delete all emails about Tom"): its verbs, "memory" in the languages users write in, or
#: everything known about something ("everything you know about Tom", "all notes about Alice")
_ABOUT_MEMORY_RE = re.compile(
    r"\b(forget|forgot|no longer|not true|isn't true|wrong|incorrect|anymore|any more|stop remembering"
    r"|memory|memories|remember|mémoire|souvenirs?|gedächtnis|erinnerung|speicher|memoria|memória|"
    + _FORGET_WORDS
    + r")\b|"
    + _FORGET_CJK
    + r"|记忆|記憶|记住的|記住的|メモリ|覚えて|기억"
    r"|\b(?:everything|anything)\s+(?:(?:that\s+)?you\s+(?:know|remember|noted|saved|stored|have)\s+)?"
    r"(?:about|regarding|concerning)\b"
    r"|\ball\s+(?:(?:that\s+)?you\s+(?:know|remember)\s+)(?:about|regarding|concerning)\b"
    r"|\ball\s+(?:the\s+|my\s+|your\s+)?(?:notes|facts|memories|entries)\s+(?:about|on|regarding|concerning)\b"
    r"|\b(?:alles|tout|todo|tutto)\s+(?:über|sur|sobre|su)\b",
    re.I,
)


def _unnegated(text: str) -> str:
    """The request without its reminders ("Don't forget Anna's birthday is March 3, and delete …")."""
    return _NEGATED_FORGET_RE.sub(" ", _FORGET_TO_RE.sub(" ", text))


#: a message saying something changed or was wrong: a change on its own ("I moved to Berlin")...
_CHANGE_RE = re.compile(
    r"\b(moved|move|moving|no longer|wrong|incorrect|actually|instead|changed?|switched|anymore|any more|"
    r"correction|umgezogen|falsch|déménagé|faux|mudé|incorrecto)\b|"
    r"不对|不對|错了|錯了|搬家|搬到|違う|間違|引っ越|이사",
    re.I,
)
#: ...or only when it also names the old value ("my sister is Ana, not Anna"; "I got a new kitten"
#: replaces no cat, "my wife now works at Meta" no job of the user's)
_WEAK_CHANGE_RE = re.compile(
    r"\b(now|not|new|became|jetzt|nicht|neue[nrs]?|maintenant|plus|ahora|nuevo|nueva)\b|n't\b|"
    r"现在|現在|不是|不叫|改|新|今は|아니",
    re.I,
)
#: a message that adds rather than changes ("I'm also allergic to shellfish"): never a change, so a
#: model that rewrote the old fact with the new one has it put back (kept beats lost)
_ADDITION_RE = re.compile(
    r"\b(also|too|as well|another|additionally|besides|auch|aussi|también|anche|também)\b|还有|也|另外",
    re.I,
)


def changed_by_user(fact: str, new_lines: list[str], user_texts: Iterable[str]) -> bool:
    """Whether the update rewrote `fact` as one of `new_lines` with a value the user gave in a
    message saying it changed (see _CHANGE_RE and _WEAK_CHANGE_RE); kept beats lost otherwise."""
    old = fact_words(fact)
    for text in user_texts:
        if _ADDITION_RE.search(text):
            continue
        strong, weak = _CHANGE_RE.search(text), _WEAK_CHANGE_RE.search(text)
        if not (strong or weak):
            continue
        said = fact_words(text)
        for new_line in changed_as_said(fact, new_lines, said):
            if strong or (old - fact_words(new_line)) & said:
                return True
    return False


def forget_requests(user_texts: Iterable[str]) -> list[str]:
    """The user messages of the chunk that ask to forget or correct something."""
    return [t for t in user_texts if _FORGET_RE.search(_unnegated(t))]


def may_drop(fact: str, requests: list[str]) -> bool:
    """A fact may go when a request of the user to forget or correct something, or to remove
    something from memory, mentions one of its content words (short ones, numbers and CJK text
    included: "forget my PIN", "忘记我的银行卡密码", "delete everything about my ex"); a request that
    only removes something ("delete the note about the draft email to Alice") must name most of
    them, since a name it shares with a fact ("Sister Alice is diabetic") is no reason to lose it."""
    keys = fact_words(fact)
    short = short_words(fact)  # "delete everything about my ex" names "- Ex-boyfriend: Tom"
    for request in map(_unnegated, requests):
        shared = keys & fact_words(request)
        about_memory = _ABOUT_MEMORY_RE.search(request)
        if shared and (about_memory or 2 * len(shared) >= len(keys)):
            return True
        if about_memory and short & short_words(request):
            return True
    return False


def asks_to_forget_in_another_language(requests: list[str]) -> bool:
    """Whether the chunk asks to forget in a language other than English ("oublie", "vergiss"):
    its words cannot be matched with the facts', which the model may keep in English."""
    return any(_OTHER_LANGUAGE_FORGET_RE.search(_unnegated(request)) for request in requests)
