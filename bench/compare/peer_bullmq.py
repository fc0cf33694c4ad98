#!/usr/bin/env python
"""BullMQ (Node) in the comparison: one ``Worker`` with ``concurrency`` 4 in one Node
process, ``queue.add(..., {delay})`` and ``queue.addBulk``, removeOnComplete.

The Node side is ``node/bench.mjs``; the adding is timed inside Node (no start-up cost).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402

NODE_DIR = HERE / "node"


class BullMQ:
    name = "bullmq"
    warmup_s = 3.0

    def setup(self, url: str, workdir: Path) -> None:
        self.url = url
        self.workdir = workdir
        self.node = shutil.which("node") or "node"

    def describe(self, concurrency: int) -> dict[str, str]:
        pkg = json.loads((NODE_DIR / "node_modules/bullmq/package.json").read_text())
        node = subprocess.run([self.node, "--version"], capture_output=True, text=True).stdout
        return {"version": "bullmq %s (Node %s)" % (pkg["version"], node.strip()),
                "settings": "new Worker(q, fn, {concurrency: %d}) in one Node process, "
                            "removeOnComplete" % concurrency,
                "one": "await queue.add('task', {due}, {delay})",
                "bulk": "queue.addBulk(1000 jobs, {delay})"}

    def _node(self, cmd: str, due_ms: list[int]) -> float:
        dues = self.workdir / "dues.json"
        dues.write_text(json.dumps(due_ms))
        out = subprocess.run([self.node, "bench.mjs", cmd, self.url, str(dues)], cwd=NODE_DIR,
                             capture_output=True, text=True, timeout=600, check=True)
        return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])

    def enqueue_one(self, due_ms: list[int]) -> float:
        return self._node("enqueue-one", due_ms)

    def enqueue_bulk(self, due_ms: list[int]) -> float:
        return self._node("enqueue-bulk", due_ms)

    def enqueue_due(self, due_ms: list[int]) -> None:
        self._node("enqueue-due", due_ms)

    def worker(self, concurrency: int) -> tuple[list[str], dict[str, str]]:
        return ([self.node, str(NODE_DIR / "bench.mjs"), "worker", self.url, str(concurrency)],
                {})


if __name__ == "__main__":
    sys.exit(common.main(BullMQ()))
