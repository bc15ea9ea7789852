"""Parsed, validated documents cached by query text: each distinct document is checked once.

Parsing enforces the token limit; validation runs graphql-core's rules, Strawberry's
own, and the depth and alias limits; the cost limit (serving/cost.py) is analysed once
per document and operation, and checked per request against its variables. Only documents that pass are cached, so a
stream of invalid texts cannot push valid ones out; the cache holds at most
`document_cache_size` entries, least recently used out first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from graphql import DocumentNode, GraphQLError, GraphQLSchema, OperationDefinitionNode, parse, specified_rules
from graphql.validation import ASTValidationRule
from strawberry.extensions import SchemaExtension
from strawberry.extensions.max_aliases import create_validator as max_aliases_rule
from strawberry.extensions.query_depth_limiter import create_validator as max_depth_rule
from strawberry.schema.exceptions import CannotGetOperationTypeError
from strawberry.schema.schema import validate_document
from strawberry.types.graphql import OperationType

from mediagraph.observability import metrics
from mediagraph.serving.cost import CostFormula, cost_formula, report, too_complex, wants_report
from mediagraph.serving.plans import OperationPlan, compile_operation
from mediagraph.settings import Settings


@dataclass(frozen=True, slots=True)
class Operation:
    """The operation a request runs: its name as graphql-core needs it, and its type."""

    name: str | None
    type: OperationType


@dataclass(frozen=True, slots=True)
class PreparedDocument:
    document: DocumentNode
    errors: list[GraphQLError]
    operations: dict[str, OperationType]
    first: Operation | None
    # Execution plans by operation name, compiled on first use; None where graphql-core runs it.
    plans: dict[str | None, OperationPlan | None] = field(default_factory=dict)
    # Cost formulas by operation name, analysed on first use (serving/cost.py).
    costs: dict[str | None, CostFormula] = field(default_factory=dict)

    @classmethod
    def of(cls, document: DocumentNode, errors: list[GraphQLError]) -> PreparedDocument:
        definitions = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        operations = {d.name.value: OperationType(d.operation.value) for d in definitions if d.name is not None}
        first = definitions[0] if definitions else None
        return cls(
            document=document,
            errors=errors,
            operations=operations,
            first=Operation(first.name.value if first.name else None, OperationType(first.operation.value))
            if first is not None
            else None,
        )

    def plan(self, schema: GraphQLSchema, operation: Operation) -> OperationPlan | None:
        if operation.name not in self.plans:
            self.plans[operation.name] = compile_operation(schema, self.document, operation.name)
        return self.plans[operation.name]

    def cost(self, schema: GraphQLSchema, operation_name: str | None) -> CostFormula:
        if operation_name not in self.costs:
            self.costs[operation_name] = cost_formula(schema, self.document, operation_name)
        return self.costs[operation_name]

    def operation(self, name: str | None) -> Operation:
        """The operation `name` picks, as Strawberry picks it: without a name, the first one."""
        if name is None:
            if self.first is None:
                raise CannotGetOperationTypeError(None)
            return self.first
        operation_type = self.operations.get(name)
        if operation_type is None:
            raise CannotGetOperationTypeError(name)
        return Operation(name, operation_type)


class DocumentCache:
    def __init__(self, schema: GraphQLSchema, settings: Settings) -> None:
        self.schema = schema
        self.max_tokens = settings.max_query_tokens
        self.max_size = settings.document_cache_size
        self.max_cost = settings.max_query_cost
        self.page_cap = settings.max_page_size
        # The limit rules are classes built once: a rule set that changes per
        # request would make every validation a cache miss.
        self.rules: tuple[type[ASTValidationRule], ...] = (
            *specified_rules,
            max_depth_rule(settings.max_query_depth, None),
            max_aliases_rule(settings.max_query_aliases),
        )
        self._entries: OrderedDict[str, PreparedDocument] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def cached(self, query: str) -> PreparedDocument | None:
        entry = self._entries.get(query)
        if entry is not None:
            self._entries.move_to_end(query)
        return entry

    def priced(
        self, prepared: PreparedDocument, operation_name: str | None, variables: dict[str, Any] | None
    ) -> tuple[int, GraphQLError | None]:
        """The operation's cost with these variables, and the error to answer if it is over the limit."""
        cost = prepared.cost(self.schema, operation_name).evaluate(variables, cap=self.page_cap)
        return cost, (too_complex(cost, self.max_cost) if cost > self.max_cost else None)

    def cost_of(self, query: str | None, operation_name: str | None, variables: dict[str, Any] | None) -> int | None:
        """The cost `priced` gave a cached document's operation; None for a text not cached."""
        prepared = self._entries.get(query) if query is not None else None
        if prepared is None or prepared.errors:
            return None
        return prepared.cost(self.schema, operation_name).evaluate(variables, cap=self.page_cap)

    def prepare(self, query: str) -> PreparedDocument:
        """The document for `query`, parsed and validated; raises GraphQLError on a syntax or token-limit error."""
        entry = self.cached(query)
        metrics.count_document_cache(hit=entry is not None)
        if entry is not None:
            return entry
        document = parse(query, max_tokens=self.max_tokens)
        prepared = PreparedDocument.of(document, validate_document(self.schema, document, self.rules))
        if not prepared.errors:
            self._entries[query] = prepared
            if len(self._entries) > self.max_size:
                self._entries.popitem(last=False)
        return prepared


class CachedDocuments(SchemaExtension):
    """Strawberry's own path (uploads, websockets) served from the schema's document cache.

    The HTTP fast path reads the same cache, so a document is parsed, validated and
    checked against the limits once, whichever path first sees it.
    """

    def __init__(self) -> None:
        self.prepared: PreparedDocument | None = None
        self.cost: int | None = None

    def on_operation(self) -> Iterator[None]:
        # Should the cache refuse the text, Strawberry parses it itself, under the same limit.
        self.execution_context.parse_options["max_tokens"] = self.execution_context.schema.documents.max_tokens  # type: ignore[attr-defined]
        yield

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.query is not None and context.graphql_document is None:
            try:
                self.prepared = context.schema.documents.prepare(context.query)  # type: ignore[attr-defined]
            except GraphQLError:
                # Left to Strawberry's parse, which reports the error the usual way.
                self.prepared = None
            else:
                context.graphql_document = self.prepared.document
        yield

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        if self.prepared is not None:
            context.pre_execution_errors = list(self.prepared.errors)
            if not self.prepared.errors:
                documents: DocumentCache = context.schema.documents  # type: ignore[attr-defined]
                self.cost, refused = documents.priced(self.prepared, context.operation_name, context.variables)
                if refused is not None:
                    context.pre_execution_errors = [refused]
        yield

    def get_results(self) -> dict[str, Any]:
        if self.cost is None or not wants_report(self.execution_context.operation_extensions):
            return {}
        return report(self.cost, self.execution_context.schema.documents.max_cost)  # type: ignore[attr-defined]
