"""Time expressions in a search query: "yesterday", "last week", "in March", "2025-03-01", "3 days ago",
and parts of a month or a year ("early March", "the end of last month", "年初", "去年底").

parse_time_range() turns the first expression it recognises into an inclusive date range (relative
to today) and returns the query without it, so the expression's words do not dilute the keyword
search. Ranking then prefers chunks whose day lies in the range. English and Chinese forms; a
month without a year means its most recent occurrence (not in the future); the range says so
(year_implied), and ranking moves it to the latest earlier year that memory has notes of.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",),
            ("june", "jun"), ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"),
            ("october", "oct"), ("november", "nov"), ("december", "dec"),
        ]
    )
    for name in names
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBER_WORDS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "a couple of": 2, "a few": 3, "several": 4}
_ZH_WEEKDAYS = "一二三四五六日天"  # 周一 ... 周日 / 周天
_ZH_DIGITS = "〇一二三四五六七八九"
_MONTH_NAMES = "|".join(sorted(_MONTHS, key=len, reverse=True))
_NUM = r"(\d+|a couple of|a few|several|a|one|two|three|four|five|six|seven)"
# "early March", "mid-March", "at the end of last year": the part, as 初 / 中 / 底 (see _part_of_month)
_EN_PARTS = {"early": "初", "start of": "初", "beginning of": "初", "mid": "中", "middle of": "中", "late": "底",
             "end of": "底"}
_EN_PART = (r"\b(?:(?:at|in|around|by|towards?|until|till) )?(?:the )?"
            rf"({'|'.join(_EN_PARTS)})[ -](?:the month of )?")


@dataclass(frozen=True)
class TimeRange:
    first: date
    last: date
    year_implied: bool = False  # "in March": the year was not said, an earlier one may be meant

    def contains(self, day: date) -> bool:
        return self.first <= day <= self.last

    def year_before(self) -> TimeRange:
        """The same days one year earlier (29 February becomes the 28th)."""
        def back(day: date) -> date:
            return day.replace(year=day.year - 1, day=min(day.day, 28) if day.month == 2 else day.day)

        return TimeRange(back(self.first), back(self.last), self.year_implied)


def _month_range(year: int, month: int) -> TimeRange:
    first = date(year, month, 1)
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return TimeRange(first, nxt - timedelta(days=1))


def _recent_month(month: int, today: date) -> TimeRange:
    year = today.year if month <= today.month else today.year - 1
    found = _month_range(year, month)
    return TimeRange(found.first, found.last, year_implied=True)


def _count(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBER_WORDS.get(text, 1)


def _rules(today: date) -> list[tuple[re.Pattern[str], object]]:
    monday = today - timedelta(days=today.weekday())
    this_month = _month_range(today.year, today.month)
    return [
        (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), lambda m: _day(int(m[1]), int(m[2]), int(m[3]))),
        (re.compile(r"\b(\d{4})-(\d{2})\b"), lambda m: _month(int(m[1]), int(m[2]))),
        # A part of a month or a year ("early March", "the end of last month", "年初") before the
        # whole periods below, which would otherwise match inside it.
        (re.compile(rf"{_EN_PART}({_MONTH_NAMES})\.?(?:,? (\d{{4}}))?\b"),
         lambda m: _part_of_month(
             _month(int(m[3]), _MONTHS[m[2]]) if m[3] else _recent_month(_MONTHS[m[2]], today), _EN_PARTS[m[1]])),
        (re.compile(rf"{_EN_PART}(?:the|this|last) month\b"),
         lambda m: _part_of_month(_last_month(today) if "last month" in m[0] else this_month, _EN_PARTS[m[1]])),
        (re.compile(rf"{_EN_PART}(?:(?:the|this|last) year|(\d{{4}}))\b"),
         lambda m: _part_of_year(_year(int(m[2]) if m[2] else today.year - ("last year" in m[0])),
                                 _EN_PARTS[m[1]])),
        # Not 年中 (每年中秋), 十年底线 nor 三年初: 年 as a count of years.
        (re.compile(rf"(?:(今|去|前)年?|(\d{{4}})|(?<![\d{_ZH_DIGITS}十两几多每]))年(初|底(?!线)|末)"),
         lambda m: _part_of_year(_year(int(m[2]) if m[2] else today.year - "今去前".index(m[1] or "今")), m[3])),
        # Not 三个月底 (a count), 每月底 (every month), 正月初一 (a lunar date).
        (re.compile(rf"(?:(上个?|这个|本)|(?<![个每正\d{_ZH_DIGITS}十两]))月(初|中旬|中|底|末)"),
         lambda m: _part_of_month(_last_month(today) if m[1] and m[1][0] == "上" else this_month, m[2])),
        (re.compile(r"\btoday\b|今天"), lambda m: TimeRange(today, today)),
        (re.compile(r"\byesterday\b|昨天"), lambda m: _ago(today, 1, 1)),
        (re.compile(r"\bday before yesterday\b|前天"), lambda m: _ago(today, 2, 2)),
        (re.compile(rf"(上|这|本)(?:个)?(?:周|星期|礼拜)([{_ZH_WEEKDAYS}])"),
         lambda m: _day_of_week(monday - timedelta(days=7 if m[1] == "上" else 0), m[2])),
        (re.compile(rf"(?<![{_ZH_DIGITS}十两几每])(?:周|星期|礼拜)([{_ZH_WEEKDAYS}])"),  # not 一周一次
         lambda m: _weekday(today, _WEEKDAYS[_zh_weekday(m[1])])),
        (re.compile(r"\b(?:earlier )?(?:this|the current) week\b|本周|这周"), lambda m: TimeRange(monday, today)),
        (re.compile(r"\blast week\b|上周|上个星期"),
         lambda m: TimeRange(monday - timedelta(days=7), monday - timedelta(days=1))),
        (re.compile(r"\b(?:earlier )?this month\b|这个月|本月"), lambda m: TimeRange(today.replace(day=1), today)),
        (re.compile(r"\blast month\b|上个月"), lambda m: _last_month(today)),
        (re.compile(r"\b(?:earlier )?this year\b|今年"), lambda m: TimeRange(date(today.year, 1, 1), today)),
        (re.compile(r"\blast year\b|去年"), lambda m: _year(today.year - 1)),
        (re.compile(rf"\b{_NUM} (day|week|month|year)s? ago\b"), lambda m: _n_ago(today, _count(m[1]), m[2])),
        (re.compile(rf"\b(?:in the )?(?:past|last) {_NUM} (day|week|month)s?\b"),
         lambda m: _n_ago(today, _count(m[1]), m[2], span=True)),
        (re.compile(rf"\b(?:last|on) ({'|'.join(_WEEKDAYS)})\b"), lambda m: _weekday(today, m[1])),
        (re.compile(rf"\b(?:in|during|since|on|of|from) ({_MONTH_NAMES})\.?(?:,? (\d{{4}}))?\b"),
         lambda m: _month(int(m[2]), _MONTHS[m[1]]) if m[2] else _recent_month(_MONTHS[m[1]], today)),
        (re.compile(rf"(?:(\d{{4}})年)?(\d{{1,2}}|[{_ZH_DIGITS}十]{{1,3}})月(?:份)?(初|中旬|中|底|末)?"),
         lambda m: _part_of_month(_zh_month(m[1], m[2], today), m[3])),
        (re.compile(r"\bin (\d{4})\b"), lambda m: _year(int(m[1]))),
    ]


def _zh_number(text: str) -> int:
    """'4', '四', '十', '十二', '二十' -> 4, 4, 10, 12, 20 (0 when it is no number: '十十', '二二')."""
    if text.isdigit():
        return int(text)
    tens, ten, ones = text.partition("十")
    if not ten:
        return _ZH_DIGITS.index(text) if len(text) == 1 else 0
    if len(tens) > 1 or len(ones) > 1 or "十" in ones:
        return 0
    return (_ZH_DIGITS.index(tens) if tens else 1) * 10 + (_ZH_DIGITS.index(ones) if ones else 0)


def _zh_month(year: str | None, month: str, today: date) -> TimeRange | None:
    number = _zh_number(month)
    if not 1 <= number <= 12:
        return None
    return _month(int(year), number) if year else _recent_month(number, today)


def _part_of_month(month: TimeRange | None, part: str | None) -> TimeRange | None:
    """月初 / 月中 / 月底: the first, middle or last ten days of the month."""
    if month is None or not part:
        return month
    first = {"初": 1, "中": 11, "中旬": 11}.get(part, 21)
    last = {"初": 10, "中": 20, "中旬": 20}.get(part, month.last.day)
    return TimeRange(month.first.replace(day=first), month.first.replace(day=last), month.year_implied)


def _part_of_year(year: TimeRange | None, part: str) -> TimeRange | None:
    """年初 / 年底, "the start / middle / end of the year": its first two months, May to August,
    its last two months."""
    if year is None:
        return None
    first, last = {"初": (1, 2), "中": (5, 8)}.get(part, (11, 12))
    return TimeRange(year.first.replace(month=first), _month_range(year.first.year, last).last)


def _zh_weekday(name: str) -> int:
    """'一' ... '六' -> 0 ... 5; '日' and '天' (Sunday) -> 6."""
    return min(_ZH_WEEKDAYS.index(name), 6)


def _day_of_week(monday: date, name: str) -> TimeRange:
    day = monday + timedelta(days=_zh_weekday(name))
    return TimeRange(day, day)


def _year(y: int) -> TimeRange | None:
    return TimeRange(date(y, 1, 1), date(y, 12, 31)) if 1900 <= y <= 2200 else None


def _day(y: int, m: int, d: int) -> TimeRange | None:
    try:
        day = date(y, m, d)
    except ValueError:
        return None
    return TimeRange(day, day)


def _month(y: int, m: int) -> TimeRange | None:
    return _month_range(y, m) if 1 <= m <= 12 and 1900 <= y <= 2200 else None


def _ago(today: date, first_days: int, last_days: int) -> TimeRange:
    return TimeRange(today - timedelta(days=first_days), today - timedelta(days=last_days))


def _last_month(today: date) -> TimeRange:
    end = today.replace(day=1) - timedelta(days=1)
    return TimeRange(end.replace(day=1), end)


def _n_ago(today: date, n: int, unit: str, span: bool = False) -> TimeRange:
    days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n
    if span:
        return TimeRange(today - timedelta(days=days), today)
    # "three weeks ago" is fuzzy: half a unit either side
    slack = {"day": 1, "week": 3, "month": 10, "year": 120}[unit]
    return TimeRange(today - timedelta(days=days + slack), today - timedelta(days=max(0, days - slack)))


def _weekday(today: date, name: str) -> TimeRange:
    back = (today.weekday() - _WEEKDAYS.index(name)) % 7 or 7
    day = today - timedelta(days=back)
    return TimeRange(day, day)


def parse_time_range(query: str, today: date) -> tuple[TimeRange | None, str]:
    """(the range the query asks about or None, the query without the time expression)."""
    low = query.lower()
    for pattern, build in _rules(today):
        match = pattern.search(low)
        if not match:
            continue
        found = build(match)  # type: ignore[operator]
        if found is None:
            continue
        rest = (query[: match.start()] + " " + query[match.end() :]).strip()
        return found, " ".join(rest.split())
    return None, query
