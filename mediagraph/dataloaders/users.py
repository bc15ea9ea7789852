from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from mediagraph.dataloaders.base import Loader
from mediagraph.db.users import User


class UserByIdLoader(Loader[int, User | None]):
    async def load_batch(self, keys: list[int]) -> Sequence[User | None]:
        async with self.context.db.use() as session:
            rows = (await session.execute(select(User).where(User.id.in_(keys)))).scalars()  # type: ignore[attr-defined]
            found = {user.id: user for user in rows}
        return [found.get(key) for key in keys]


class UserByUsernameLoader(Loader[str, User | None]):
    async def load_batch(self, keys: list[str]) -> Sequence[User | None]:
        async with self.context.db.use() as session:
            rows = (await session.execute(select(User).where(User.username.in_(keys)))).scalars()  # type: ignore[attr-defined]
            found = {user.username: user for user in rows}
        return [found.get(key) for key in keys]
