"""Start the PostgreSQL + pgvector server the tests use, from any folder, to try the server backend.

    python /path/to/evolve/scripts/postgres.py [DATA_DIR] [--durable]

It prints a ``postgresql+psycopg://`` URL for ``MemoryStore``, ``--db`` or a spec's ``[run] database``,
and runs until Ctrl-C. A throwaway test server: durability is off unless ``--durable`` (tests/support/postgres.py).
Use the Python of the environment Evolve's ``dev`` extra is installed in (``.venv/bin/python``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests/ is not an installed package

from tests.support.postgres import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
