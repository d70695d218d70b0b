"""Reading JSON inputs (a path or `-` for stdin) with one-line errors."""

import json
import sys

from moetools.errors import FormatError


def display_name(path):
    """How an input is named in messages: `<stdin>` for `-`."""
    return "<stdin>" if str(path) == "-" else str(path)


def read_text(path, what):
    """The text of an input file (`-` reads stdin). Undecodable text is a FormatError naming the file."""
    try:
        if str(path) == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError:
        raise FormatError(display_name(path), f"{what} is not UTF-8 text") from None


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def loads(text, path, what):
    """Parse one JSON document; NaN and Infinity (which Python's json accepts) are refused, since
    every output is written with allow_nan=False."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise FormatError(path, f"{what} is not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})", offset=err.pos) from None
    except ValueError as err:
        raise FormatError(path, f"{what} is not valid JSON: {err}") from None


def load_json(path, what):
    """Parse the JSON document at `path` (`-` reads stdin). Raises FormatError naming the file."""
    text = read_text(path, what)
    if not text.strip():
        raise FormatError(display_name(path), f"empty {what}")
    return loads(text, display_name(path), what)


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
