"""Password hashing (argon2) and access tokens (JWT)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import jwt
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from mediagraph.errors import Unauthenticated
from mediagraph.settings import Settings

ALGORITHM = "HS256"
SERVICE_ROLE = "service"

_hasher = PasswordHasher()
# Verified against when the username is unknown, so both paths cost the same time.
_DUMMY_HASH = _hasher.hash("mediagraph-timing-equaliser")


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    try:
        return _hasher.verify(password_hash or _DUMMY_HASH, password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False


@dataclass(frozen=True)
class TokenClaims:
    user_id: int
    role: str
    token_version: int


def issue_token(settings: Settings, *, user_id: int, role: str, token_version: int) -> str:
    now = datetime.now(UTC)
    claims = {
        "sub": str(user_id),
        "role": role,
        "ver": token_version,
        "iat": now,
        "exp": now + timedelta(minutes=settings.access_token_minutes),
    }
    return jwt.encode(claims, settings.secret_key, algorithm=ALGORITHM)


def read_token(settings: Settings, token: str) -> TokenClaims:
    try:
        claims = jwt.decode(token, settings.secret_key, algorithms=[ALGORITHM], options={"require": ["sub", "exp"]})
        return TokenClaims(int(claims["sub"]), str(claims.get("role", "user")), int(claims.get("ver", 0)))
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("The access token has expired.") from None
    except (jwt.InvalidTokenError, ValueError, TypeError):
        raise Unauthenticated("The access token is invalid.") from None


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Use an `Authorization: Bearer <token>` header.")
    return token.strip()
