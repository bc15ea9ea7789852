"""Execution plans: a validated query compiled once into what executing it needs, field by field.

graphql-core re-derives, for every field of every request, what the document
already fixes: which fields an object's selection collects, each field's
definition, resolver, argument literals and how its value completes. A plan
derives them once per document; `serving/executor.py` then walks the plan with
graphql-core's own semantics (resolvers, error locations, null propagation,
sibling concurrency).

Only what a plan can express exactly is compiled: queries and mutations whose
selections carry no directives and only reach object types (no interfaces or
unions, no introspection beyond `__typename`). A mutation's root fields run one
after another, each to completion, as graphql-core runs them. Anything else
returns None and runs on graphql-core itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphql import (
    DirectiveNode,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLField,
    GraphQLLeafType,
    GraphQLList,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    VariableNode,
    is_leaf_type,
    is_list_type,
    is_non_null_type,
    is_object_type,
    visit,
)
from graphql.execution.collect_fields import FieldDetails, FragmentDetails, collect_fields, collect_subfields
from graphql.execution.values import VariableValues, get_argument_values
from graphql.language import Visitor

from mediagraph.schema.extensions import PREFETCHED

# Strawberry's resolver of a plain attribute field: `field.default_resolver(source, python_name)`,
# ignoring `info` and arguments.
BASIC_RESOLVER = "_get_basic_result"
STRAWBERRY_FIELD = "strawberry-definition"
STRAWBERRY_IS_TYPE_OF = "strawberry.schema.schema_converter"
NO_VARIABLES = VariableValues({}, {})
# The operations a plan runs, with the schema attribute holding their root type.
ROOT_TYPES = {OperationType.QUERY: "query_type", OperationType.MUTATION: "mutation_type"}


class Unsupported(Exception):
    """The document needs something a plan does not express; graphql-core runs it."""


@dataclass(frozen=True, slots=True)
class Completion:
    """How a resolved value completes for one output type (graphql-core's completeValue, unrolled)."""

    type: GraphQLOutputType
    non_null: bool
    leaf: GraphQLLeafType | None = None
    item: Completion | None = None
    object: ObjectPlan | None = None


@dataclass(slots=True)
class FieldPlan:
    key: str
    name: str
    parent_type: GraphQLObjectType
    definition: GraphQLField | None
    nodes: list[FieldNode]
    completion: Completion | None
    basic: bool = False
    # For a plain attribute read with getattr: the attribute, so execution skips the resolver wrapper.
    attribute: str | None = None
    # For a computed field whose source may already hold its value: that attribute (None there: resolve).
    prefetched: str | None = None
    # A scalar (or list of non-null scalars) read from `attribute` or `prefetched`: the executor
    # completes it inline, and takes the general path for anything unusual (None, a failure).
    inline: InlineLeaf | None = None
    typename: bool = False
    # Argument values fixed by the document; None when they depend on variables.
    arguments: dict[str, Any] | None = None
    null_message: str = ""
    label: str = ""

    @property
    def node(self) -> FieldNode:
        return self.nodes[0]


@dataclass(frozen=True, slots=True)
class InlineLeaf:
    """A leaf field completed in place: `coerce(getattr(source, attribute))`, or per item of a list."""

    attribute: str
    coerce: Any  # the scalar's or enum's coerce_output_value
    many: bool  # a list of non-null items
    nullable: bool  # a None value completes to None here (a non-null field's None takes the general path)


@dataclass(slots=True)
class ObjectPlan:
    type: GraphQLObjectType
    fields: list[FieldPlan] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OperationPlan:
    operation: OperationDefinitionNode
    fragments: dict[str, FragmentDefinitionNode]
    root: ObjectPlan
    # A mutation's root fields run serially, in document order.
    serial: bool = False


class _Directives(Visitor):
    found = False

    def enter_directive(self, node: DirectiveNode, *_: Any) -> None:
        self.found = True


def compile_operation(
    schema: GraphQLSchema, document: DocumentNode, operation_name: str | None
) -> OperationPlan | None:
    """The plan of the named (or only) operation, or None when graphql-core must run it."""
    try:
        return _Compiler(schema, document, operation_name).compile()
    except Unsupported:
        return None


class _Compiler:
    def __init__(self, schema: GraphQLSchema, document: DocumentNode, operation_name: str | None) -> None:
        self.schema = schema
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        chosen = [d for d in operations if operation_name is None or (d.name and d.name.value == operation_name)]
        if len(chosen) != 1:
            raise Unsupported
        self.operation = chosen[0]
        self.fragment_definitions = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        self.fragments = {name: FragmentDetails(d, None) for name, d in self.fragment_definitions.items()}
        directives = _Directives()
        visit(document, directives)
        # @skip/@include make the collected fields depend on variables; @defer/@stream on delivery.
        if self.operation.operation not in ROOT_TYPES or directives.found:
            raise Unsupported

    def compile(self) -> OperationPlan:
        kind = self.operation.operation
        root_type = getattr(self.schema, ROOT_TYPES[kind])
        if root_type is None:
            raise Unsupported
        grouped = collect_fields(self.schema, self.fragments, NO_VARIABLES, root_type, self.operation)
        root = self._object(root_type, grouped.grouped_field_set)
        return OperationPlan(self.operation, self.fragment_definitions, root, serial=kind is OperationType.MUTATION)

    def _object(self, object_type: GraphQLObjectType, grouped: dict[str, list[FieldDetails]]) -> ObjectPlan:
        is_type_of = object_type.is_type_of
        if is_type_of is not None and getattr(is_type_of, "__module__", None) != STRAWBERRY_IS_TYPE_OF:
            raise Unsupported
        plan = ObjectPlan(object_type)
        for key, details in grouped.items():
            plan.fields.append(self._field(object_type, key, details))
        return plan

    def _field(self, parent: GraphQLObjectType, key: str, details: list[FieldDetails]) -> FieldPlan:
        nodes = [detail.node for detail in details]
        name = nodes[0].name.value
        if name == "__typename":
            return FieldPlan(key, name, parent, None, nodes, None, typename=True)
        if name.startswith("__"):
            raise Unsupported
        definition = self.schema.get_field(parent, name)
        if definition is None or definition.resolve is None:
            raise Unsupported
        completion = self._completion(definition.type, details)
        basic = getattr(definition.resolve, "__name__", "") == BASIC_RESOLVER
        plan = FieldPlan(
            key,
            name,
            parent,
            definition,
            nodes,
            completion,
            basic=basic,
            attribute=_attribute(definition) if basic else None,
            null_message=f"Cannot return null for non-nullable field {parent.name}.{name}.",
            label=f"{parent.name}.{name}",
        )
        if basic or not definition.args:
            plan.prefetched = None if basic else _prefetched(definition)
            plan.inline = _inline(plan)
        if not definition.args and not nodes[0].arguments:
            plan.arguments = {}
        elif not _uses_variables(nodes[0]):
            plan.arguments = get_argument_values(definition, nodes[0], NO_VARIABLES)
        return plan

    def _completion(self, output_type: GraphQLOutputType, details: list[FieldDetails]) -> Completion:
        if is_non_null_type(output_type):
            inner = self._completion(output_type.of_type, details)
            return Completion(inner.type, True, inner.leaf, inner.item, inner.object)
        if is_list_type(output_type):
            assert isinstance(output_type, GraphQLList)
            return Completion(output_type, False, item=self._completion(output_type.of_type, details))
        if is_leaf_type(output_type):
            return Completion(output_type, False, leaf=output_type)
        if is_object_type(output_type):
            assert isinstance(output_type, GraphQLObjectType)
            sub = collect_subfields(self.schema, self.fragments, NO_VARIABLES, self.operation, output_type, details)
            return Completion(output_type, False, object=self._object(output_type, sub.grouped_field_set))
        raise Unsupported  # interfaces and unions resolve their type at run time


def _attribute(definition: GraphQLField) -> str | None:
    """The attribute a basic Strawberry field reads with plain getattr, if that is all its resolver does."""
    field = (definition.extensions or {}).get(STRAWBERRY_FIELD)
    if field is None or field.base_resolver is not None or field.extensions or field.default_resolver is not getattr:
        return None
    return str(field.python_name)


def _prefetched(definition: GraphQLField) -> str | None:
    """The attribute a computed field's value may already sit in, when nothing else runs around its resolver."""
    field = (definition.extensions or {}).get(STRAWBERRY_FIELD)
    if field is None or field.extensions:
        return None
    attribute = (field.metadata or {}).get(PREFETCHED)
    return attribute if isinstance(attribute, str) else None


def _inline(plan: FieldPlan) -> InlineLeaf | None:
    attribute = plan.attribute or plan.prefetched
    completion = plan.completion
    if attribute is None or completion is None:
        return None
    if completion.leaf is not None:
        # A prefetched None means "not read": it resolves, so only attributes complete None inline.
        nullable = not completion.non_null and plan.prefetched is None
        return InlineLeaf(attribute, completion.leaf.coerce_output_value, many=False, nullable=nullable)
    item = completion.item
    if item is not None and item.leaf is not None and item.non_null and plan.prefetched is None:
        return InlineLeaf(attribute, item.leaf.coerce_output_value, many=True, nullable=not completion.non_null)
    return None


def _uses_variables(node: FieldNode) -> bool:
    class Finder(Visitor):
        found = False

        def enter_variable(self, _node: VariableNode, *_: Any) -> None:
            self.found = True

    finder = Finder()
    for argument in node.arguments or ():
        visit(argument, finder)
    return finder.found
