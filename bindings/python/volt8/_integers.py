"""Integer arguments: any integer type (int, numpy's np.int64 and np.uint64, a torch integer scalar:
whatever has __index__), never a bool or a float, and within the range the C side takes."""
import operator

from .errors import InvalidArgumentError


def integer(value, name, low, high, what=None):
    """`value` as an int in low..high; else InvalidArgumentError "NAME: VALUE is not WHAT" (default
    WHAT: "an integer in LOW..HIGH")."""
    what = what or f"an integer in {low}..{high}"
    if not is_integer(value):
        raise InvalidArgumentError(f"{name}: {value!r} is {'a bool, ' if _is_bool(value) else ''}not {what}")
    number = operator.index(value)
    if not low <= number <= high:
        raise InvalidArgumentError(f"{name}: {value!r} is not {what}")
    return number


def _is_bool(value):
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", None) == "b"


def is_integer(value):
    """True when `value` reads as one integer (not a bool), as `integer` takes it."""
    if _is_bool(value):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True
