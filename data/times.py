"""Times: parsing shared by ingest and the command line, and the scorer's time axis (days since the epoch).

No heavy imports: used on the read path."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


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
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


def to_days(moment: datetime | None) -> float:
    """datetime → float days since the epoch (the scorer's time axis)."""
    if moment is None:
        return float("inf")
    return (moment - datetime(1970, 1, 1)).total_seconds() / 86400.0


def from_days(days: float) -> datetime:
    return datetime(1970, 1, 1) + timedelta(days=float(days))
