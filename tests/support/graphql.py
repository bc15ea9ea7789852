"""Small clients for tests: GraphQL over HTTP, and graphql-transport-ws over a real socket."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import websockets


def error_extensions(result: dict[str, Any]) -> dict[str, Any]:
    """The first error's `extensions` without `requestId`, which differs on every request."""
    extensions: dict[str, Any] = result["errors"][0]["extensions"]
    return {key: value for key, value in extensions.items() if key != "requestId"}


class GraphQLClient:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def __call__(
        self, query: str, variables: dict[str, Any] | None = None, *, token: str | None = None
    ) -> dict[str, Any]:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        response = await self.http.post(
            "/graphql", json={"query": query, "variables": variables or {}}, headers=headers
        )
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    async def ok(
        self, query: str, variables: dict[str, Any] | None = None, *, token: str | None = None
    ) -> dict[str, Any]:
        """Run an operation that must succeed; returns its `data`."""
        result = await self(query, variables, token=token)
        assert not result.get("errors"), result["errors"]
        return result["data"]  # type: ignore[no-any-return]

    async def error_code(self, query: str, variables: dict[str, Any] | None = None, *, token: str | None = None) -> str:
        """Run an operation that must fail; returns the first error's `extensions.code`."""
        result = await self(query, variables, token=token)
        assert result.get("errors"), result
        return result["errors"][0]["extensions"]["code"]  # type: ignore[no-any-return]


class WebSocketClient:
    """graphql-transport-ws, as a browser client speaks it."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    @classmethod
    async def connect(cls, url: str, *, payload: dict[str, Any] | None = None) -> WebSocketClient:
        connection = await websockets.connect(url, subprotocols=["graphql-transport-ws"])  # type: ignore[list-item]
        client = cls(connection)
        await client.send({"type": "connection_init", "payload": payload or {}})
        return client

    async def send(self, message: dict[str, Any]) -> None:
        await self.connection.send(json.dumps(message))

    async def receive(self, timeout: float = 10) -> dict[str, Any]:  # noqa: ASYNC109 - a test helper's deadline
        while True:
            raw = await asyncio.wait_for(self.connection.recv(), timeout)
            # graphql-transport-ws travels in text frames; browsers cannot read JSON from binary ones.
            assert isinstance(raw, str), f"binary frame: {raw!r}"
            message = json.loads(raw)
            if message["type"] == "ping":
                await self.send({"type": "pong"})
                continue
            return message  # type: ignore[no-any-return]

    async def subscribe(self, query: str, variables: dict[str, Any] | None = None) -> str:
        operation_id = uuid.uuid4().hex
        await self.send(
            {"id": operation_id, "type": "subscribe", "payload": {"query": query, "variables": variables or {}}}
        )
        return operation_id

    async def close(self) -> None:
        await self.connection.close()


class LegacyWebSocketClient:
    """The legacy graphql-ws subprotocol, as subscriptions-transport-ws (older Apollo apps) speaks it."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    @classmethod
    async def connect(
        cls, url: str, *, payload: dict[str, Any] | None = None, init: bool = True
    ) -> LegacyWebSocketClient:
        connection = await websockets.connect(url, subprotocols=["graphql-ws"])  # type: ignore[list-item]
        assert connection.subprotocol == "graphql-ws"
        client = cls(connection)
        if init:
            await client.send({"type": "connection_init", "payload": payload or {}})
        return client

    async def send(self, message: dict[str, Any]) -> None:
        await self.connection.send(json.dumps(message))

    async def receive(self, timeout: float = 10) -> dict[str, Any]:  # noqa: ASYNC109 - a test helper's deadline
        while True:
            raw = await asyncio.wait_for(self.connection.recv(), timeout)
            assert isinstance(raw, str), f"binary frame: {raw!r}"
            message = json.loads(raw)
            if message["type"] == "ka":  # keep-alive, sent right after connection_ack and then periodically
                continue
            return message  # type: ignore[no-any-return]

    async def start(self, query: str, variables: dict[str, Any] | None = None) -> str:
        operation_id = uuid.uuid4().hex
        await self.send({"id": operation_id, "type": "start", "payload": {"query": query, "variables": variables or {}}})
        return operation_id

    async def stop(self, operation_id: str) -> None:
        await self.send({"id": operation_id, "type": "stop"})

    async def close(self) -> None:
        await self.connection.close()
