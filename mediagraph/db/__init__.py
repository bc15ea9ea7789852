"""PostgreSQL: tables, statements, pools, shard routing and migrations.

How code reaches PostgreSQL (the one rule; docs/architecture.md says the same):

1. SQL text lives here, in `db/`: statements as constants or functions of the domain's
   module (`db/views/store.py`, `db/comments/store.py`, …). Other layers call them, or
   build ORM queries from the models here; they never write SQL.
2. In a request (code that takes the `context`):
   - reads by key go through a loader (`dataloaders/`), and loaders read through the
     asyncpg read path (`databases.main_reads`, `db/reads.py`): prepared statements,
     merged across requests, rows built by `db/rows.py`, no ORM session;
   - the hot paths read and write through asyncpg (reads as above, writes on a pool
     of their own), with their statements in `db/` functions, building no ORM objects through a session and opening no
     session of the request's own:
       reads: every media list page (`mediaList` by NEWEST, VIEWS and LIKES, with or
       without tags, and a user's media; `db/views/pages.py`, `db/reads.py`), each row
       with its counts in the page's own statement (`COUNTED_MEDIA`), the uploaders of a
       page in one batched read, and `media(id:)` with its counts (`db/views/store.py`),
       built from its plain row (`HotRowsByIdLoader.records`);
       the pages of one list asked at about the same moment (one batch) share one statement
       (`NewestPages`, `LaterPages`); a page writes nothing to PostgreSQL (its
       pagination session lives in Redis);
       writes: `likeMedia`/`unlikeMedia` (`db/views/likes.py`) and `submitScore`
       (`db/leaderboards.py`), prepared statements on the write
       pool (`databases.main_writes`, `db/writes.py`; the requests of one event-loop
       step share one statement and one commit, `StepWrites`, likes and unlikes together; no
       transaction around it, never retried); `recordView` and `reportPlayback` write only to
       Redis on the request path (the view flush and the playback roll-up write to PostgreSQL
       in batches);
   - every other write, multi-statement transaction or locking read uses the
     operation's one session, `context.db.use()` (`db/operation.py`);
   - a request never opens a session of its own (`databases.main_session()`).
3. Code that takes `services` (workers, subscription events, stores shared by both)
   opens a short session per unit of work: `services.databases.main_session()`.
4. Comment shards are reached only through `db/shards/residency.py` (`on_logical_shard`,
   `on_physical_shard`, `read_shard`), which fences against moves and turns a shard
   that is down into SERVICE_UNAVAILABLE.
"""
