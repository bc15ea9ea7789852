"""PostgreSQL: tables, statements, pools, shard routing and migrations.

How code reaches PostgreSQL (the one rule; docs/architecture.md says the same):

1. SQL text lives here, in `db/`: statements as constants or functions of the domain's
   module (`db/views/store.py`, `db/comments/store.py`, …). Other layers call them, or
   build ORM queries from the models here; they never write SQL.
2. In a request (code that takes the `context`):
   - reads by key go through a loader (`dataloaders/`), and loaders read through the
     asyncpg read path (`databases.main_reads`, `db/reads.py`): prepared statements,
     merged across requests, rows built by `db/rows.py`, no ORM session;
   - the hot paths read and write through the same asyncpg path, with their statements
     in `db/` functions: `media(id:)` and the newest-first media lists
     (`mediaList(sort: NEWEST)`, a user's media);
   - every other write, multi-statement transaction or locking read uses the
     operation's one session, `context.db.use()` (`db/operation.py`);
   - a request never opens a session of its own (`databases.main_session()`).
3. Code that takes `services` (workers, subscription events, stores shared by both)
   opens a short session per unit of work: `services.databases.main_session()`.
4. Comment shards are reached only through `db/shards/residency.py` (`on_logical_shard`,
   `on_physical_shard`, `read_shard`), which fences against moves and turns a shard
   that is down into SERVICE_UNAVAILABLE.
"""
