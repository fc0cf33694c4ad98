"""The example shop end to end: embedded Redis, migrations, worker, web server, HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_example_shop_closes_an_unpaid_order(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DELAYQ_REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["SHOP_DB"] = str(tmp_path / "shop.sqlite3")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "example_project" / "run.py"), "--smoke",
         "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "smoke: the order was closed by the worker" in proc.stdout
    assert "embedded Redis: unix://" in proc.stdout
