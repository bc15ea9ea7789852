"""What `bench http` asks each server: the same reads, written in each server's own GraphQL dialect.

mediagraph and its peers (PostGraphile 4 and 5) serve the same rows; a `Dialect`
names a server's fields (`mediaList(sort: VIEWS)` against `allMedia(orderBy:
[VIEW_COUNT_DESC, ID_DESC])`, and so on), and each read workload is written once,
over a dialect. Writes are mediagraph's alone (see `http_writes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from benchmarks import http_writes

PAGE_SIZE = 20
# The tag-filtered page: media carrying this tag (about one in seven), most viewed first.
PAGE_TAG = "cats"


class Listing(Enum):
    """An ordered list of media a client pages through."""

    VIEWS = "views"
    LIKES = "likes"
    NEWEST = "newest"
    TAGGED = "tagged"


@dataclass(frozen=True)
class Dialect:
    """How one server spells the fields the workloads use."""

    lists: dict[Listing, str]  # the list field with its arguments, using $first and $after
    cursor_type: str
    by_id: str  # the by-id field, using $id
    id_type: str
    global_ids: bool  # whether ids are Relay global ids (else the row's id, as a string)
    uploader: str  # the uploader's field on a media item

    def list_field(self, listing: Listing) -> str:
        """The field's name in the response."""
        return self.lists[listing].split("(")[0]

    def walk_document(self, listing: Listing) -> str:
        """Just the page info of a page: what the benchmark reads to collect a session's cursors."""
        return (
            f"query($first: Int, $after: {self.cursor_type}) "
            f"{{ {self.lists[listing]} {{ pageInfo {{ hasNextPage endCursor }} }} }}"
        )


MEDIAGRAPH = Dialect(
    lists={
        Listing.VIEWS: "mediaList(sort: VIEWS, first: $first, after: $after)",
        Listing.LIKES: "mediaList(sort: LIKES, first: $first, after: $after)",
        Listing.NEWEST: "mediaList(first: $first, after: $after)",
        Listing.TAGGED: f'mediaList(tags: ["{PAGE_TAG}"], sort: VIEWS, first: $first, after: $after)',
    },
    cursor_type="String",
    by_id="media(id: $id)",
    id_type="ID!",
    global_ids=True,
    uploader="uploader",
)

# PostGraphile 4 with the connection filter plugin (for array containment).
POSTGRAPHILE = Dialect(
    lists={
        Listing.VIEWS: "allMedia(first: $first, after: $after, orderBy: [VIEW_COUNT_DESC, ID_DESC])",
        Listing.LIKES: "allMedia(first: $first, after: $after, orderBy: [LIKE_COUNT_DESC, ID_DESC])",
        Listing.NEWEST: "allMedia(first: $first, after: $after, orderBy: [ID_DESC])",
        Listing.TAGGED: (
            f'allMedia(first: $first, after: $after, filter: {{tags: {{contains: ["{PAGE_TAG}"]}}}}, '
            "orderBy: [VIEW_COUNT_DESC, ID_DESC])"
        ),
    },
    cursor_type="Cursor",
    by_id="mediaById(id: $id)",
    id_type="BigInt!",
    global_ids=False,
    uploader="userByOwnerId",
)

# PostGraphile 5's amber preset: `id` is the Relay id, the column is `rowId`.
POSTGRAPHILE5 = Dialect(
    lists={
        Listing.VIEWS: "allMedia(first: $first, after: $after, orderBy: [VIEW_COUNT_DESC, ROW_ID_DESC])",
        Listing.LIKES: "allMedia(first: $first, after: $after, orderBy: [LIKE_COUNT_DESC, ROW_ID_DESC])",
        Listing.NEWEST: "allMedia(first: $first, after: $after, orderBy: [ROW_ID_DESC])",
        Listing.TAGGED: (
            f'allMedia(first: $first, after: $after, filter: {{tags: {{contains: ["{PAGE_TAG}"]}}}}, '
            "orderBy: [VIEW_COUNT_DESC, ROW_ID_DESC])"
        ),
    },
    cursor_type="Cursor",
    by_id="mediaByRowId(rowId: $id)",
    id_type="BigInt!",
    global_ids=False,
    uploader="userByOwnerId",
)

# Both sides return the same columns; mediagraph's counts are live (unflushed views
# included, likes exact), the peers' are the columns.
ITEM_FIELDS = "id title tags createdAt viewCount likeCount"
BY_ID_FIELDS = "id title description tags contentType createdAt"


@dataclass(frozen=True)
class Workload:
    key: str  # what `--only` takes
    name: str  # what the tables show
    listing: Listing | None = None  # paged workloads: the list they page through
    with_uploader: bool = False
    write: bool = False  # mediagraph alone, measured against its own by-id read
    beside: str | None = None  # a by-id read measured next to this write (its key): the write's yardstick

    def document(self, dialect: Dialect) -> str:
        if self.write:
            raise ValueError(f"{self.key} is a write: its requests are built by its Lua script")
        if self.listing is None:
            return f"query($id: {dialect.id_type}) {{ {dialect.by_id} {{ {BY_ID_FIELDS} }} }}"
        if self.with_uploader:
            node = f"id title viewCount likeCount {dialect.uploader} {{ id username nickname }}"
            edge = f"node {{ {node} }}"
        else:
            edge = f"cursor node {{ {ITEM_FIELDS} }}"
        return (
            f"query($first: Int, $after: {dialect.cursor_type}) {{ {dialect.lists[self.listing]} "
            f"{{ edges {{ {edge} }} pageInfo {{ hasNextPage endCursor }} }} }}"
        )


BY_ID = Workload("by-id", "media by id")
READS = (
    BY_ID,
    Workload("views-page", f"{PAGE_SIZE}-item page by view count", Listing.VIEWS),
    Workload("uploader-page", f"{PAGE_SIZE} media with uploader and counts", Listing.VIEWS, with_uploader=True),
    Workload("likes-page", f"{PAGE_SIZE}-item page by likes", Listing.LIKES),
    Workload("newest-page", f"{PAGE_SIZE}-item newest page", Listing.NEWEST),
    Workload("tag-page", f"{PAGE_SIZE}-item page by views, one tag", Listing.TAGGED),
)
WRITES = (
    Workload(http_writes.RECORD_VIEW_KEY, "recordView", write=True),
    Workload(http_writes.LIKE_KEY, "likeMedia / unlikeMedia", write=True),
    Workload(http_writes.REPORT_PLAYBACK_KEY, "reportPlayback", write=True),
    Workload(http_writes.SUBMIT_SCORE_KEY, "submitScore (service token)", write=True),
)
WORKLOADS = READS + WRITES
KEYS = tuple(workload.key for workload in WORKLOADS)


def select(only: list[str] | None) -> tuple[Workload, ...]:
    """The workloads `--only` names, in the table's order; a write brings the by-id read it is compared to."""
    if not only:
        return WORKLOADS
    unknown = sorted(set(only) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(KEYS)}")
    wanted = set(only)
    if any(workload.write and workload.key in wanted for workload in WORKLOADS):
        wanted.add(BY_ID.key)
    return tuple(workload for workload in WORKLOADS if workload.key in wanted)
