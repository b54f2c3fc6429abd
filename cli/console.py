"""The rich console every command prints through (rich loads on first use, not on `doxa belief`)."""

from __future__ import annotations


def console():
    # lazy: rich costs start-up time the fast path of `doxa belief` does not pay
    from rich.console import Console

    return Console()
