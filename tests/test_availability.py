"""Which PostgreSQL failures count as an outage (SERVICE_UNAVAILABLE) rather than a bug."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from mediagraph.db.availability import database_unreachable
from mediagraph.settings import Settings


def _plain(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def test_a_server_out_of_connection_slots_is_an_outage(settings: Settings) -> None:
    # A role allowed no connections gets the same refusal (SQLSTATE 53300) as a full server.
    role = f"mg_full_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(_plain(settings.database_url))
    try:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 0')
        with pytest.raises(asyncpg.PostgresError) as refused:
            await asyncpg.connect(_plain(make_url(settings.database_url).set(username=role).render_as_string(False)))
        assert refused.value.sqlstate == "53300"
        assert database_unreachable(refused.value)
    finally:
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


async def test_a_wrong_statement_is_not_an_outage(settings: Settings) -> None:
    connection = await asyncpg.connect(_plain(settings.database_url))
    try:
        with pytest.raises(asyncpg.PostgresError) as failed:
            await connection.fetch("SELECT no_such_column FROM pg_class")
        assert not database_unreachable(failed.value)
    finally:
        await connection.close()
