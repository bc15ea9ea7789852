"""Password hashing (argon2) and access tokens (JWT)."""

from __future__ import annotations

import time
from collections import OrderedDict
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


# Tokens verified lately, by (signing key, token): a client sends the same token with
# every request, and checking its signature and claims again costs more than many a
# request's own work. An entry holds what verification found and when the token expires,
# so an expired token is refused exactly as `jwt.decode` would refuse it. Revocation is
# not decided here: it lives in the user's row (`token_version`), which the checks that
# need it read on every request (`Context.require_viewer`, the like statement).
VERIFIED_TOKENS_MAX = 10_000
_verified: OrderedDict[tuple[str, str], tuple[TokenClaims, float]] = OrderedDict()


def read_token(settings: Settings, token: str) -> TokenClaims:
    key = (settings.secret_key, token)
    known = _verified.get(key)
    if known is not None:
        claims, expires_at = known
        if time.time() < expires_at:
            _verified.move_to_end(key)
            return claims
        del _verified[key]
        raise Unauthenticated("The access token has expired.")
    claims, expires_at = _verify(settings, token)
    _verified[key] = (claims, expires_at)
    if len(_verified) > VERIFIED_TOKENS_MAX:
        _verified.popitem(last=False)
    return claims


def _verify(settings: Settings, token: str) -> tuple[TokenClaims, float]:
    try:
        decoded = jwt.decode(token, settings.secret_key, algorithms=[ALGORITHM], options={"require": ["sub", "exp"]})
        claims = TokenClaims(int(decoded["sub"]), str(decoded.get("role", "user")), int(decoded.get("ver", 0)))
        return claims, float(decoded["exp"])
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
