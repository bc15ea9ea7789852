"""The logic behind every field, one module per domain.

Resolvers use `schema.relay` (page sizes) while each schema module imports its
resolvers, so the schema package loads first whichever side is imported first.
"""

import mediagraph.schema  # noqa: F401
