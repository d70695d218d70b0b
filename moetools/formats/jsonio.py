"""Reading JSON inputs (a path or `-` for stdin) with one-line errors."""

import json
import sys

from moetools.errors import FormatError


def display_name(path):
    """How an input is named in messages: `<stdin>` for `-`."""
    return "<stdin>" if str(path) == "-" else str(path)


def load_json(path, what):
    """Parse the JSON document at `path` (`-` reads stdin). Raises FormatError naming the file."""
    try:
        if str(path) == "-":
            text = sys.stdin.read()
            path = "<stdin>"
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
    except UnicodeDecodeError:
        raise FormatError(path, f"{what} is not UTF-8 text") from None
    if not text.strip():
        raise FormatError(path, f"empty {what}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise FormatError(path, f"{what} is not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})", offset=err.pos) from None


def require(doc, key, kind, path, what):
    """doc[key] checked to be an instance of `kind` (bool never counts as a number)."""
    if not isinstance(doc, dict):
        raise FormatError(path, f"{what} must be a JSON object")
    if key not in doc:
        raise FormatError(path, f"{what} has no {key!r}", key=key)
    value = doc[key]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise FormatError(path, f"{what} field {key!r} has the wrong type ({type(value).__name__})", key=key)
    return value
