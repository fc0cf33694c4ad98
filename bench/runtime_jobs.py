"""Job functions of ``bench/runtime.py`` (allowed by ``runtime_settings``)."""


def spin(iterations: int) -> int:
    """Pure Python work: ``iterations`` rounds of integer arithmetic (holds the GIL)."""
    total = 0
    for i in range(iterations):
        total = (total + i * i) % 1_000_003
    return total
