"""The Redis side of playback statistics: the scripts that own the invariants of its keys.

Invariants:
- A session counts at most once in the all-time total and at most once in any bucket:
  its record holds the last minute, hour and day it counted in, and a heartbeat counts
  only in buckets later than those (the seed's MODIFY rule, made safe against heartbeats
  arriving out of order or twice). The check and the increments are one script.
- Every counter hash carries the generation (`id`) it was created with. Within one
  generation its values only grow, so copying them into PostgreSQL with GREATEST is
  idempotent; a counter Redis lost and recreated gets a new generation and a new row.
- A counter changed since the roll-up last copied it is named in its channel's dirty set
  until a roll-up has copied exactly its current values, and the channel is in one of the
  roll-up's indexes: the index of channels due at once, by a heartbeat that may start a play
  (a play is listed once copied), or the index of growth, scored with when it falls due,
  `playback_rollup_delay_seconds` after a heartbeat that only grows what is there.
- A session's play (start, last played-at, watched ms) only grows too, and is named in
  the same dirty set (`p:<session id>`) until a roll-up has copied its current values.
- Watched ms: the gap since the session's previous heartbeat (by played-at), capped at
  `WATCH_GAP_CAP_MS` so a paused or stalled player adds at most that, counted in the
  buckets of the heartbeat's played-at; a heartbeat older than the latest adds nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from mediagraph.keys import KeySpace
from mediagraph.keys.playback import (
    GRANULARITIES,
    Counter,
    Entity,
    Granularity,
    bucket_index,
    channel_prefix,
    churn_key,
    counter_key,
    counter_key_in,
    counter_token,
    dirty_index_key,
    dirty_key,
    grown_index_key,
    live_channel,
    live_key,
    live_key_in,
    retention_of,
    session_claim_key,
    session_key,
    stats_channel,
)
from mediagraph.keys.playback.lua import (
    CLAIM,
    FORGET_COPIED,
    FORGET_PLAYS,
    HEARTBEAT,
    LEAVE_DUE,
    READ_COPIES,
    SWEEP,
)
from mediagraph.lua import HEAVY, Lua, run_batched, run_pipeline

# The longest gap between two heartbeats of a session that counts as watched.
WATCH_GAP_CAP_MS = 10_000
PLAY_TOKEN_PREFIX = "p:"
SWEEP_SCRIPT = Lua(SWEEP)
CLAIM_SCRIPT = Lua(CLAIM)
HEARTBEAT_SCRIPT = Lua(HEARTBEAT)
FORGET_COPIED_SCRIPT = Lua(FORGET_COPIED)
READ_COPIES_SCRIPT = Lua(READ_COPIES)
FORGET_PLAYS_SCRIPT = Lua(FORGET_PLAYS)
LEAVE_DUE_SCRIPT = Lua(LEAVE_DUE)


@dataclass(frozen=True)
class LiveCount:
    viewers: int
    changed: bool
    version: int


@dataclass(frozen=True)
class HeartbeatResult:
    # Which of total, minute, hour, day this heartbeat added one to.
    counted: tuple[bool, bool, bool, bool]
    stream: LiveCount
    channel: LiveCount
    # Whether the script published the live and stats notices itself (not on a cluster).
    published: bool = False


class SessionConflict(Exception):
    pass


class SessionChurnLimited(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(retry_after)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Heartbeat:
    session_id: str
    stream: Entity
    address: str
    played_ms: int
    now_ms: int
    generation: int
    viewer_id: int | None = None


@dataclass(frozen=True)
class CounterValue:
    counter: Counter
    generation: int
    plays: int
    peak: int
    watch_ms: int = 0
    unique_viewers: int = 0


@dataclass(frozen=True)
class PlayValue:
    """A session's play as Redis holds it."""

    session_id: str
    media_id: int
    channel_id: int
    viewer_id: int | None
    started_ms: int
    last_ms: int
    watch_ms: int


# A counter's fields as read (None where the key is gone), to compare when forgetting it.
RawCounter = tuple[bytes | None, bytes | None, bytes | None, bytes | None, bytes | None]
# A session record's play fields as read: media, st, lp, w, vw.
RawPlay = tuple[bytes | None, bytes | None, bytes | None, bytes | None, bytes | None]


class PlaybackScripts:
    """Cheap to make (the scripts' hashes are computed once, below), so made where needed."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    async def claimed_channel(self, session_id: str, media_id: int, ttl_seconds: int) -> int | None:
        """The channel of the media a bound session plays (renewing the binding), or None
        when the session is new: only a session's first heartbeat needs the media looked up."""
        reply = await self._claim_script(session_id, media_id, ttl_seconds, "")
        return None if reply is None else reply[0]

    async def claim(self, session_id: str, media_id: int, ttl_seconds: int, *, channel_id: int) -> tuple[int, bool]:
        """Bind a session id to its media across all channels (or renew its binding): the channel
        it is bound with, and whether this call bound it."""
        reply = await self._claim_script(session_id, media_id, ttl_seconds, channel_id)
        if reply is None:
            raise AssertionError("a claim with a channel always binds or conflicts")
        return reply

    @property
    def claims_in_script(self) -> bool:
        """Whether the heartbeat script may claim the session itself: on one Redis, where a
        script may touch the claim's slot as well as the channel's."""
        return not self.keys.sharded_pubsub

    async def release(self, session_id: str) -> None:
        await self.redis.delete(session_claim_key(self.keys, session_id))

    async def _claim_script(
        self, session_id: str, media_id: int, ttl_seconds: int, channel: int | str
    ) -> tuple[int, bool] | None:
        reply = await CLAIM_SCRIPT.run_batched(
            self.redis, [session_claim_key(self.keys, session_id)], [media_id, ttl_seconds, channel]
        )
        if reply[0] == 0:
            raise SessionConflict()
        return (int(reply[1]), reply[0] == 3) if reply[0] in (1, 3) else None

    async def heartbeat(
        self,
        beat: Heartbeat,
        *,
        live_window_ms: int,
        session_ttl_seconds: int,
        churn_limit: int,
        churn_window_seconds: int = 60,
        renew_claim: bool = False,
        claim: bool = False,
        maybe_new: bool = True,
        growth_delay_ms: int = 0,
    ) -> HeartbeatResult:
        """Count a heartbeat, and publish its live and stats notices in the same script (except on a
        cluster: `HeartbeatResult.published`).

        `claim` (one Redis only, `claims_in_script`): the script claims the session for this
        media first, as `claim` does, and counts nothing on a conflict; a session refused for
        churn keeps no claim. `renew_claim` (a cluster, where the claim lives in another slot):
        the caller knows the session is bound to this media (it saw it bound), so the claim is
        renewed in the same round trip instead of before it; should the binding have changed
        meanwhile, SessionConflict is raised after all.

        The heartbeat names its channel for the roll-up: as due at once when it may start a
        play (`maybe_new`: the caller has not seen the session) or with no delay, otherwise,
        unless already named, as growth due `growth_delay_ms` later. On one Redis the script
        names it, and names a play it found new due at once; on a cluster (the indexes live in
        another slot) the same round trip does, and a play found new after all is named due
        at once in a second one."""
        stream = beat.stream
        minute = _minute_of(self.keys, stream, beat.played_ms)
        keys = [
            session_key(self.keys, stream.channel, beat.session_id),
            churn_key(self.keys, stream.channel, beat.address),
            *minute.keys,
        ]
        args: list[str | int] = [
            beat.session_id,
            stream.id,
            *minute.indexes,
            beat.now_ms,
            live_window_ms,
            beat.generation,
            session_ttl_seconds,
            churn_limit,
            churn_window_seconds,
            *minute.counters,
            beat.played_ms,
            "" if beat.viewer_id is None else beat.viewer_id,
            WATCH_GAP_CAP_MS,
            *minute.channels,
        ]
        publish = not self.keys.sharded_pubsub
        if claim:
            keys.append(session_claim_key(self.keys, beat.session_id))
            args.append(stream.channel)
        else:
            args.append("")
        renewal = (beat.session_id, stream.id, session_ttl_seconds, stream.channel) if renew_claim else None
        due_now = maybe_new or not growth_delay_ms
        if minute.rollup_keys:
            keys += minute.rollup_keys
            args += [stream.channel, 1 if due_now else 0, beat.now_ms + growth_delay_ms]
        else:
            args.append("")
        claimed, reply = await self._heartbeat_and_index(
            keys, args, stream.channel, beat.now_ms, renewal, due_now=due_now, growth_delay_ms=growth_delay_ms
        )
        if claimed is not None and claimed[0] == 0:
            raise SessionConflict()
        status = reply[0].decode()
        if status == "conflict":
            raise SessionConflict()
        if status == "limited":
            raise SessionChurnLimited(max(int(reply[1]), 1))
        flags = tuple(bool(flag) for flag in reply[1:5])
        if flags[0] and not minute.rollup_keys:
            # On a cluster, where the naming may have landed before the script on another node
            # (or named the channel as growth): named due at once again, now that the play is in
            # its dirty set (a later score: a visit that read the index in between keeps it due).
            await self.redis.zadd(dirty_index_key(self.keys), {str(stream.channel): beat.now_ms + 1}, gt=True)
        return HeartbeatResult(
            counted=(flags[0], flags[1], flags[2], flags[3]),
            stream=LiveCount(int(reply[5]), bool(reply[6]), int(reply[7])),
            channel=LiveCount(int(reply[8]), bool(reply[9]), int(reply[10])),
            published=publish,
        )

    async def _heartbeat_and_index(
        self,
        keys: list[str],
        args: list[str | int],
        channel_id: int,
        now_ms: int,
        claim: tuple[str, int, int, int] | None,
        *,
        due_now: bool,
        growth_delay_ms: int,
    ) -> tuple[Any, Any]:
        """(the claim's reply or None, the heartbeat's reply), in one round trip, the channel
        named for the roll-up as `heartbeat` says."""

        def build(pipe: Pipeline) -> None:
            if claim is not None:
                session_id, media_id, ttl_seconds, channel = claim
                CLAIM_SCRIPT.queue(pipe, [session_claim_key(self.keys, session_id)], [media_id, ttl_seconds, channel])
            HEARTBEAT_SCRIPT.queue(pipe, keys, args)
            # Outside the script on a cluster (another slot): the roll-up's indexes of channels to
            # visit. Due at once: scored with the latest naming, so a visit can tell it was named
            # again since it read the index. Growth: scored with when it falls due, kept if named.
            if not self.keys.sharded_pubsub:
                return
            if due_now:
                pipe.zadd(dirty_index_key(self.keys), {str(channel_id): now_ms}, gt=True)
            else:
                pipe.zadd(grown_index_key(self.keys), {str(channel_id): now_ms + growth_delay_ms}, nx=True)

        # Run again whole if Redis lost the scripts: claiming and a heartbeat's counting are
        # both idempotent, so a part that ran the first time changes nothing the second.
        replies = await run_batched(self.redis, [CLAIM_SCRIPT, HEARTBEAT_SCRIPT], build, lane=HEAVY)
        if claim is not None:
            return replies[0], replies[1]
        return None, replies[0]

    async def leave_due(self, read: Mapping[int, float]) -> None:
        """Take visited channels (with their scores as read) off the index of channels due,
        except those a heartbeat named again since."""
        if read:
            flat = [value for channel_id, score in read.items() for value in (channel_id, repr(score))]
            await LEAVE_DUE_SCRIPT.run(self.redis, [dirty_index_key(self.keys)], flat)

    async def sweep(self, entities: Sequence[Entity], *, now_ms: int, live_window_ms: int) -> list[LiveCount | None]:
        """Drop expired sessions from each entity's live set; the new count where it changed."""

        def build(pipe: Pipeline) -> None:
            for entity in entities:
                keys = [live_key(self.keys, entity), counter_key(self.keys, Counter(entity))]
                SWEEP_SCRIPT.queue(pipe, keys, [now_ms, live_window_ms])

        replies = await run_pipeline(self.redis, [SWEEP_SCRIPT], build)
        return [None if not reply else LiveCount(int(reply[0]), True, int(reply[1])) for reply in replies]

    async def read_raw(self, counters: Sequence[Counter]) -> list[RawCounter]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for counter in counters:
                pipe.hmget(counter_key(self.keys, counter), "id", "n", "peak", "w", "u")
            return [tuple(reply) for reply in await pipe.execute()]

    async def read(self, counters: Sequence[Counter]) -> list[CounterValue | None]:
        return [value_of(counter, raw) for counter, raw in zip(counters, await self.read_raw(counters), strict=True)]

    async def read_copies(
        self, counters: Mapping[int, Sequence[str]], plays: Mapping[int, Sequence[str]], *, per_script: int
    ) -> tuple[dict[int, list[RawCounter]], dict[int, list[RawPlay]]]:
        """What a roll-up copies of many channels, in one round trip and one reply per channel
        (per `per_script` entries): by channel, its counters' raw values (counters named by
        token) and its sessions' plays, each in the order asked."""
        calls: list[tuple[int, int, int]] = []  # (channel, counters in the call, plays in the call)

        def build(pipe: Pipeline) -> None:
            calls.clear()  # built again when Redis had lost the script
            for channel_id in dict.fromkeys([*counters, *plays]):
                prefix = channel_prefix(self.keys, channel_id)
                names = [counter_key_in(prefix, token) for token in counters.get(channel_id, ())]
                names += [session_key(self.keys, channel_id, session) for session in plays.get(channel_id, ())]
                counted = len(counters.get(channel_id, ()))
                for start in range(0, len(names), per_script):
                    chunk = names[start : start + per_script]
                    in_chunk = max(0, min(counted - start, len(chunk)))
                    READ_COPIES_SCRIPT.queue(pipe, chunk, [in_chunk])
                    calls.append((channel_id, in_chunk, len(chunk) - in_chunk))

        replies = await run_pipeline(self.redis, [READ_COPIES_SCRIPT], build)
        counter_values: dict[int, list[RawCounter]] = {}
        play_values: dict[int, list[RawPlay]] = {}
        for (channel_id, in_counters, in_plays), reply in zip(calls, replies, strict=True):
            if in_counters:
                counter_values.setdefault(channel_id, []).extend(tuple(raw) for raw in reply[:in_counters])
            if in_plays:
                play_values.setdefault(channel_id, []).extend(tuple(raw) for raw in reply[in_counters:])
        return counter_values, play_values

    async def forget_all_copied(
        self,
        counters: Mapping[int, Sequence[tuple[str, RawCounter]]],
        plays: Mapping[int, Sequence[tuple[str, RawPlay]]],
        *,
        per_script: int,
    ) -> dict[int, int]:
        """Remove copied counters (by token) and plays (by session) from their channels' dirty
        sets unless they changed since, for many channels in one round trip, at most
        `per_script` entries a script; by channel, how many of its dirty entries remain."""
        channels = list(dict.fromkeys([*counters, *plays]))
        last_reply_of: dict[int, int] = {}

        def build(pipe: Pipeline) -> None:
            queued = 0
            for channel_id in channels:
                copied = counters.get(channel_id, ())
                for start in range(0, max(len(copied), 1), per_script):
                    keys, args = self._forget_copied_call(channel_id, copied[start : start + per_script])
                    FORGET_COPIED_SCRIPT.queue(pipe, keys, args)
                    queued += 1
                copied_plays = plays.get(channel_id, ())
                for start in range(0, len(copied_plays), per_script):
                    keys, args = self._forget_plays_call(channel_id, copied_plays[start : start + per_script])
                    FORGET_PLAYS_SCRIPT.queue(pipe, keys, args)
                    queued += 1
                last_reply_of[channel_id] = queued - 1

        replies = await run_pipeline(self.redis, [FORGET_COPIED_SCRIPT, FORGET_PLAYS_SCRIPT], build)
        return {channel_id: int(replies[at]) for channel_id, at in last_reply_of.items()}

    def _forget_copied_call(
        self, channel_id: int, copied: Sequence[tuple[str, RawCounter]]
    ) -> tuple[list[str], list[bytes | str]]:
        prefix = channel_prefix(self.keys, channel_id)
        keys = [dirty_key(self.keys, channel_id)]
        args: list[bytes | str] = []
        for token, raw in copied:
            keys.append(counter_key_in(prefix, token))
            args += [token, *(field or b"" for field in raw)]
        return keys, args

    def _forget_plays_call(
        self, channel_id: int, copied: Sequence[tuple[str, RawPlay]]
    ) -> tuple[list[str], list[bytes | str]]:
        keys = [
            dirty_key(self.keys, channel_id),
            *(session_key(self.keys, channel_id, session) for session, _ in copied),
        ]
        args: list[bytes | str] = []
        for session, raw in copied:
            args += [PLAY_TOKEN_PREFIX + session, raw[2] or b"", raw[3] or b""]
        return keys, args

    async def read_plays(self, channel_id: int, session_ids: Sequence[str]) -> list[RawPlay]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for session_id in session_ids:
                pipe.hmget(session_key(self.keys, channel_id, session_id), "media", "st", "lp", "w", "vw")
            return [tuple(reply) for reply in await pipe.execute()]


class _StreamMinute(NamedTuple):
    """What every heartbeat of one stream in one minute passes the script alike."""

    # The dirty set, then per entity (stream, channel): total, live set, minute, hour, day.
    keys: tuple[str, ...]
    # The minute, hour and day indexes.
    indexes: tuple[int, int, int]
    # Per entity: each counter's token and retention.
    counters: tuple[str | int, ...]
    # The live and stats channels the script publishes to ('' where the caller publishes).
    channels: tuple[str, ...]
    # The roll-up's indexes of channels due and of growth, when the script names the channel
    # there itself (one Redis); empty on a cluster, where they live in another slot.
    rollup_keys: tuple[str, ...]


# A stream's minute, built once: a session heartbeats every 5 s, so each stream's minute is
# asked about a dozen times per viewer, and building it costs more than a heartbeat's other
# arguments together. Bounded; the oldest minutes go first.
MINUTES_KEPT = 50_000
# Oldest first: an OrderedDict drops its first entry in constant time, where a dict's first
# entry is found by skipping every slot deleted before it (12 us an entry at 50,000).
_minutes: OrderedDict[tuple[str, bool, int, int, int], _StreamMinute] = OrderedDict()


def _minute_of(keys: KeySpace, stream: Entity, played_ms: int) -> _StreamMinute:
    minute = bucket_index(played_ms, Granularity.MINUTE)
    cache_key = (keys.prefix, keys.sharded_pubsub, stream.id, stream.channel, minute)
    known = _minutes.get(cache_key)
    if known is None:
        known = _minutes[cache_key] = _build_minute(keys, stream, played_ms)
        while len(_minutes) > MINUTES_KEPT:
            _minutes.popitem(last=False)
    return known


def _build_minute(keys: KeySpace, stream: Entity, played_ms: int) -> _StreamMinute:
    # Every heartbeat names ten counters: built from their channel's key prefix and tokens
    # directly, without a Counter each (that cost more than packing the command).
    channel = Entity.of_channel(stream.channel)
    prefix = channel_prefix(keys, stream.channel)
    indexes = (
        bucket_index(played_ms, Granularity.MINUTE),
        bucket_index(played_ms, Granularity.HOUR),
        bucket_index(played_ms, Granularity.DAY),
    )
    names = [dirty_key(keys, stream.channel)]
    counters: list[str | int] = []
    for short in (stream.short, channel.short):
        total = counter_token(short, None, 0)
        names += [counter_key_in(prefix, total), live_key_in(prefix, short)]
        counters += [total, retention_of(None)]
        for granularity, index in zip(GRANULARITIES, indexes, strict=True):
            token = counter_token(short, granularity, index)
            names.append(counter_key_in(prefix, token))
            counters += [token, retention_of(granularity)]
    if keys.sharded_pubsub:
        channels: tuple[str, ...] = ("", "", "", "")
        rollup_keys: tuple[str, ...] = ()
    else:
        channels = (
            live_channel(keys, stream),
            live_channel(keys, channel),
            stats_channel(keys, stream),
            stats_channel(keys, channel),
        )
        rollup_keys = (dirty_index_key(keys), grown_index_key(keys))
    return _StreamMinute(tuple(names), indexes, tuple(counters), channels, rollup_keys)


def value_of(counter: Counter, raw: RawCounter) -> CounterValue | None:
    generation, plays, peak, watch_ms, unique_viewers = raw
    if generation is None:
        return None
    return CounterValue(
        counter, int(generation), int(plays or 0), int(peak or 0), int(watch_ms or 0), int(unique_viewers or 0)
    )


def play_of(channel_id: int, session_id: str, raw: RawPlay) -> PlayValue | None:
    media, started, last, watch_ms, viewer = raw
    if media is None or started is None or last is None:
        return None
    return PlayValue(
        session_id=session_id,
        media_id=int(media),
        channel_id=channel_id,
        viewer_id=int(viewer) if viewer else None,
        started_ms=int(started),
        last_ms=int(last),
        watch_ms=int(watch_ms or 0),
    )
