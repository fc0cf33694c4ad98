"""The benchmark's job functions (an installed app so the allow-list can name it)."""


def noop(*args: object) -> None:
    return None
