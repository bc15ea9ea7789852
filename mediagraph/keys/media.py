from __future__ import annotations

from mediagraph.keys import KeySpace


def media_uploaded_channel(keys: KeySpace) -> str:
    return keys.channel("media", "uploaded")
