"""Requests to forget or change: which user messages of a chunk ask to forget, correct or update
something, and which facts such a request lets a consolidation drop from MEMORY.md
(validation.check_memory_update puts any other dropped fact back). "Forget" is matched in the
languages users write in most, CJK included; a fact goes only when a request names one of its
words, or most of them for a request that only removes something ("delete the draft email to
Alice" is no reason to lose "Sister Alice is diabetic"). A message is read clause by clause: a
reminder ("don't forget X", "vergiss X nicht") asks nothing to go, even beside a request in the
same message, and a request that names nothing ("forget it") names what came before it. A fact the
model rewrote with a new value
goes when a message that says something changed ("I moved to Berlin", "不对，我妹妹叫安娜") gave
that value; "I'm also allergic to shellfish" changes no allergy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from nanobot.memory.fact_words import changed_as_said, fact_words, short_words

# "forget" in the languages users write in most (the tool's instructions are English, the user's
# request need not be); CJK words have no word boundaries
_FORGET_WORDS = (
    r"oublie|oubliez|oublier|vergiss|vergessen|olvida|olvides|olvidar|olvídate|olvidate|dimentica|scordati"
    r"|esquece|esqueça"
)
# and the scripts without word boundaries or where `\b` is unreliable: Traditional Chinese, Japanese
# 消して, Korean 잊으세요/지워, Thai ลืม/ลบ, Hindi भूल/हटा, Arabic انس/احذف/امسح, Hebrew תשכח/תמחק/מחק
_FORGET_CJK = (
    r"忘记|忘掉|忘了|忘記|別記|别记|不要记|不要記|忘れて|忘れる|消して|잊어|잊으|지워"
    r"|ลืม|ลบ|भूल|हटा|मिटा|انس|احذف|امسح|תשכח|שכח|תמחק|מחק"
)
_FORGET_RE = re.compile(
    r"\b(forget|remove|delete|erase|drop|no longer|any ?more|not true|isn't true|is wrong|stop remembering|"
    + _FORGET_WORDS
    + r"|supprime|efface|lösche|entferne|borra|quita|elimina|cancella|rimuovi|apaga|remova)\b|"
    + _FORGET_CJK
    + r"|删除|刪除|删掉|刪掉|削除|삭제",
    re.I,
)
_OTHER_LANGUAGE_FORGET_RE = re.compile(r"\b(" + _FORGET_WORDS + r")\b|" + _FORGET_CJK, re.I)
#: a reminder or a refusal, not a request: "don't (you dare) forget X", "I don't want you to ever
#: forget X", "never remove X", "no te olvides", "nunca esqueça", "n'oublie jamais", 别忘了, 不能忘记,
#: 忘れてはいけない ("why don't you forget …" is a request; German "vergiss X nicht" is marked on the
#: whole sentence first, as its "nicht" may come after a joined part)
_NEGATED_RE = re.compile(
    r"(?<!why )\b(?:don['’]?t|do\s+not|never|must\s+not|mustn['’]?t)\s+"
    r"(?:(?:you|u|ever|again|just|dare|want|to|please|really|even|simply)\s+){0,5}?"
    r"(?:forget|remove|delete|erase|drop)\b(?!\s+to\b)"
    r"|\bnicht_vergessen\b"
    r"|\b(?:no|nunca|jamás)\s+(?:te\s+|se\s+)?(?:olvid|borr|esque|apag)\w*|\bnão\s+(?:se\s+|te\s+)?(?:esque|apag)\w*"
    r"|\b(?:non|mai)\s+(?:ti\s+)?(?:dimentic|cancell)\w*"
    r"|\bne\s+(?:l['’]\s*)?(?:oubli|supprim|effac)\w*\s+(?:pas|jamais)\b|\bn['’]\s*(?:oubli|effac)\w*\s+(?:pas|jamais)\b"
    r"|别忘|別忘|不要忘|不能忘|不可以忘|不要删|忘れるな|忘れないで|忘れては|忘れちゃ(?:だめ|ダメ|いけない)|消さないで",
    re.I,
)
#: German puts "nicht" last: "Vergiss Annas Geburtstag am 3. März und Toms Feier nicht!"
_GERMAN_REMINDER_RE = re.compile(
    r"\b(?:vergiss|vergessen\s+sie)\b((?:[^.;!?\n]|(?<=\d)\.){0,120}?\bnicht\b(?!\s+mehr))", re.I
)
#: where a message's clauses part: punctuation, a dash, and joining words ("…, and delete my PIN",
#: "… then forget my PIN", 然后); a full stop only before a capital, not after "Dr", "Mr" or a day
_CLAUSE_SPLIT_RE = re.compile(
    r"[,;!?\n。，；！？、]|(?<!\bDr)(?<!\bMr)(?<!\bMs)(?<!\bSt)(?<!Mrs)(?<!rof)(?<!\d)\.(?=\s+[A-Z])"
    r"|\s[—–-]\s|\s&\s|\b(?:and|but|then|so|also|plus|und|aber|dann|et|mais|puis|y|pero|luego|e|ma|poi|mas)\b"
    r"|然后|然後|还有|還有|另外|并且|並且|而且",
    re.I,
)
#: "don't forget to delete my PIN": the words of a reminder about a task, which follows
_FORGET_TO_RE = re.compile(r"\b(?:don['’]?t|do\s+not|never)\s+(?:you\s+)?forget\s+to\b", re.I)
#: a clause that asks to keep something ("… and remember tomorrow's meeting"): no part of a request
_REMEMBER_RE = re.compile(r"\b(?:remember|note|keep|merke?|souviens|recuerda|ricorda|lembra)\b|覚えて|记住|記住", re.I)
#: what names nothing by itself: a request of only these points back ("My PIN? Forget it.")
_POINTERS = frozenset({"everyth", "anyth", "someth", "all"})


def _names_something(text: str) -> bool:
    """Whether a request says what it is about, beside its verb ("forget it" does not)."""
    return bool(fact_words(_FORGET_RE.sub(" ", text)) - _POINTERS)


@lru_cache(maxsize=256)
def _asked(text: str) -> tuple[tuple[str, str], ...]:
    """What a message asks to let go, one (part, head) per request: a clause with a forget or delete
    verb starts one, a clause with a negated verb is a reminder, and a clause without either (the
    rest of a list: "forget my PIN, my address") belongs to the one before it. A request that names
    nothing ("please remove it", "forget everything about him") takes the clauses before it. The
    head is the request without the clauses after its verb's ("Olvídate, ya lo he reservado yo":
    a bare "never mind", whatever follows)."""
    text = _GERMAN_REMINDER_RE.sub(lambda m: "nicht_vergessen" + m.group(1), _FORGET_TO_RE.sub(" ", text))
    parts: list[tuple[list[str], str]] = []
    before: list[str] = []  # clauses since the last request or reminder
    asking = False
    for clause in _CLAUSE_SPLIT_RE.split(text):
        if _NEGATED_RE.search(clause):
            asking, before = False, []
            continue
        if _FORGET_RE.search(clause):
            asking = True
            head = [clause] if _names_something(clause) else before + [clause]
            parts.append((head, " , ".join(head)))
            before = []
        elif _REMEMBER_RE.search(clause):
            asking, before = False, []
        elif asking:
            parts[-1][0].append(clause)
        else:
            before.append(clause)
    return tuple((" , ".join(part), head) for part, head in parts)


#: a correction ("I no longer work as a nurse"): about what is remembered, but one shared word
#: ("work") is no reason to let "Brother Tom works at Siemens" go: it must share two
_CORRECTION_RE = re.compile(r"\b(no longer|not true|isn't true|wrong|incorrect|anymore|any more)\b", re.I)
#: a request about what the assistant remembers (not a task such as "delete the note about the draft
#: email", "remove anything about Google from my CV" or "delete the photos from the phone's memory"):
#: its verbs, its memory ("from your memory", "de ta mémoire", "aus deinem Gedächtnis"), or what it
#: knows ("everything you know about Tom", "all notes about Alice")
_ABOUT_MEMORY_RE = re.compile(
    r"\b(forget|forgot|stop remembering|" + _FORGET_WORDS + r")\b|" + _FORGET_CJK
    + r"|\b(?:your|my|from|in|out\s+of|the)\s+memor(?:y|ies)\b"
    r"|\b(?:ta|votre|ton)\s+mémoire\b|\bla\s+mémoire\b(?!\s+(?:du|de|des)\b)"
    r"|\b(?:tu|su|tua|sua|la)\s+memori[ao]\b(?!\s+(?:del?|do|da|dello|della)\b)|\bgedächtnis\b"
    r"|\bdein(?:em|er|en)?\s+(?:speicher|erinnerung)\b|你的记忆|你的記憶|記憶から|기억에서"
    r"|\b(?:everything|anything|all)\s+(?:that\s+)?you\s+(?:know|remember|noted|saved|stored|have)\s+"
    r"(?:about|regarding|concerning|on)\b"
    r"|\ball\s+(?:the\s+|my\s+|your\s+)?(?:notes|facts|memories|entries)\s+(?:about|on|regarding|concerning)\b",
    re.I,
)


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
    return [t for t in user_texts if _asked(t)]


def may_drop(fact: str, requests: list[str]) -> bool:
    """A fact may go when a request of the user to forget or correct something, or to remove
    something from memory, mentions one of its content words (short ones, numbers and CJK text
    included: "forget my PIN", "忘记我的银行卡密码", "delete everything about my ex"); a request that
    only removes something ("delete the note about the draft email to Alice") must name most of
    them, since a name it shares with a fact ("Sister Alice is diabetic") is no reason to lose it."""
    keys = fact_words(fact)
    short = short_words(fact)  # "delete everything about my ex" names "- Ex-boyfriend: Tom"
    for words, short_said, about_memory, correction in (part for text in requests for part in _read(text)):
        shared = keys & words
        corrected = correction and len(shared) >= 2
        if shared and (about_memory or corrected or 2 * len(shared) >= len(keys)):
            return True
        if about_memory and short & short_said:
            return True
    return False


@lru_cache(maxsize=256)
def _read(text: str) -> tuple[tuple[frozenset[str], frozenset[str], bool, bool], ...]:
    """Each request of a message as may_drop weighs it (read once, not once per fact): its words,
    its two-letter words, whether it is about what is remembered, whether it corrects something."""
    return tuple(
        (frozenset(fact_words(part)), frozenset(short_words(part)), bool(_ABOUT_MEMORY_RE.search(part)),
         bool(_CORRECTION_RE.search(part)))
        for part, _head in _asked(text)
    )


def asks_to_forget_in_another_language(requests: list[str]) -> bool:
    """Whether the chunk asks to forget in a language other than English ("oublie", "vergiss"):
    its words cannot be matched with the facts', which the model may keep in English."""
    return any(
        _OTHER_LANGUAGE_FORGET_RE.search(head) and _names_something(head)  # a bare "olvídate": never mind
        for request in requests
        for _part, head in _asked(request)
    )
