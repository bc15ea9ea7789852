from __future__ import annotations

from mediagraph.keys import KeySpace


def media_uploaded_channel(keys: KeySpace) -> str:
    return keys.channel("media", "uploaded")


def media_counts_channel(keys: KeySpace, media_id: int) -> str:
    """A media's like or comment count changed (views announce on their own channel).

    Messages only say that something changed; listeners read the counts themselves.
    """
    return keys.channel("media", "counts", f"{{{media_id}}}")
