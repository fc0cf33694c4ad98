"""Which Python the executors start: ``build_session`` decides it before the context does."""

from __future__ import annotations

import sys

import pytest

from django_delayq.spark.session import PYTHON_CONF, executor_python


def test_spark_pyspark_python_in_conf_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    assert executor_python({PYTHON_CONF: "./env/bin/python"}) == "./env/bin/python"
    import os

    assert os.environ["PYSPARK_PYTHON"] == "./env/bin/python"


def test_this_interpreter_for_any_master_when_nothing_is_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert executor_python({"spark.master": "spark://10.0.0.5:7077"}) == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/venv/bin/python")
    assert executor_python(None) == "/opt/venv/bin/python"  # an explicit variable is kept
