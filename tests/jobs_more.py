"""Functions that tests try (and fail) to schedule, and a class-level one."""


class Holder:
    @staticmethod
    def static(x: int) -> int:
        return x

    def method(self) -> None:
        return None


def make_closure():  # type: ignore[no-untyped-def]
    def inner() -> None:
        return None

    return inner


not_a_function = 42
