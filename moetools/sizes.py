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
