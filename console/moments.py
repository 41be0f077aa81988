"""A moment a client gives (an expiry, an absence's end): one the database stores and reads back.

PostgreSQL keeps a timestamp up to the year 294276, but Python's datetime (and so psycopg, reading it back) stops at
9999-12-31 in UTC. `9999-12-31T23:59:59-12:00` is a valid ISO datetime that is already 10000-01-01 in UTC: stored, it
made every later read of its row fail (a rule's: every run of its agent, the rules list, the rule's own revocation).
Every datetime a route or a form takes goes through `storable`."""

from datetime import UTC, datetime
from typing import Annotated

from django.core.exceptions import ValidationError
from pydantic import AfterValidator, AwareDatetime


def storable(value: datetime) -> datetime:
    """`value` unchanged, when it falls within the years 1 to 9999 in UTC (one without an offset: read as UTC);
    ValueError otherwise."""
    try:
        (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ValueError("This moment is out of range: give one within the years 1 to 9999 in UTC.") from None
    return value


def storable_field(value: datetime | None) -> None:
    """`storable` as a form field's validator, for a form whose moment reaches no `Moment` (the away form's)."""
    if value is not None:
        try:
            storable(value)
        except ValueError as error:
            raise ValidationError(str(error), code="out_of_range") from None


# A JSON datetime with its offset that the database stores and reads back.
Moment = Annotated[AwareDatetime, AfterValidator(storable)]
