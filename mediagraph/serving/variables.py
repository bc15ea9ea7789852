"""Variables and field arguments coerced with what graphql-core would derive per request done once.

graphql-core's `get_variable_values` rebuilds each variable's signature (its type from
the document) on every request before it coerces the value, and `get_argument_values`
walks each field's argument nodes again. For an operation whose variables are all of
leaf types, a plan keeps the signatures and coerces each value with the type's own
`coerce_input_value`, as graphql-core does for a leaf; a field's literal arguments and
defaults are coerced once, and those given as variables are taken from the coerced
variables, as graphql-core takes them. Anything it would report (a missing or null
required value, a value the scalar refuses) or would fill in (a default for a missing
variable) is left to graphql-core, which answers exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphql import (
    FieldNode,
    GraphQLEnumType,
    GraphQLError,
    GraphQLField,
    GraphQLScalarType,
    VariableNode,
    is_non_null_type,
)
from graphql.execution.get_variable_signature import GraphQLVariableSignature
from graphql.execution.values import VariableValues, VariableValueSource, coerce_argument
from graphql.language import ValueNode, Visitor, visit
from graphql.pyutils import Undefined

NO_VARIABLES = VariableValues({}, {})


@dataclass(frozen=True, slots=True)
class LeafVariable:
    signature: GraphQLVariableSignature
    type: GraphQLScalarType | GraphQLEnumType
    non_null: bool


@dataclass(frozen=True, slots=True)
class VariablePlan:
    variables: tuple[LeafVariable, ...]

    def coerce(self, inputs: dict[str, Any]) -> VariableValues | None:
        """The coerced values, as graphql-core coerces them; None where graphql-core must (errors, defaults)."""
        sources: dict[str, VariableValueSource] = {}
        coerced: dict[str, Any] = {}
        for variable in self.variables:
            signature = variable.signature
            name = signature.name
            value = inputs.get(name, Undefined)
            if value is Undefined:
                if variable.non_null or signature.default is not None:
                    return None
                sources[name] = VariableValueSource(signature)
                continue
            sources[name] = VariableValueSource(signature, value)
            if value is None:
                if variable.non_null:
                    return None
                coerced[name] = None
                continue
            try:
                value = variable.type.coerce_input_value(value)
            except Exception:  # graphql-core's message for it comes from its own pass
                return None
            if value is Undefined:
                return None
            coerced[name] = value
        return VariableValues(sources, coerced)


@dataclass(frozen=True, slots=True)
class ArgumentValues:
    """A field's arguments: those fixed by the document (literals, defaults) coerced once, and
    those given as variables, by the name their value goes out under."""

    fixed: dict[str, Any]
    # (out name, variable name, whether the argument is non-null)
    from_variables: tuple[tuple[str, str, bool], ...]

    @classmethod
    def of(cls, definition: GraphQLField, node: FieldNode) -> ArgumentValues | None:
        """None when graphql-core must coerce them each time (a variable inside a literal, an invalid literal)."""
        given = {argument.name.value: argument for argument in node.arguments or ()}
        fixed: dict[str, Any] = {}
        from_variables = []
        for name, argument in definition.args.items():
            argument_node = given.get(name)
            if argument_node is not None and isinstance(argument_node.value, VariableNode):
                out_name = argument.out_name or name
                from_variables.append((out_name, argument_node.value.name.value, is_non_null_type(argument.type)))
                continue
            if argument_node is not None and _has_variables(argument_node.value):
                return None
            try:
                coerce_argument(fixed, node, name, argument, argument_node, NO_VARIABLES, None)
            except GraphQLError:
                return None
        return cls(fixed, tuple(from_variables))

    def values(self, variables: VariableValues) -> dict[str, Any] | None:
        """The argument values, as `get_argument_values` gives them; None where it must say what is wrong
        (or use a default in place of a variable not given)."""
        if not self.from_variables:
            return self.fixed
        values = dict(self.fixed)
        coerced = variables.coerced
        for out_name, variable, non_null in self.from_variables:
            value = coerced.get(variable, Undefined)
            if value is Undefined or (value is None and non_null):
                return None
            values[out_name] = value
        return values


class _VariableFinder(Visitor):
    found = False

    def enter_variable(self, *_: Any) -> None:
        self.found = True


def _has_variables(value: ValueNode) -> bool:
    finder = _VariableFinder()
    visit(value, finder)
    return finder.found
