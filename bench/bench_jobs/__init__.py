"""The benchmark's job functions (an installed app so the allow-list can name it)."""


def noop(*args: object) -> None:
    return None


def sleep(seconds: float) -> None:
    """A job that waits (a slow job that uses no CPU)."""
    import time

    time.sleep(seconds)
