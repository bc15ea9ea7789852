"""Sample users and media for a newcomer's first look: real files, real rows."""

from __future__ import annotations

import io
import random
import struct
import zlib

from rich.progress import Progress
from sqlmodel import col, select

from mediagraph import security
from mediagraph.db.media import Media
from mediagraph.db.users import User
from mediagraph.services import Services

DEMO_PASSWORD = "demo-password"
TAGS = ["music", "travel", "cats", "cooking", "games", "news", "art", "science", "sports", "live"]
WORDS = ["sunset", "river", "night", "city", "market", "storm", "garden", "harbor", "forest", "rooftop"]


def png_image(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A real PNG: a gradient from `rgb`, so browsers and players can show it."""
    rows = b"".join(
        b"\x00" + bytes(channel for x in range(width) for channel in ((rgb[0] + x) % 256, (rgb[1] + y) % 256, rgb[2]))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


async def load_demo(services: Services, *, users: int, media: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    password_hash = security.hash_password(DEMO_PASSWORD)
    async with services.databases.main_session() as session:
        existing = set((await session.execute(select(col(User.username)))).scalars())
        accounts = []
        for n in range(users):
            username = f"demo_{n}"
            if username in existing:
                continue
            accounts.append(
                User(id=services.ids.next_id(), username=username, nickname=f"Demo {n}", password_hash=password_hash)
            )
        session.add_all(accounts)
        await session.commit()
        demo_users = select(col(User.id)).where(col(User.username).like("demo\\_%"))
        owners = list((await session.execute(demo_users)).scalars())

    with Progress() as progress:
        task = progress.add_task("demo media", total=media)
        for _ in range(media):
            media_id = services.ids.next_id()
            image = png_image(64, 36, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
            key = f"{media_id % 256:02x}/{media_id}"
            size = await services.storage.save(key, io.BytesIO(image))
            async with services.databases.main_session() as session:
                session.add(
                    Media(
                        id=media_id,
                        owner_id=rng.choice(owners),
                        title=f"{rng.choice(WORDS).title()} {rng.choice(WORDS)}",
                        description="Sample media from `mediagraph demo`.",
                        tags=rng.sample(TAGS, rng.randint(1, 3)),
                        content_type="image/png",
                        filename=f"demo-{media_id}.png",
                        size_bytes=size,
                        storage_key=key,
                    )
                )
                await session.commit()
            progress.advance(task)
