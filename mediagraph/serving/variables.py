"""Variables of scalar and enum types coerced with what graphql-core would derive per request done once.

graphql-core's `get_variable_values` rebuilds each variable's signature (its type from
the document) on every request before it coerces the value. For an operation whose
variables are all of leaf types, a plan keeps the signatures and coerces each value
with the type's own `coerce_input_value`, as graphql-core does for a leaf. Anything
it would report (a missing or null required value, a value the scalar refuses) or
would fill in (a default) is left to graphql-core, which answers exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphql import GraphQLEnumType, GraphQLScalarType
from graphql.execution.get_variable_signature import GraphQLVariableSignature
from graphql.execution.values import VariableValues, VariableValueSource
from graphql.pyutils import Undefined


@dataclass(frozen=True, slots=True)
class LeafVariable:
    signature: GraphQLVariableSignature
    type: GraphQLScalarType | GraphQLEnumType
    non_null: bool
    has_default: bool


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
                if variable.non_null or variable.has_default:
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
