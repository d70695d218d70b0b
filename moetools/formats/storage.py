"""Where the serving daemon looks for a model's resident tiers, and the `resident-bytes` file.

The rules are the daemon's (CambrianTech/continuum, the model registry of continuum-core):
- `storage_root`: `CONTINUUM_STORAGE_PATH` when set and not blank, else a
  `CONTINUUM_STORAGE_PATH=` line of `~/.continuum/config.env`, else `~/.continuum` (home = `HOME`,
  else `USERPROFILE`).
- `device_fit_cache_dir(model_id)`: `<storage root>/device-fit/<slug>/`, slug = the model id with
  every ASCII letter or digit lowercased and every other character (one for one, runs are not
  collapsed) replaced by `-`. The folder is read, not walked: tiers must sit directly in it.
- `resolve_device_fit_override`: the folder's main-model GGUF with the newest mtime (ties by path;
  names containing `mmproj` or starting `mtp-` excluded) is the override, priced by the plain-text
  integer in `resident-bytes` beside it; the division actuator (`division_actuation.rs`
  `discover_resident_tiers`) lists every `*.resident.json` there whose GGUF (the name without the
  suffix) exists.
"""

import os

from moetools.errors import FormatError

RESIDENT_BYTES_FILE = "resident-bytes"
MANIFEST_SUFFIX = ".resident.json"  # = resident_manifest.SUFFIX (that module imports dataclasses)
ENV_STORAGE = "CONTINUUM_STORAGE_PATH"


def home_folder(env=None):
    env = os.environ if env is None else env
    return env.get("HOME") or env.get("USERPROFILE") or None


def storage_root(env=None):
    """The daemon's storage root (see the module docstring), resolved the way the daemon does."""
    env = os.environ if env is None else env
    value = env.get(ENV_STORAGE, "")
    if value.strip():
        return value
    home = home_folder(env)
    if home is None:
        return os.path.join("/tmp", ".continuum")
    try:
        with open(os.path.join(home, ".continuum", "config.env"), encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.strip()
                if line.startswith(ENV_STORAGE + "="):
                    found = line[len(ENV_STORAGE) + 1:].strip()
                    if found:
                        return found
    except OSError:
        pass
    return os.path.join(home, ".continuum")


def device_fit_slug(model_id):
    """The daemon's folder name for `model_id`: ASCII alphanumerics lowercased, anything else `-`."""
    return "".join(c.lower() if c.isascii() and c.isalnum() else "-" for c in model_id)


def device_fit_dir(model_id, root=None):
    """`<storage root>/device-fit/<slug>/` for `model_id` (`root` overrides the storage root)."""
    return os.path.join(storage_root() if root is None else root, "device-fit", device_fit_slug(model_id))


def is_main_model_gguf(name):
    low = name.lower()
    return low.endswith(".gguf") and "mmproj" not in low and not low.startswith("mtp-")


def daemon_override_gguf(folder):
    """The GGUF the daemon takes as the folder's override: newest mtime, ties by path; None if none."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    paths = [os.path.join(folder, name) for name in names if is_main_model_gguf(name)]
    paths = [path for path in paths if os.path.isfile(path)]
    if not paths:
        return None
    return min(paths, key=lambda path: (-os.stat(path).st_mtime_ns, path))


def make_override(folder, gguf_path):
    """Make `gguf_path` the folder's newest GGUF (so the daemon picks it), by moving its mtime
    just past every other GGUF's there. Returns the path the daemon now picks."""
    others = [os.path.join(folder, name) for name in os.listdir(folder) if is_main_model_gguf(name)]
    newest = max((os.stat(path).st_mtime_ns for path in others if os.path.isfile(path)), default=0)
    mine = os.stat(gguf_path)
    if daemon_override_gguf(folder) != os.path.join(folder, os.path.basename(gguf_path)):
        stamp = newest + 1_000_000_000  # one second past the newest: unambiguous on coarse clocks too
        os.utime(gguf_path, ns=(mine.st_atime_ns, stamp))
    return daemon_override_gguf(folder)


def write_resident_bytes(folder, resident_bytes):
    """The plain-text `resident-bytes` file the daemon prices its override by (digits, newline)."""
    from moetools import atomic

    path = os.path.join(folder, RESIDENT_BYTES_FILE)
    atomic.write_text(path, f"{int(resident_bytes)}\n")
    return path


def read_resident_bytes(folder):
    """The integer in the folder's `resident-bytes`, None when there is none. A file the daemon
    could not parse (it trims and parses a u64) is a FormatError."""
    path = os.path.join(folder, RESIDENT_BYTES_FILE)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise FormatError(path, f"cannot read: {err.strerror or err}") from None
    digits = text[1:] if text.startswith("+") else text
    if not digits.isascii() or not digits.isdigit():
        raise FormatError(path, f"not a whole number of bytes: {text[:40]!r} (the daemon ignores this override)")
    return int(digits)
