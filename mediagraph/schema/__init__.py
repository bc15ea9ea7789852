"""The public schema's types: each domain's queries, mutations and subscriptions merged into one.

The executable schema (error codes, the document cache) is built from them in `serving/schema.py`.
"""

from __future__ import annotations

from typing import Any

from strawberry.tools import merge_types

from mediagraph.schema.comments import Comment, CommentMutations, CommentPage, CommentSubscriptions
from mediagraph.schema.feeds import FeedMutations, FeedQueries, FeedSubscriptions, Post
from mediagraph.schema.hot import HotMediaDay, HotQueries, HotSubscriptions
from mediagraph.schema.leaderboards import (
    Leaderboard,
    LeaderboardDefinition,
    LeaderboardEntry,
    LeaderboardMutations,
    LeaderboardQueries,
)
from mediagraph.schema.leaderboards.live import LeaderboardSubscriptions
from mediagraph.schema.media import Media, MediaMutations, MediaQueries, MediaSubscriptions
from mediagraph.schema.node import NodeQueries
from mediagraph.schema.playback import (
    LiveChannelViewers,
    LiveViewers,
    Play,
    PlaybackMutations,
    PlaybackQueries,
    PlaybackStats,
    PlaybackSubscriptions,
)
from mediagraph.schema.users import User, UserMutations, UserQueries
from mediagraph.schema.views import ViewsMutations, ViewsSubscriptions

Query = merge_types(
    "Query",
    (NodeQueries, UserQueries, MediaQueries, FeedQueries, LeaderboardQueries, HotQueries, PlaybackQueries),
)
Mutation = merge_types(
    "Mutation",
    (
        UserMutations,
        MediaMutations,
        ViewsMutations,
        CommentMutations,
        FeedMutations,
        LeaderboardMutations,
        PlaybackMutations,
    ),
)
Subscription = merge_types(
    "Subscription",
    (
        MediaSubscriptions,
        ViewsSubscriptions,
        CommentSubscriptions,
        FeedSubscriptions,
        LeaderboardSubscriptions,
        PlaybackSubscriptions,
        HotSubscriptions,
    ),
)

NODE_TYPES: list[Any] = [
    User,
    Media,
    Comment,
    CommentPage,
    Post,
    LeaderboardDefinition,
    Leaderboard,
    LeaderboardEntry,
    LiveViewers,
    LiveChannelViewers,
    HotMediaDay,
    PlaybackStats,
    Play,
]
