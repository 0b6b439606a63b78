"""Reading a file named on a script's command line (sass_mix.py, stall_lines.py, the tune logs that
tunelog.py reads): only a regular file, since a FIFO or a device would block the read or never end it."""
import os


def why_not_regular(path):
    """None when `path` is a regular file; else the reason it is refused."""
    return None if os.path.isfile(path) else f"{path} is not a regular file"


def read_text(path, newline=None):
    """(the text of `path`, None), or (None, why it was not read). Bytes that are not UTF-8 read as U+FFFD."""
    why = why_not_regular(path)
    if why:
        return None, why
    try:
        with open(path, encoding="utf-8", errors="replace", newline=newline) as stream:
            return stream.read(), None
    except OSError as error:
        return None, f"cannot read {path}: {error.strerror}"
