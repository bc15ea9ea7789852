from mediagraph.db.migrations.env_common import run
from mediagraph.db.models import shard_metadata

run(shard_metadata)
