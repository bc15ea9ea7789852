"""Period instances of a board: which day, ISO week or month a moment falls in (UTC), by key."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from mediagraph.db.leaderboards import Period
from mediagraph.errors import BadUserInput

ALL_TIME_KEY = "all"
WEEK_KEY = re.compile(r"^(\d{4})-W(\d{2})$")
MONTH_KEY = re.compile(r"^(\d{4})-(\d{2})$")


@dataclass(frozen=True)
class PeriodWindow:
    """One instance of a period: its key, and [starts_at, ends_at) (both None for all-time)."""

    key: str
    starts_at: datetime | None
    ends_at: datetime | None

    def expires_at(self, now: datetime, *, grace: timedelta, history_cache: timedelta) -> datetime | None:
        """When this instance's Redis keys go: once it is history, or soon after a rebuild of history."""
        if self.ends_at is None:
            return None
        return max(self.ends_at + grace, now + history_cache)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def window_of_day(period: Period, day: date) -> PeriodWindow:
    if period is Period.ALL_TIME:
        return PeriodWindow(ALL_TIME_KEY, None, None)
    if period is Period.DAILY:
        return PeriodWindow(day.isoformat(), _midnight(day), _midnight(day + timedelta(days=1)))
    if period is Period.WEEKLY:
        year, week, weekday = day.isocalendar()
        monday = day - timedelta(days=weekday - 1)
        return PeriodWindow(f"{year}-W{week:02d}", _midnight(monday), _midnight(monday + timedelta(days=7)))
    first = day.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    return PeriodWindow(f"{first.year}-{first.month:02d}", _midnight(first), _midnight(following))


def current_window(period: Period, now: datetime) -> PeriodWindow:
    return window_of_day(period, now.astimezone(UTC).date())


def parse_window(period: Period, text: str) -> PeriodWindow:
    """A period instance from its key (`2026-11-23`, `2026-W48`, `2026-11`, `all`) or any date inside it."""
    value = text.strip()
    invalid = BadUserInput(
        f"`period` {text[:40]!r} is not a period of this {period.value.lower().replace('_', '-')} board: "
        "pass its key as `Leaderboard.period` shows it, or a date (YYYY-MM-DD) inside it.",
        argument="period",
    )
    if period is Period.ALL_TIME and value == ALL_TIME_KEY:
        return window_of_day(period, date.today())
    try:
        if period is Period.WEEKLY and (match := WEEK_KEY.fullmatch(value)):
            return window_of_day(period, date.fromisocalendar(int(match[1]), int(match[2]), 1))
        if period is Period.MONTHLY and (match := MONTH_KEY.fullmatch(value)):
            return window_of_day(period, date(int(match[1]), int(match[2]), 1))
        return window_of_day(period, date.fromisoformat(value))
    except (ValueError, OverflowError):
        raise invalid from None


# A period instance as a positive integer, for global ids: 1 for all-time, else 1 + the
# proleptic ordinal of its first day (a board's kind says whether that day, week or month).
ALL_TIME_CODE = 1


def window_code(window: PeriodWindow) -> int:
    return ALL_TIME_CODE if window.starts_at is None else window.starts_at.date().toordinal() + 1


def window_of_code(period: Period, code: int) -> PeriodWindow | None:
    """The instance `window_code` numbered `code`, or None when the number names none of this kind."""
    if period is Period.ALL_TIME:
        return window_of_day(period, date.today()) if code == ALL_TIME_CODE else None
    try:
        day = date.fromordinal(code - 1)
    except (ValueError, OverflowError):
        return None
    window = window_of_day(period, day)
    return window if window.starts_at is not None and window.starts_at.date() == day else None
