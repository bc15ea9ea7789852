"""Checks on what clients send, shared by every domain; each failure names the argument."""

from __future__ import annotations

import re
import unicodedata

from mediagraph.errors import BadUserInput

USERNAME = re.compile(r"^[a-z0-9_]{3,32}$")
TAG = re.compile(r"^\w[\w-]{0,31}$")
MAX_TAGS = 10
PASSWORD_MIN, PASSWORD_MAX = 8, 128


def _has_control_characters(value: str) -> bool:
    return any(unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co") for char in value)


def clean_text(value: str, *, argument: str, max_length: int, min_length: int = 1, multiline: bool = False) -> str:
    text = unicodedata.normalize("NFC", value).strip()
    allowed = text.replace("\n", "").replace("\t", "") if multiline else text
    if _has_control_characters(allowed):
        raise BadUserInput(f"`{argument}` contains control characters.", argument=argument)
    if not min_length <= len(text) <= max_length:
        raise BadUserInput(f"`{argument}` must be {min_length} to {max_length} characters long.", argument=argument)
    return text


def username(value: str) -> str:
    normalized = value.strip().lower()
    if not USERNAME.fullmatch(normalized):
        raise BadUserInput(
            "`username` must be 3 to 32 characters: letters, digits and underscores.",
            argument="username",
        )
    return normalized


def password(value: str) -> str:
    if not PASSWORD_MIN <= len(value) <= PASSWORD_MAX:
        raise BadUserInput(
            f"`password` must be {PASSWORD_MIN} to {PASSWORD_MAX} characters long.",
            argument="password",
        )
    return value


def nickname(value: str) -> str:
    return clean_text(value, argument="nickname", max_length=40)


def title(value: str) -> str:
    return clean_text(value, argument="title", max_length=200)


def description(value: str) -> str:
    return clean_text(value, argument="description", max_length=5000, min_length=0, multiline=True)


def tags(values: list[str], *, argument: str = "tags") -> list[str]:
    if len(values) > MAX_TAGS:
        raise BadUserInput(f"At most {MAX_TAGS} tags are allowed.", argument=argument)
    cleaned: list[str] = []
    for value in values:
        tag = unicodedata.normalize("NFKC", value).strip().casefold()
        if not TAG.fullmatch(tag):
            raise BadUserInput(
                f"Tag {value[:40]!r} must be 1 to 32 letters, digits, '_' or '-'.",
                argument=argument,
            )
        if tag not in cleaned:
            cleaned.append(tag)
    return cleaned


# Joiners are format characters, but emoji sequences and several scripts need them.
JOINERS = ("\u200c", "\u200d")


def post_text(value: str, *, max_length: int) -> str:
    """Post text, counted in characters (code points after NFC), never in bytes."""
    text = unicodedata.normalize("NFC", value.replace("\r\n", "\n")).strip()
    checked = text.replace("\n", "").replace("\t", "")
    for joiner in JOINERS:
        checked = checked.replace(joiner, "")
    if _has_control_characters(checked):
        raise BadUserInput("`text` contains control characters.", argument="text")
    if not checked.strip():
        raise BadUserInput("`text` must not be empty.", argument="text")
    if len(text) > max_length:
        raise BadUserInput(f"`text` must be at most {max_length} characters long; it has {len(text)}.", argument="text")
    return text
