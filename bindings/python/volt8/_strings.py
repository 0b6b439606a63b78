"""Python strings to C strings: C stops reading at the first NUL, so a string holding one would be
taken for its shorter prefix ('ck\0/x' as 'ck'); such a string is refused instead."""
import os

from .errors import InvalidArgumentError


def _checked(encoded, value, name):
    if b"\0" in encoded:
        raise InvalidArgumentError(f"{name}: {value!r} holds a NUL character, which a C string cannot carry")
    return encoded


def c_string(value, name):
    """UTF-8 bytes of a str argument (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name}: {value!r} is not a string")
    return _checked(value.encode(), value, name)


def c_path(value, name):
    """File-system bytes of a str, bytes or os.PathLike argument (None stays None)."""
    if value is None:
        return None
    try:
        encoded = os.fsencode(value)
    except TypeError:
        raise InvalidArgumentError(f"{name}: {value!r} is not a path") from None
    return _checked(encoded, value, name)
