"""The rules of docs/schema-conventions.md that a machine can check, over the executable schema."""

from __future__ import annotations

import re

import pytest
from graphql import (
    GraphQLObjectType,
    GraphQLSchema,
    get_named_type,
    is_leaf_type,
    is_non_null_type,
    is_object_type,
    is_scalar_type,
)

from mediagraph.serving.schema import build_schema

BUILT_IN_SCALARS = {"String", "Int", "Float", "Boolean", "ID"}
ROOTS = {"Query", "Mutation", "Subscription"}


@pytest.fixture(scope="module")
def schema() -> GraphQLSchema:
    return build_schema()._schema


def object_types(schema: GraphQLSchema) -> list[GraphQLObjectType]:
    return [t for name, t in sorted(schema.type_map.items()) if is_object_type(t) and not name.startswith("__")]


def test_every_nullable_field_says_what_can_null_it(schema):
    unexplained = [
        f"{t.name}.{name}"
        for t in object_types(schema)
        for name, field in t.fields.items()
        if not is_non_null_type(field.type) and "null" not in (field.description or "").lower()
    ]
    assert unexplained == []


def test_every_connection_pages_both_ways_with_relay_arguments(schema):
    for t in object_types(schema):
        for name, field in t.fields.items():
            if get_named_type(field.type).name.endswith("Connection"):
                assert {"first", "after", "last", "before"} <= set(field.args), f"{t.name}.{name}"
    page_info = schema.type_map["PageInfo"]
    assert {name: str(field.type) for name, field in page_info.fields.items()} == {
        "hasNextPage": "Boolean!",
        "hasPreviousPage": "Boolean!",
        "startCursor": "String",
        "endCursor": "String",
    }


def test_a_field_name_means_one_leaf_type_everywhere(schema):
    types_by_name: dict[str, set[str]] = {}
    for t in object_types(schema):
        for name, field in t.fields.items():
            if field.deprecation_reason is None and is_leaf_type(get_named_type(field.type)):
                types_by_name.setdefault(name, set()).add(str(field.type).replace("!", ""))
    assert {name: types for name, types in types_by_name.items() if len(types) > 1} == {}


def test_counts_are_named_count_and_typed_count(schema):
    for t in object_types(schema):
        if t.name in ROOTS:
            continue
        for name, field in t.fields.items():
            if name.endswith("Count"):
                assert get_named_type(field.type).name == "Count", f"{t.name}.{name}"


def test_every_undo_has_its_do(schema):
    mutations = set(schema.mutation_type.fields)
    for name in mutations:
        if name.startswith("un"):
            assert name[2].lower() + name[3:] in mutations, name
    assert {"likeMedia", "unlikeMedia", "bookmarkMedia", "unbookmarkMedia", "follow", "unfollow"} <= mutations


def test_every_deprecation_names_a_replacement_that_exists(schema):
    for t in object_types(schema):
        for name, field in t.fields.items():
            if field.deprecation_reason is None:
                continue
            replacements = re.findall(r"`(\w+)`", field.deprecation_reason)
            assert replacements, f"{t.name}.{name}: {field.deprecation_reason}"
            assert replacements[0] in t.fields, f"{t.name}.{name} -> {replacements[0]}"
            assert t.fields[replacements[0]].deprecation_reason is None


def test_every_custom_scalar_is_described_and_specified(schema):
    for name, t in schema.type_map.items():
        if is_scalar_type(t) and name not in BUILT_IN_SCALARS:
            assert t.description, name
            assert t.specified_by_url, name


def test_the_printed_schema_shows_the_deprecations(live_servers):
    result = live_servers.run("schema")
    assert result.returncode == 0, result.stderr
    deprecated = [line.strip().split("(")[0].split(":")[0] for line in result.stdout.splitlines() if "@deprecated" in line]
    assert {"bookmark", "unbookmark", "addComment", "size", "period", "liveViewers", "liveChannelViewers"} <= set(
        deprecated
    )
