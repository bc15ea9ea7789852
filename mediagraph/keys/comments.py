from __future__ import annotations

from mediagraph.keys import KeySpace


def comment_added_channel(keys: KeySpace, media_id: int) -> str:
    """Comments as they are added to one media, for `commentAdded(mediaId:)`."""
    return keys.channel("comments", "added", f"{{{media_id}}}")
