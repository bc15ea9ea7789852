from mediagraph.db.migrations.env_common import run
from mediagraph.db.models import main_metadata

run(main_metadata)
