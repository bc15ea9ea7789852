"""View counts, likes, sort generations and the sessions of view- and like-sorted lists.

Revision ID: 0002_views
Revises: 0001_foundation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_views"
down_revision = "0001_foundation"
branch_labels = ("views",)
depends_on = None

# A media inserted while generation g is current is stamped g + 1. FOR SHARE keeps the
# sync (which takes the row FOR UPDATE) from committing g + 1 until the insert commits,
# so a page that saw generation g without this media finds it among the changes after g.
STAMP_INSERT = """
CREATE FUNCTION media_stamp_sort_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT generation + 1 INTO NEW.sort_generation FROM media_sort_generation WHERE id = 1 FOR SHARE;
    RETURN NEW;
END
$$
"""

# New tags can move a media into a tag-filtered list: queue it so the next sync stamps it.
# (Not stamped here: the updating transaction already holds the media row, and taking the
# generation row after it would deadlock with a sync that holds them the other way round.)
QUEUE_RETAGGED = """
CREATE FUNCTION media_queue_retagged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO media_count_changes (media_id) VALUES (NEW.id);
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.add_column("media", sa.Column("like_count", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("media", sa.Column("sort_generation", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_index("ix_media_like_count_id", "media", ["like_count", "id"])
    op.create_index("ix_media_sort_generation", "media", ["sort_generation"])

    op.create_table(
        "media_view_count",
        sa.Column("media_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("view_count", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["media_id"], ["media.id"], name="fk_media_view_count_media_id_media", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("media_id", name="pk_media_view_count"),
    )
    op.create_table(
        "media_view_batches",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_media_view_batches"),
    )
    op.create_index("ix_media_view_batches_applied_at", "media_view_batches", ["applied_at"])
    op.create_table(
        "media_likes",
        sa.Column("media_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("user_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["media_id"], ["media.id"], name="fk_media_likes_media_id_media", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_media_likes_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("media_id", "user_id", name="pk_media_likes"),
    )
    op.create_index("ix_media_likes_user_id_media_id", "media_likes", ["user_id", "media_id"])
    op.create_table(
        "media_like_count",
        sa.Column("media_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("like_count", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["media_id"], ["media.id"], name="fk_media_like_count_media_id_media", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("media_id", name="pk_media_like_count"),
    )
    op.create_table(
        "media_count_changes",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("media_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_media_count_changes"),
    )
    op.create_table(
        "media_sort_generation",
        sa.Column("id", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_media_sort_generation"),
    )
    op.create_table(
        "media_page_sessions",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("sort", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_media_page_sessions"),
    )
    op.create_index("ix_media_page_sessions_last_used_at", "media_page_sessions", ["last_used_at"])
    op.create_table(
        "media_page_session_items",
        sa.Column("session_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("media_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["media_page_sessions.id"],
            name="fk_media_page_session_items_session_id_media_page_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "media_id", name="pk_media_page_session_items"),
    )
    op.create_index("ix_media_page_session_items_session_id_seq", "media_page_session_items", ["session_id", "seq"])

    op.execute("INSERT INTO media_sort_generation (id, generation) VALUES (1, 0)")
    # Counts users already see keep their value: the durable table starts from the sort column.
    op.execute("INSERT INTO media_view_count (media_id, view_count) SELECT id, view_count FROM media")
    op.execute(STAMP_INSERT)
    op.execute(
        "CREATE TRIGGER media_stamp_sort_generation BEFORE INSERT ON media "
        "FOR EACH ROW EXECUTE FUNCTION media_stamp_sort_generation()"
    )
    op.execute(QUEUE_RETAGGED)
    op.execute(
        "CREATE TRIGGER media_queue_retagged AFTER UPDATE OF tags ON media "
        "FOR EACH ROW WHEN (OLD.tags IS DISTINCT FROM NEW.tags) EXECUTE FUNCTION media_queue_retagged()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER media_queue_retagged ON media")
    op.execute("DROP FUNCTION media_queue_retagged()")
    op.execute("DROP TRIGGER media_stamp_sort_generation ON media")
    op.execute("DROP FUNCTION media_stamp_sort_generation()")
    op.drop_table("media_page_session_items")
    op.drop_table("media_page_sessions")
    op.drop_table("media_sort_generation")
    op.drop_table("media_count_changes")
    op.drop_table("media_like_count")
    op.drop_table("media_likes")
    op.drop_table("media_view_batches")
    op.drop_table("media_view_count")
    op.drop_index("ix_media_sort_generation", table_name="media")
    op.drop_index("ix_media_like_count_id", table_name="media")
    op.drop_column("media", "sort_generation")
    op.drop_column("media", "like_count")
