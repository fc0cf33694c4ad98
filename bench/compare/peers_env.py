"""The peers' own virtualenv (``.venv-peers``) and BullMQ's ``node_modules``, made on demand."""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = ROOT / ".venv-peers"
REQUIREMENTS = HERE / "requirements-peers.txt"
NODE_DIR = HERE / "node"

logger = logging.getLogger(__name__)


def peers_python() -> Path:
    """Create or update ``.venv-peers`` from requirements-peers.txt; return its python."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".requirements.sha1"
    want = hashlib.sha1(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == want:
        return python
    if not python.exists():
        logger.info("creating %s", VENV)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
                   check=True)
    stamp.write_text(want)
    return python


def bullmq_ready() -> str | None:
    """None when BullMQ can run (npm install done), else why it cannot."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "node/npm not installed"
    if (NODE_DIR / "node_modules" / "bullmq" / "package.json").exists():
        return None
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"],
                          cwd=NODE_DIR, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return "npm install failed: %s" % done.stderr.strip()[-300:]
    return None
