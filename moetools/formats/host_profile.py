"""Host profile: one machine described for device-fit, written by `moetools host`, read by
`device-fit --host FILE` (docs/host.md says how each figure is found).

    {"format": "moetools-host", "version": 1, "written_by": "moetools X", "hostname": "...", "os": "...",
     "gpus": [{"name", "backend", "vram_bytes", "vram_free_bytes", "bandwidth_bytes_per_s" (or null),
               "bandwidth_source", "pcie": {"gen", "width", "bytes_per_s", "source"} or null}],
     "cpu": {"model", "physical_cores", "logical_cpus", "threads", "threads_source", "numa_nodes", "sockets"},
     "ram": {"total_bytes", "available_bytes", "read_bytes_per_s", "read_source"},
     "disk": {"path", "read_bytes_per_s", "source"} or null,
     "calibration": null or an object}

`calibration` belongs to whoever fits it: this module checks only that it is an object or null, and
writes it back unchanged, as it does every key it does not know. Sizes in bytes, rates in bytes/s.
"""

import json

from moetools import atomic
from moetools.errors import FormatError
from moetools.formats.jsonio import display_name, load_json

FORMAT = "moetools-host"
VERSION = 1

NUMBER = (int, float)
_PCIE = {"gen": int, "width": int, "bytes_per_s": NUMBER, "source": str}
_GPU = {"name": str, "backend": str, "vram_bytes": int, "vram_free_bytes": int,
        "bandwidth_bytes_per_s": (NUMBER, None), "bandwidth_source": str, "pcie": (_PCIE, None)}
_CPU = {"model": str, "physical_cores": int, "logical_cpus": int, "threads": int, "threads_source": str,
        "numa_nodes": int, "sockets": int}
_RAM = {"total_bytes": int, "available_bytes": int, "read_bytes_per_s": NUMBER, "read_source": str}
_DISK = {"path": str, "read_bytes_per_s": NUMBER, "source": str}
SCHEMA = {"format": str, "version": int, "written_by": str, "hostname": str, "os": str, "gpus": [_GPU],
          "cpu": _CPU, "ram": _RAM, "disk": (_DISK, None), "calibration": (dict, None)}
_POSITIVE = {"cpu.threads", "cpu.physical_cores", "cpu.logical_cpus", "cpu.numa_nodes", "cpu.sockets",
             "ram.total_bytes", "ram.read_bytes_per_s", "disk.read_bytes_per_s", "gpus[].vram_bytes",
             "gpus[].bandwidth_bytes_per_s", "gpus[].pcie.bytes_per_s", "gpus[].pcie.width", "gpus[].pcie.gen"}


def _kind_name(kind):
    if kind is NUMBER:
        return "a number"
    if kind is dict:
        return "an object"
    return {str: "a string", int: "an integer"}[kind]


def _check(value, kind, where, name, generic):
    """Raise FormatError naming `where` (cpu.threads, gpus[0].pcie.gen) when value is not of `kind`."""
    null = ""
    if isinstance(kind, tuple) and kind and kind[-1] is None:  # nullable
        if value is None:
            return
        kind, null = kind[0], " or null"
    if isinstance(kind, dict):
        if not isinstance(value, dict):
            raise FormatError(name, f"{where or 'the profile'} must be an object{null}, not {json.dumps(value)[:40]}")
        for key, inner in kind.items():
            path = f"{where}.{key}" if where else key
            if key not in value:
                raise FormatError(name, f"missing field {path}")
            _check(value[key], inner, path, name, f"{generic}.{key}" if generic else key)
        return
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise FormatError(name, f"{where} must be a list{null}, not {json.dumps(value)[:40]}")
        for index, item in enumerate(value):
            _check(item, kind[0], f"{where}[{index}]", name, f"{generic}[]")
        return
    if isinstance(value, bool) or not isinstance(value, kind):
        raise FormatError(name, f"{where} must be {_kind_name(kind)}{null}, not {json.dumps(value)[:40]}")
    if generic in _POSITIVE and value <= 0:
        raise FormatError(name, f"{where} must be more than 0, not {value}")


def validate(doc, name="<host profile>"):
    """`doc` checked against the format: FormatError naming the file and the first field path that is
    missing or of the wrong type. Returns doc."""
    if not isinstance(doc, dict):
        raise FormatError(name, "not a host profile: a JSON object is expected")
    if doc.get("format") != FORMAT:
        raise FormatError(name, f"not a host profile: \"format\" is {json.dumps(doc.get('format'))[:40]}, "
                                f"not \"{FORMAT}\" (write one with `moetools host -o FILE`)")
    version = doc.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise FormatError(name, f"host profile version {version} is newer than this moetools reads ({VERSION})")
    _check(doc, SCHEMA, "", name, "")
    return doc


def load(path):
    """The profile at `path` (`-`: stdin) as a dict, validated; unknown keys and `calibration` kept as they are."""
    return validate(load_json(path, "host profile"), display_name(path))


def dumps(profile):
    """The profile as the JSON text a file holds (indented, a final newline)."""
    return json.dumps(profile, indent=2, allow_nan=False) + "\n"


def dump(profile, path):
    """Write `profile` (validated first) to `path` atomically: temp file, fsync, rename."""
    validate(profile, str(path))
    atomic.write_text(path, dumps(profile))
