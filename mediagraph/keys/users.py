from __future__ import annotations

from mediagraph.keys import KeySpace


def login_attempts_by_username(keys: KeySpace, username: str) -> str:
    return keys.key("login", "user", f"{{{username}}}")


def login_attempts_by_address(keys: KeySpace, address: str) -> str:
    return keys.key("login", "addr", f"{{{address}}}")
