from __future__ import annotations

from collections.abc import Sequence

from mediagraph.dataloaders.base import HotRowsByIdLoader, Loader
from mediagraph.db.rows import RowBuilder, select_where_any
from mediagraph.db.users import User

USERS_BY_ID = select_where_any(User, "id")
USERS_BY_USERNAME = select_where_any(User, "username")
user_rows = RowBuilder(User)


class UserByIdLoader(HotRowsByIdLoader[User]):
    table = "users"
    statement = USERS_BY_ID
    rows = user_rows


class FreshUserByIdLoader(Loader[int, User | None]):
    """Users as they are now, never from the hot rows: for checking credentials (token version)."""

    async def load_batch(self, keys: list[int]) -> Sequence[User | None]:
        rows = await self.context.services.databases.main_reads.fetch_keyed(USERS_BY_ID, "id", keys)
        return [user_rows(rows[key]) if key in rows else None for key in keys]


class UserByUsernameLoader(Loader[str, User | None]):
    async def load_batch(self, keys: list[str]) -> Sequence[User | None]:
        rows = await self.context.services.databases.main_reads.fetch_keyed(USERS_BY_USERNAME, "username", keys)
        return [user_rows(rows[key]) if key in rows else None for key in keys]
