"""Every record type ingest accepts, registered in one place: the core types and the organizer's operations.

The core types and their fields are in :mod:`doxa.data.models` (mirroring schema.sql);
the organizer's in :mod:`doxa.data.operation_records`. A new record type is added to one
of those modules and listed here; its writer goes to :func:`doxa.data.writer.write_batch`
(core tables) or to an :class:`~doxa.data.writer.ExtraWriter` handed over by the store.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field, TypeAdapter

from . import models
from .operation_records import OPERATION_RECORD_TYPES

RECORD_TYPES: dict[str, type[models._Record]] = {**models.RECORD_TYPES, **OPERATION_RECORD_TYPES}

#: Validates one record of any type, chosen by its ``type`` field.
record_adapter: TypeAdapter = TypeAdapter(Annotated[Union[tuple(RECORD_TYPES.values())], Field(discriminator="type")])
