"""Times: parsing shared by ingest and the command line, and the scorer's time axis (days since the epoch).

A store holds naive datetimes, all in UTC: :func:`utc_now` is "now" in that form, and
:func:`parse_time` / :func:`as_moment` bring whatever a caller gives (an ISO 8601 string, a
date, an aware or naive datetime) into it. Every part of doxa takes its "now" and its time
arguments from here.

No heavy imports: used on the read path."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

#: "No cut-off": later than any time a store holds (ISO 8601 stops at year 9999).
FAR_FUTURE = datetime(9999, 1, 1)


def utc_now() -> datetime:
    """Now, as a naive UTC datetime (the form every time in a store has)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_time(value: object) -> datetime:
    """ISO 8601 date or date-time → naive UTC datetime; raises ValueError saying what is accepted."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"cannot read time {value!r}: use ISO 8601, e.g. 2026-06-02 or 2026-06-02T10:00:00Z"
            ) from None
    else:
        raise ValueError(f"time must be an ISO 8601 string, got {type(value).__name__}")
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
        except OverflowError:
            # 0001-01-01T00:00+14:00 is a moment of year 0 in UTC: Python's datetimes stop at year 1
            raise ValueError(f"time {value!r} lies outside the years 1 to 9999 once converted to UTC: "
                             "give a time within them") from None
    return moment


def as_moment(at: datetime | date | str | None) -> datetime | None:
    """An ``at`` as every reading function takes it: None (now), an ISO 8601 string
    ("2026-05-01", "2026-05-01T10:00:00+02:00"), a date, or a datetime (aware ones are
    converted to UTC). Raises ValueError saying what is accepted."""
    if at is None:
        return None
    if isinstance(at, date) and not isinstance(at, datetime):
        at = datetime(at.year, at.month, at.day)
    return parse_time(at)


def to_days(moment: datetime | None) -> float:
    """datetime → float days since the epoch (the scorer's time axis)."""
    if moment is None:
        return float("inf")
    return (moment - datetime(1970, 1, 1)).total_seconds() / 86400.0


def from_days(days: float) -> datetime:
    return datetime(1970, 1, 1) + timedelta(days=float(days))
