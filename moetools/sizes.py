"""Byte sizes on the command line and in tables.

`32G` and `32GiB` are binary (GiB), as llama.cpp users mean VRAM; `32GB` is decimal; a bare number
is bytes. Tables print GiB/MiB; JSON always holds bytes.
"""

import re

from moetools.errors import UsageError

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(text):
    """Parse `32G`, `32GiB`, `32GB`, `1.5T`, `1048576` into bytes (int).

    Suffix without `B`, or with `iB`, is binary; with `B` alone it is decimal.
    """
    if isinstance(text, int):
        if text < 0:
            raise UsageError(f"size must not be negative: {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(f"cannot parse size {text!r} (examples: 32G, 32GiB, 32GB, 1073741824)")
    number, prefix, tail = match.groups()
    power = _POWERS[prefix.lower()]
    if power == 0 and tail:
        if tail.lower() != "b":
            raise UsageError(f"cannot parse size {text!r}")
        base = 1
    elif tail.lower() == "b":
        base = 1000
    else:
        base = 1024
    value = float(number) * (base**power)
    if "." not in number and power == 0:
        return int(number)
    return int(round(value))


# Below this a bare number is taken as a missing unit, not a size: no VRAM, RAM or bandwidth a
# llama.cpp user plans for is under one MiB, while `--vram 32` (meaning 32G) is a common slip.
IMPLAUSIBLE_BELOW = 1024**2


def _is_bare_number(text):
    return isinstance(text, int) or re.fullmatch(r"\s*[0-9]+(?:\.[0-9]*)?\s*", str(text)) is not None


def parse_capacity(text, what="size"):
    """Parse a memory size (`--vram`, `--ram`, ...) into bytes, refusing a bare number under 1 MiB.

    `what` names the option in the message: `--vram 32` -> "--vram 32 means 32 bytes: did you mean 32G?".
    """
    try:
        value = parse_size(text)
    except UsageError as err:
        raise UsageError(f"{what}: {err}") from None
    if value == 0:
        raise UsageError(f"{what} {str(text).strip()!r} must be a positive size")
    if _is_bare_number(text) and value < IMPLAUSIBLE_BELOW:
        raise UsageError(f"{what} {str(text).strip()} means {value} bytes: did you mean {str(text).strip()}G?")
    return value


def parse_rate(text, what="bandwidth"):
    """Parse a bandwidth (`25GB/s`, `25G`, `25000000000`) into bytes per second (int, > 0).

    A trailing `/s` is optional; a bare number under 1 MiB/s is refused as a missing unit, and 0 is refused
    because nothing could be read at all.
    """
    bare = re.sub(r"/s\s*$", "", str(text).strip(), flags=re.IGNORECASE)
    try:
        value = parse_size(bare)
    except UsageError as err:
        raise UsageError(f"{what}: {err}") from None
    if value <= 0:
        raise UsageError(f"{what} must be more than 0 bytes/s, not {str(text).strip()!r} (a bandwidth of 0 moves nothing)")
    if _is_bare_number(bare) and value < IMPLAUSIBLE_BELOW:
        raise UsageError(f"{what} {str(text).strip()} means {value} bytes/s: did you mean {bare}GB/s?")
    return value


DECIMAL_UNIT = re.compile(r"[kmgtp]b\s*$", re.IGNORECASE)  # 32GB, 1.5TB: powers of 1000


def describe_size(text, num_bytes):
    """How a size the user typed reads in a table: `32GB (29.80 GiB)` when the unit was decimal, else `32.00 GiB`."""
    shown = format_size(num_bytes)
    if isinstance(text, str) and DECIMAL_UNIT.search(text.strip()):
        return f"{text.strip()} ({shown})"
    return shown


def format_size(num_bytes):
    """Human size for tables: `31.50 GiB`, `512.0 MiB`, `4.0 KiB`, `17 B`."""
    n = float(num_bytes)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= 1024**4:
        return f"{sign}{n / 1024**4:.2f} TiB"
    if n >= 1024**3:
        return f"{sign}{n / 1024**3:.2f} GiB"
    if n >= 1024**2:
        return f"{sign}{n / 1024**2:.1f} MiB"
    if n >= 1024:
        return f"{sign}{n / 1024:.1f} KiB"
    return f"{sign}{int(n)} B"
