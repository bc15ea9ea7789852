"""Execution plans: a validated query compiled once into what executing it needs, field by field.

graphql-core re-derives, for every field of every request, what the document
already fixes: which fields an object's selection collects, each field's
definition, resolver, argument literals and how its value completes. A plan
derives them once per document; `serving/executor.py` then walks the plan with
graphql-core's own semantics (resolvers, error locations, null propagation,
sibling concurrency). Strawberry's per-call work is derived once too: a resolver
whose wrapper would only rename its arguments is called directly (`DirectResolver`),
and leaf-typed variables are coerced without rebuilding their signatures
(`serving/variables.py`).

Only what a plan can express exactly is compiled: queries and mutations whose
selections carry no directives and only reach object types (no interfaces or
unions, no introspection beyond `__typename`). A mutation's root fields run one
after another, each to completion, as graphql-core runs them. Anything else
returns None and runs on graphql-core itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    DirectiveNode,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    GraphQLField,
    GraphQLLeafType,
    GraphQLList,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    get_named_type,
    is_leaf_type,
    is_list_type,
    is_non_null_type,
    is_object_type,
    visit,
)
from graphql.execution.collect_fields import FieldDetails, FragmentDetails, collect_fields, collect_subfields
from graphql.execution.get_variable_signature import get_variable_signature
from graphql.language import Visitor
from strawberry.relay import GlobalID
from strawberry.types.arguments import StrawberryArgument
from strawberry.types.base import StrawberryList, StrawberryMaybe, StrawberryOptional
from strawberry.types.field import StrawberryField
from strawberry.types.lazy_type import LazyType

from mediagraph.schema.extensions import PREFETCHED
from mediagraph.serving.variables import NO_VARIABLES, ArgumentValues, LeafVariable, VariablePlan

# Strawberry's resolver of a plain attribute field: `field.default_resolver(source, python_name)`,
# ignoring `info` and arguments.
BASIC_RESOLVER = "_get_basic_result"
STRAWBERRY_FIELD = "strawberry-definition"
STRAWBERRY_IS_TYPE_OF = "strawberry.schema.schema_converter"
STRAWBERRY_SCHEMA = "_strawberry_schema"
# The exception handlers Strawberry's resolver wrapper closes over: () when the field has none.
STRAWBERRY_HANDLERS = "field_exception_handlers"
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
    # The argument values, from what the document fixes and the variables; None: graphql-core's.
    arguments: ArgumentValues | None = None
    # The Python resolver, called without Strawberry's per-call wrapper where that wrapper
    # would only rename arguments; None: the schema's resolver runs.
    direct: DirectResolver | None = None
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


@dataclass(frozen=True, slots=True)
class DirectResolver:
    """A field's Python resolver called as Strawberry's resolver wrapper calls it.

    Only for fields the wrapper does nothing more for than build the `Info`, rename the
    arguments to their Python names and pass the source where the resolver asks for it:
    no field extensions, no exception handlers, and arguments of leaf types (scalars and
    enums, optional or in lists), which Strawberry passes on as graphql-core coerced them
    (lists copied). `GlobalID`, `Maybe` and input objects keep the wrapper.
    """

    function: Callable[..., Any]
    field: StrawberryField
    info_class: type
    pass_source: bool  # as the first positional argument (`self`)
    source_keywords: tuple[str, ...]  # `root` / `strawberry.Parent` parameters
    info_keyword: str | None
    # GraphQL argument name -> (Python name, whether the value is a list Strawberry copies).
    arguments: dict[str, tuple[str, bool]]

    def __call__(self, source: Any, info: Any, arguments: dict[str, Any]) -> Any:
        kwargs: dict[str, Any] = {}
        for name, value in arguments.items():
            python_name, copied = self.arguments[name]
            kwargs[python_name] = list(value) if copied and value is not None else value
        for keyword in self.source_keywords:
            kwargs[keyword] = source
        if self.info_keyword is not None:
            kwargs[self.info_keyword] = self.info_class(_raw_info=info, _field=self.field)
        if self.pass_source:
            return self.function(source, **kwargs)
        return self.function(**kwargs)


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
    # Variables coerced without graphql-core's per-request signature work; None: graphql-core's.
    variables: VariablePlan | None = None


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
        return OperationPlan(
            self.operation,
            self.fragment_definitions,
            root,
            serial=kind is OperationType.MUTATION,
            variables=self._variables(),
        )

    def _variables(self) -> VariablePlan | None:
        leaves = []
        for node in self.operation.variable_definitions or ():
            signature = get_variable_signature(self.schema, node)
            if isinstance(signature, GraphQLError):
                return None
            non_null = is_non_null_type(signature.type)
            leaf = signature.type.of_type if non_null else signature.type  # type: ignore[union-attr]
            if not is_leaf_type(leaf):
                return None
            leaves.append(LeafVariable(signature, leaf, non_null))
        return VariablePlan(tuple(leaves))

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
        if not basic:
            plan.direct = _direct(self.schema, definition)
        plan.arguments = ArgumentValues.of(definition, nodes[0])
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


def _direct(schema: GraphQLSchema, definition: GraphQLField) -> DirectResolver | None:
    field = (definition.extensions or {}).get(STRAWBERRY_FIELD)
    strawberry_schema = getattr(schema, STRAWBERRY_SCHEMA, None)
    if not isinstance(field, StrawberryField) or strawberry_schema is None:
        return None
    resolver = field.base_resolver
    if resolver is None or field.extensions or not callable(resolver.wrapped_func):
        return None
    if _closure_value(definition.resolve, STRAWBERRY_HANDLERS) != ():
        return None  # not the wrapper whose work is done here, or a field with exception handlers
    arguments = {}
    for name, argument in definition.args.items():
        strawberry_argument = (argument.extensions or {}).get(STRAWBERRY_FIELD)
        if not isinstance(strawberry_argument, StrawberryArgument):
            return None
        copied = _passed_as_coerced(strawberry_argument.type)
        if copied is None or not is_leaf_type(get_named_type(argument.type)):
            return None
        arguments[name] = (str(strawberry_argument.python_name), copied)
    source_keywords = tuple(p.name for p in (resolver.parent_parameter, resolver.root_parameter) if p is not None)
    return DirectResolver(
        function=resolver.wrapped_func,
        field=field,
        info_class=strawberry_schema.config.info_class,
        pass_source=resolver.self_parameter is not None,
        source_keywords=source_keywords,
        info_keyword=resolver.info_parameter.name if resolver.info_parameter is not None else None,
        arguments=arguments,
    )


def _passed_as_coerced(argument_type: Any, *, in_list: bool = False) -> bool | None:
    """For an argument Strawberry passes on as coerced: whether it copies the list; else None."""
    if isinstance(argument_type, LazyType):
        argument_type = argument_type.resolve_type()
    if argument_type is None or isinstance(argument_type, StrawberryMaybe) or argument_type is GlobalID:
        return None
    if isinstance(argument_type, StrawberryOptional):
        return _passed_as_coerced(argument_type.of_type, in_list=in_list)
    if isinstance(argument_type, StrawberryList):
        if in_list:
            return None  # lists of lists are converted item by item
        return None if _passed_as_coerced(argument_type.of_type, in_list=True) is None else True
    return False


def _closure_value(function: Any, name: str) -> Any:
    code = getattr(function, "__code__", None)
    if code is None or name not in code.co_freevars:
        return None
    return function.__closure__[code.co_freevars.index(name)].cell_contents


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
