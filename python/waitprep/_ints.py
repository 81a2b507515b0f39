"""The integer checks every module makes on its arguments, written once.

A bool is an int in Python but never a count, a slot or a generation here, so each check refuses it.
"""

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_in(value: object, low: int, high: int) -> bool:
    """An int (not a bool) in ``[low, high]``."""
    return is_int(value) and low <= value <= high  # type: ignore[operator]


def is_u32(value: object) -> bool:
    """An int (not a bool) in ``[0, 2^32-1]``."""
    return int_in(value, 0, U32_MAX)


def is_u64(value: object) -> bool:
    """An int (not a bool) in ``[0, 2^64-1]``."""
    return int_in(value, 0, U64_MAX)
