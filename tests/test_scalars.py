from __future__ import annotations

import pytest
from sqlalchemy import text

from mediagraph.ids import from_global_id
from mediagraph.schema.scalars import MAX_COUNT
from mediagraph.serving.schema import build_schema
from tests.support.factories import create_media, create_user

VIEW_COUNT = "query($id: ID!) { media(id: $id) { viewCount } }"
PAST_INT = 2**31 + 12345


async def _set_flushed_views(services, media_id: str, views: int) -> None:
    async with services.databases.main_session() as session:
        await session.execute(
            text(
                "INSERT INTO media_view_count (media_id, view_count) VALUES (:id, :views) "
                "ON CONFLICT (media_id) DO UPDATE SET view_count = :views"
            ),
            {"id": from_global_id(media_id)[1], "views": views},
        )
        await session.commit()


async def test_a_count_past_32_bits_is_sent_exactly_as_a_json_number(http, gql, services):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    await _set_flushed_views(services, media["id"], PAST_INT)
    response = await http.post("/graphql", json={"query": VIEW_COUNT, "variables": {"id": media["id"]}})
    assert f'"viewCount":{PAST_INT}' in response.text.replace(" ", "")
    assert response.json() == {"data": {"media": {"viewCount": PAST_INT}}}


async def test_a_count_past_what_json_carries_exactly_is_an_error_not_a_wrong_number(http, gql, services):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    await _set_flushed_views(services, media["id"], MAX_COUNT + 2)
    body = (await http.post("/graphql", json={"query": VIEW_COUNT, "variables": {"id": media["id"]}})).json()
    # The media is nulled (viewCount is non-null) with a masked error: never a rounded number.
    assert body["data"] == {"media": None}
    assert body["errors"][0]["path"] == ["media", "viewCount"]
    assert body["errors"][0]["extensions"]["code"] == "INTERNAL_SERVER_ERROR"


def test_every_count_in_the_schema_is_a_count():
    sdl = build_schema().as_str()
    assert 'scalar Count @specifiedBy(url: "https://www.rfc-editor.org/rfc/rfc8259#section-6")' in sdl
    for field in ("viewCount", "likeCount", "commentCount", "followerCount", "followingCount", "sizeBytes", "total"):
        declared = [line.strip() for line in sdl.splitlines() if line.strip().startswith(f"{field}:")]
        assert declared, field
        assert all(line.split(":", 1)[1].strip().rstrip("!") == "Count" for line in declared), declared


@pytest.mark.parametrize("value", [-1, 1.5, "7", True, MAX_COUNT + 1])
def test_a_count_is_a_whole_number_from_zero_to_two_to_the_53_minus_one(value):
    from mediagraph.schema.scalars import _count

    with pytest.raises((TypeError, ValueError)):
        _count(value)


SCALAR_TYPES = """
query {
  __schema { types { kind name description specifiedByURL } }
}
"""


async def test_every_custom_scalar_names_its_specification_and_says_what_it_holds(gql):
    types = (await gql.ok(SCALAR_TYPES))["__schema"]["types"]
    builtin = {"String", "Int", "Float", "Boolean", "ID"}
    custom = {t["name"]: t for t in types if t["kind"] == "SCALAR" and t["name"] not in builtin}
    assert set(custom) >= {"Count", "DateTime", "Date", "UUID", "Upload"}
    expected = {
        "DateTime": "rfc3339",
        "Date": "iso-8601",
        "UUID": "rfc9562",
        "Upload": "graphql-multipart-request-spec",
        "Count": "rfc8259",
    }
    for name, scalar in custom.items():
        assert scalar["specifiedByURL"], name
        assert scalar["description"], name
        assert expected[name] in scalar["specifiedByURL"], scalar
