"""Query cost, estimated before execution from `first`/`last` along nested connections.

As GitHub's API counts it: every connection may return as many nodes as its `first` (or
`last`) allows, and a connection inside another one runs once per node of the outer one,
so its nodes multiply. An operation's cost is 1 plus, for every connection it selects,
the product of the page sizes on the way down to it:

    mediaList(first: 50) { edges { node { comments(first: 20) { ... } } } }
    = 1 + 50 + 50 × 20 = 1051

A page size given by a variable is known only per request, so each (document, operation)
is analysed once into a `CostFormula` (kept with the cached document) that a request
evaluates with its variables. An omitted `first` counts as the field's default, or the
resolvers' default page size; sizes are counted up to the page-size cap (beyond it the
field refuses the argument anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLInterfaceType,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
    get_named_type,
)

from mediagraph.resolvers.pagination import DEFAULT_PAGE_SIZE

PAGE_ARGUMENTS = ("first", "last")
TOO_COMPLEX = "QUERY_TOO_COMPLEX"
# A request asks for its cost with `"extensions": {"cost": true}`; the answer's `extensions.cost` has it.
REPORT_FLAG = "cost"


@dataclass(frozen=True, slots=True)
class PageSize:
    """One connection's page size: a literal, or a variable with the value to assume without it."""

    literal: int | None
    variable: str | None
    fallback: int

    def value(self, variables: Mapping[str, Any], cap: int) -> int:
        size: object = self.literal
        if self.variable is not None:
            size = variables.get(self.variable, self.fallback)
        if not isinstance(size, int) or isinstance(size, bool):
            size = self.fallback
        return max(0, min(size, cap))


@dataclass(frozen=True, slots=True)
class Connection:
    """A connection field's page: the larger of its `first` and `last` when it is given both."""

    sizes: tuple[PageSize, ...]

    def value(self, variables: Mapping[str, Any], cap: int) -> int:
        return max(size.value(variables, cap) for size in self.sizes)


@dataclass(frozen=True, slots=True)
class CostFormula:
    """1 + the sum, over the operation's connections, of the product of page sizes down to each."""

    # One path of connections (from the root down) per connection selected.
    terms: tuple[tuple[Connection, ...], ...]

    def evaluate(self, variables: Mapping[str, Any] | None, *, cap: int) -> int:
        given = variables or {}
        return 1 + sum(math.prod(connection.value(given, cap) for connection in path) for path in self.terms)

    @property
    def variables(self) -> set[str]:
        return {
            size.variable for path in self.terms for connection in path for size in connection.sizes if size.variable
        }


def too_complex(cost: int, limit: int) -> GraphQLError:
    return GraphQLError(
        f"The query's estimated cost {cost} exceeds the limit of {limit}: ask for smaller pages "
        "(`first`/`last`) or nest fewer connections.",
        extensions={"code": TOO_COMPLEX, "cost": cost, "limit": limit},
    )


def wants_report(extensions: Mapping[str, Any] | None) -> bool:
    return bool(extensions) and extensions.get(REPORT_FLAG) is True  # type: ignore[union-attr]


def report(cost: int, limit: int) -> dict[str, Any]:
    return {REPORT_FLAG: {"requested": cost, "limit": limit}}


def cost_formula(schema: GraphQLSchema, document: DocumentNode, operation_name: str | None) -> CostFormula:
    """The formula of the named operation (or the only one) of a document that passed validation."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    operation = next(
        (d for d in operations if operation_name is None or (d.name is not None and d.name.value == operation_name)),
        None,
    )
    if operation is None:
        return CostFormula(())
    root = schema.get_root_type(operation.operation)
    if root is None:
        return CostFormula(())
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    defaults = {
        definition.variable.name.value: definition.default_value.value
        for definition in operation.variable_definitions or ()
        if isinstance(definition.default_value, IntValueNode)
    }
    walk = _Walk(schema, fragments, {name: int(value) for name, value in defaults.items()})
    walk.selections(root, operation.selection_set, ())
    return CostFormula(tuple(walk.terms))


class _Walk:
    def __init__(
        self, schema: GraphQLSchema, fragments: Mapping[str, FragmentDefinitionNode], defaults: Mapping[str, int]
    ) -> None:
        self.schema = schema
        self.fragments = fragments
        self.defaults = defaults
        self.terms: list[tuple[Connection, ...]] = []

    def selections(
        self, parent: GraphQLNamedType, selection_set: SelectionSetNode, path: tuple[Connection, ...]
    ) -> None:
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                self.field(parent, selection, path)
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition
                target = self.schema.get_type(condition.name.value) if condition is not None else parent
                self.selections(target or parent, selection.selection_set, path)
            elif isinstance(selection, FragmentSpreadNode):
                fragment = self.fragments.get(selection.name.value)
                if fragment is not None:
                    target = self.schema.get_type(fragment.type_condition.name.value)
                    self.selections(target or parent, fragment.selection_set, path)

    def field(self, parent: GraphQLNamedType, node: FieldNode, path: tuple[Connection, ...]) -> None:
        if not isinstance(parent, GraphQLObjectType | GraphQLInterfaceType) or node.name.value.startswith("__"):
            return
        definition = parent.fields.get(node.name.value)
        if definition is None:
            return
        connection = self._connection(definition.args, node)
        if connection is not None:
            path = (*path, connection)
            self.terms.append(path)
        if node.selection_set is not None:
            self.selections(get_named_type(definition.type), node.selection_set, path)

    def _connection(self, arguments: Mapping[str, Any], node: FieldNode) -> Connection | None:
        given = {argument.name.value: argument.value for argument in node.arguments or ()}
        sizes: list[PageSize] = []
        for name in PAGE_ARGUMENTS:
            if name not in arguments:
                continue
            default = arguments[name].default_value
            fallback = default if isinstance(default, int) and not isinstance(default, bool) else DEFAULT_PAGE_SIZE
            value = given.get(name)
            if isinstance(value, IntValueNode):
                sizes.append(PageSize(int(value.value), None, fallback))
            elif isinstance(value, VariableNode):
                variable = value.name.value
                sizes.append(PageSize(None, variable, self.defaults.get(variable, fallback)))
            elif name == "first" and "last" not in given:
                # Omitted (or null): the field's default page.
                sizes.append(PageSize(fallback, None, fallback))
        return Connection(tuple(sizes)) if sizes else None
