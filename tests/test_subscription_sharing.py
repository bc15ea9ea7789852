"""Identical state subscriptions share one execution per process (subscriptions/sharing.py).

The app runs under a real uvicorn in this process, so the tests can count how many
times the resolver ran while real graphql-transport-ws clients subscribe over sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import uvicorn

from mediagraph.resolvers import views as view_resolvers
from mediagraph.serving.sharing import COMPLETE, Ending, Subscriber
from tests.support.factories import create_media, create_user, record_views
from tests.support.graphql import WebSocketClient
from tests.support.servers import free_port

VIEW_COUNT = "subscription($id: ID!) { viewCount(mediaId: $id) { mediaId viewCount } }"
# The same subscription, but through a fragment, which keeps it out of sharing.
VIEW_COUNT_ALONE = "subscription($id: ID!) { ...Count } fragment Count on Subscription { viewCount(mediaId: $id) { mediaId viewCount } }"


@pytest.fixture(scope="module")
async def server(app) -> AsyncIterator[str]:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    runner = uvicorn.Server(config)
    task = asyncio.create_task(runner.serve())
    while not runner.started:
        assert not task.done(), "uvicorn exited"
        await asyncio.sleep(0.05)
    yield f"ws://127.0.0.1:{port}/graphql"
    runner.should_exit = True
    await task


@pytest.fixture
def resolver_runs(monkeypatch) -> list[int]:
    """Media ids `viewCount` subscriptions were executed for, one entry per execution."""
    runs: list[int] = []
    original = view_resolvers.view_count_updates

    def counted(context, *, media_id):  # type: ignore[no-untyped-def]
        runs.append(media_id)
        return original(context, media_id=media_id)

    monkeypatch.setattr(view_resolvers, "view_count_updates", counted)
    return runs


async def subscribe(url: str, media_id: str, query: str = VIEW_COUNT) -> tuple[WebSocketClient, str]:
    client = await WebSocketClient.connect(url)
    assert (await client.receive())["type"] == "connection_ack"
    return client, await client.subscribe(query, {"id": media_id})


async def next_count(client: WebSocketClient, operation: str) -> int:
    message = await client.receive()
    assert message["id"] == operation, message
    assert message["type"] == "next", message
    return message["payload"]["data"]["viewCount"]["viewCount"]  # type: ignore[no-any-return]


async def count_reaching(client: WebSocketClient, operation: str, final: int) -> int:
    count = await next_count(client, operation)
    while count != final:
        count = await next_count(client, operation)
    return count


async def test_identical_subscriptions_run_once_and_all_receive_every_state(server, app, http, gql, resolver_runs):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    subscribers = [await subscribe(server, media["id"]) for _ in range(20)]
    try:
        assert [await next_count(client, operation) for client, operation in subscribers] == [0] * 20
        await record_views(http, media_id=media["id"], count=3)
        finals = await asyncio.gather(*(count_reaching(client, op, 3) for client, op in subscribers))
        assert finals == [3] * 20
        assert len(resolver_runs) == 1
        assert len(app.shared_streams) == 1
    finally:
        for client, _ in subscribers:
            await client.close()


async def test_a_late_joiner_gets_the_current_state_at_once(server, http, gql, resolver_runs):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    first, first_operation = await subscribe(server, media["id"])
    try:
        assert await next_count(first, first_operation) == 0
        await record_views(http, media_id=media["id"], count=2)
        await count_reaching(first, first_operation, 2)
        late, late_operation = await subscribe(server, media["id"])
        try:
            assert await next_count(late, late_operation) == 2
        finally:
            await late.close()
        assert len(resolver_runs) == 1
    finally:
        await first.close()


async def test_the_stream_stops_when_its_last_subscriber_leaves(server, app, http, gql, resolver_runs):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    client, operation = await subscribe(server, media["id"])
    assert await next_count(client, operation) == 0
    await client.send({"id": operation, "type": "complete"})
    for _ in range(100):
        if not len(app.shared_streams):
            break
        await asyncio.sleep(0.05)
    assert len(app.shared_streams) == 0
    # A new subscriber starts a new execution and still hears of new views.
    again = await client.subscribe(VIEW_COUNT, {"id": media["id"]})
    try:
        assert await next_count(client, again) == 0
        await record_views(http, media_id=media["id"], count=1)
        assert await count_reaching(client, again, 1) == 1
        assert len(resolver_runs) == 2
    finally:
        await client.close()


async def test_a_subscriber_that_vanishes_does_not_hold_back_the_others(server, http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    leaving, leaving_operation = await subscribe(server, media["id"])
    staying, staying_operation = await subscribe(server, media["id"])
    try:
        assert await next_count(leaving, leaving_operation) == 0
        assert await next_count(staying, staying_operation) == 0
        # Gone without a closing handshake, as a dropped network would leave it.
        leaving.connection.transport.abort()
        await record_views(http, media_id=media["id"], count=2)
        assert await count_reaching(staying, staying_operation, 2) == 2
    finally:
        await staying.close()


async def test_shared_answers_are_the_answers_a_subscription_gets_alone(server, http, gql, resolver_runs):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    shared, shared_operation = await subscribe(server, media["id"])
    alone, alone_operation = await subscribe(server, media["id"], VIEW_COUNT_ALONE)
    try:
        first_shared, first_alone = await shared.receive(), await alone.receive()
        assert {**first_shared, "id": None} == {**first_alone, "id": None}
        assert first_shared["id"] == shared_operation
        assert first_alone["id"] == alone_operation
        assert len(resolver_runs) == 2
    finally:
        await shared.close()
        await alone.close()


@pytest.mark.parametrize("media_id", ["TWVkaWE6OTk5OTk5OTk5", "not-an-id"])
async def test_errors_of_a_shared_subscription_match_those_it_gets_alone(server, media_id):
    shared, _ = await subscribe(server, media_id)
    alone, _ = await subscribe(server, media_id, VIEW_COUNT_ALONE)
    try:
        messages = []
        for client in (shared, alone):
            received = [await client.receive()]
            while received[-1]["type"] == "next":
                received.append(await client.receive())
            messages.append([{**message, "id": None} for message in received])
        assert messages[0] == messages[1]
        codes = [error["extensions"]["code"] for error in messages[0][0]["payload"]["errors"]]
        assert codes, messages[0]
        assert all(codes), messages[0]
    finally:
        await shared.close()
        await alone.close()


async def test_an_internal_error_in_a_shared_subscription_is_masked(server, http, gql, monkeypatch):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)

    async def failing(context, *, media_id):  # type: ignore[no-untyped-def]
        raise RuntimeError("connection to 10.0.0.5 refused: password authentication failed")
        yield  # an async generator, as the real one

    monkeypatch.setattr(view_resolvers, "view_count_updates", failing)
    client, operation = await subscribe(server, media["id"])
    try:
        message = await client.receive()
        assert message["id"] == operation
        [error] = message["payload"]["errors"]
        assert error["message"] == "Internal server error."
        assert error["extensions"] == {"code": "INTERNAL_SERVER_ERROR"}
    finally:
        await client.close()


async def test_a_socket_that_cannot_take_a_result_gets_it_later_and_then_only_the_newest():
    """A send that must wait (a full socket buffer) is finished by the subscriber's own task."""
    writable = asyncio.Event()
    sent: list[str] = []
    endings: list[Ending] = []

    async def send(payload: str) -> None:
        await writable.wait()
        sent.append(payload)

    async def send_ending(ending: Ending) -> None:
        endings.append(ending)

    subscriber = Subscriber(send)
    task = asyncio.create_task(subscriber.deliver(send_ending))
    subscriber.offer("1")
    subscriber.offer("2")
    subscriber.offer("3")
    await asyncio.sleep(0.01)
    assert sent == []
    writable.set()
    await asyncio.sleep(0.01)
    assert sent == ["1", "3"]
    # Writable again: the next result goes out at once, without the task.
    subscriber.offer("4")
    assert sent == ["1", "3", "4"]
    subscriber.end(COMPLETE)
    await asyncio.wait_for(task, 1)
    assert endings == [COMPLETE]


async def test_cancelling_a_subscriber_cancels_the_send_it_waits_on():
    started, finished = asyncio.Event(), []

    async def send(payload: str) -> None:
        try:
            started.set()
            await asyncio.Event().wait()
        finally:
            finished.append(payload)

    async def send_ending(ending: Ending) -> None:
        raise AssertionError("a cancelled subscriber sends no ending")

    subscriber = Subscriber(send)
    task = asyncio.create_task(subscriber.deliver(send_ending))
    subscriber.offer("1")
    assert started.is_set()
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["1"]


VIEW_COUNT_WITH_MEDIA = """
subscription($id: ID!) {
  viewCount(mediaId: $id) { viewCount media { id title viewCount likeCount } }
}
"""
VIEW_COUNT_AS_SEEN_BY = """
subscription($id: ID!) {
  viewCount(mediaId: $id) { viewCount media { id viewCount viewerHasLiked viewerHasBookmarked } }
}
"""
LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { id } }"
BOOKMARK = "mutation($id: ID!) { bookmark(mediaId: $id) { id } }"


async def next_push(client: WebSocketClient, operation: str) -> dict:
    message = await client.receive()
    assert message["id"] == operation, message
    assert message["type"] == "next", message
    assert "errors" not in message["payload"], message
    return message["payload"]["data"]["viewCount"]  # type: ignore[no-any-return]


async def push_reaching(client: WebSocketClient, operation: str, final: int) -> dict:
    push = await next_push(client, operation)
    while push["viewCount"] != final:
        push = await next_push(client, operation)
    return push


async def test_a_shared_view_count_push_carries_the_media_with_its_id_and_the_count(server, http, gql, resolver_runs):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token, title="Pushed whole")
    subscribers = [await subscribe(server, media["id"], VIEW_COUNT_WITH_MEDIA) for _ in range(2)]
    try:
        for client, operation in subscribers:
            assert await next_push(client, operation) == {
                "viewCount": 0,
                "media": {"id": media["id"], "title": "Pushed whole", "viewCount": 0, "likeCount": 0},
            }
        await record_views(http, media_id=media["id"], count=2)
        for client, operation in subscribers:
            pushed = await push_reaching(client, operation, 2)
            # The media's count is the count pushed: a normalized cache updates Media:<id> from it.
            assert pushed["media"] == {"id": media["id"], "title": "Pushed whole", "viewCount": 2, "likeCount": 0}
        assert len(resolver_runs) == 1
    finally:
        for client, _ in subscribers:
            await client.close()


async def test_per_viewer_fields_in_a_push_are_each_subscribers_own(server, app, http, gql, resolver_runs):
    owner, _ = await create_user(gql)
    media = await create_media(http, token=owner)
    fan, _ = await create_user(gql)
    stranger, _ = await create_user(gql)
    await gql.ok(LIKE, {"id": media["id"]}, token=fan)
    await gql.ok(BOOKMARK, {"id": media["id"]}, token=fan)
    sockets = {}
    try:
        for name, token in (("fan", fan), ("stranger", stranger), ("anonymous", None)):
            client = await WebSocketClient.connect(
                server, payload={"authorization": f"Bearer {token}"} if token else None
            )
            assert (await client.receive())["type"] == "connection_ack"
            sockets[name] = (client, await client.subscribe(VIEW_COUNT_AS_SEEN_BY, {"id": media["id"]}))
        # The same document on three sockets, and it selects fields that depend on who asks:
        # it runs once per subscriber, never as one shared stream.
        assert len(app.shared_streams) == 0
        expected = {"fan": True, "stranger": False, "anonymous": False}
        for name, (client, operation) in sockets.items():
            first = await next_push(client, operation)
            assert first["media"]["viewerHasLiked"] is expected[name], name
            assert first["media"]["viewerHasBookmarked"] is expected[name], name
        await record_views(http, media_id=media["id"], count=1)
        for name, (client, operation) in sockets.items():
            pushed = await push_reaching(client, operation, 1)
            assert pushed["media"]["viewerHasLiked"] is expected[name], name
            assert pushed["media"]["viewerHasBookmarked"] is expected[name], name
        assert len(resolver_runs) == 3
    finally:
        for client, _ in sockets.values():
            await client.close()


def test_a_push_with_absolute_urls_is_shared_only_when_the_public_url_fixes_their_origin():
    from mediagraph.serving.schema import build_schema
    from mediagraph.serving.sharing import SharedStreams

    schema = build_schema()
    query = "subscription($id: ID!) { viewCount(mediaId: $id) { media { id contentUrl } } }"
    variables = {"id": "TWVkaWE6MQ"}
    assert SharedStreams(origin_fixed=True).key_for(schema, query, None, variables) is not None
    assert SharedStreams(origin_fixed=False).key_for(schema, query, None, variables) is None
    assert SharedStreams(origin_fixed=False).key_for(schema, VIEW_COUNT, None, variables) is not None
