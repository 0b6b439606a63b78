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


def digits(text, low, high):
    """`text` as an int in low..high (0 <= low) when it is a decimal number written in ASCII digits alone:
    no sign, space, newline or other digit characters (Python's int() also reads "\u0663" and "١٢"), no
    leading zero but in "0", and at most as many digits as `high` has (so a 5000-digit text never
    reaches int()'s digit limit); else None."""
    if (not isinstance(text, str) or not text or not text.isascii() or not text.isdigit()
            or (text[0] == "0" and len(text) > 1) or len(text) > len(str(high))):
        return None
    number = int(text)
    return number if low <= number <= high else None
