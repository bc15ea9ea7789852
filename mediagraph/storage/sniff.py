"""Recognise a file's real type from its first bytes, so a declared type cannot lie."""

from __future__ import annotations

SIGNATURES: list[tuple[str, bytes, int]] = [
    ("image/png", b"\x89PNG\r\n\x1a\n", 0),
    ("image/jpeg", b"\xff\xd8\xff", 0),
    ("image/gif", b"GIF87a", 0),
    ("image/gif", b"GIF89a", 0),
    ("video/webm", b"\x1a\x45\xdf\xa3", 0),
    ("audio/ogg", b"OggS", 0),
    ("audio/flac", b"fLaC", 0),
    ("audio/mpeg", b"ID3", 0),
    ("video/mp4", b"ftyp", 4),
]

# Declared types we accept, and which sniffed family each must match.
ALLOWED_TYPES: dict[str, set[str]] = {
    "image/png": {"image/png"},
    "image/jpeg": {"image/jpeg"},
    "image/gif": {"image/gif"},
    "image/webp": {"image/webp"},
    "video/mp4": {"video/mp4"},
    "video/quicktime": {"video/mp4"},
    "video/webm": {"video/webm"},
    "video/x-matroska": {"video/webm"},
    "audio/mp4": {"video/mp4"},
    "audio/mpeg": {"audio/mpeg"},
    "audio/ogg": {"audio/ogg"},
    "video/ogg": {"audio/ogg"},
    "audio/flac": {"audio/flac"},
    "audio/wav": {"audio/wav"},
    "audio/x-wav": {"audio/wav"},
    "audio/webm": {"video/webm"},
}

HEAD_BYTES = 16


def sniff(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    # MPEG audio frames without an ID3 tag start with an 11-bit sync word.
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[:3] != b"\xff\xd8\xff":
        return "audio/mpeg"
    for media_type, magic, offset in SIGNATURES:
        if head[offset : offset + len(magic)] == magic:
            return media_type
    return None


def content_matches(declared: str, head: bytes) -> bool:
    families = ALLOWED_TYPES.get(declared)
    return families is not None and sniff(head) in families
