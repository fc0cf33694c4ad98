"""Exit 0 when a PostgreSQL server answers on PGHOST:PGPORT (default 127.0.0.1:5432)."""

import os
import sys

try:
    import psycopg
except ImportError:
    sys.exit(1)
try:
    psycopg.connect(host=os.environ.get("PGHOST", "127.0.0.1"),
                    port=os.environ.get("PGPORT", "5432"), user=os.environ.get("PGUSER", "postgres"),
                    dbname=os.environ.get("PGDATABASE", "postgres"), connect_timeout=3).close()
except Exception:
    sys.exit(1)
sys.exit(0)
