"""Django's own ``tests/tasks`` run against the DelayQ backend (scripts/tasks_conformance.py)."""
