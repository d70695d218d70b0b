"""Plan file (`GGML_MOE_PLAN_FILE`, JSON) for the serving fork, and the one writer every tool uses.

`version` 1, `budget_bytes` (host expert-cache bytes), `window_k` (tokens, default 8), `pin_list`
`[{"layer": L, "expert": E}, ...]` sorted by (layer, expert) and at most the pin ceiling (half the
budget in slots, the fork's rule), plus `device_budget_bytes` and `resident_tier` when known.

Consumers (CambrianTech/llama.cpp `ggml/src/ggml-moe-residency.hpp`):
- `parse_pager_plan` is a tolerant `strstr` scan, not a JSON parser: it takes the FIRST occurrence of
  `"budget_bytes"`, `"device_budget_bytes"`, `"window_k"` anywhere in the text and the pins between
  the first `[` after `"pin_list"` and the next `]`. So the writer puts the keys it knows first, in a
  fixed order, and every other key after them: a kept unknown key can never shadow a known one.
- `ResidencyCache::reload_plan_locked` re-reads the file only when `st_mtime` changes in whole seconds
  (and the size is > 0): two writes within one second would be seen as one, so the writer moves the
  new file's mtime at least one second past the old one.
- A device-backed (VRAM) cache takes its budget from `device_budget_bytes`, a host cache from
  `budget_bytes`: dropping either key switches that cache's governed budget off.

Every tool writes through `update_plan`: it reads the old plan, changes only the keys the tool owns,
keeps every other key (unknown ones too) and refuses to overwrite a file that is not a version-1
plan (FormatError, exit 2) rather than silently replacing what another program wrote.
"""

import json
import os
from dataclasses import dataclass, field

from moetools import atomic
from moetools.errors import FormatError, OutputError
from moetools.formats.jsonio import display_name, load_json, loads, require

PLAN_VERSION = 1
DEFAULT_WINDOW_K = 8

# Keys written first, in this order (see the module docstring: the fork's scan takes first matches).
KNOWN_KEYS = ("version", "budget_bytes", "device_budget_bytes", "window_k", "resident_tier", "cache_device", "pin_list")

# What each tool may change. Everything else in an existing plan is kept byte-for-value.
OWNED_KEYS = {
    "device-fit": frozenset({"budget_bytes", "device_budget_bytes", "resident_tier", "cache_device"}),
    "trace-tail": frozenset({"pin_list", "budget_bytes", "window_k"}),
}


def pin_ceiling(budget_bytes, expert_bytes):
    """How many (layer, expert) slots may be pinned: half the budget in slots (the fork's rule)."""
    if expert_bytes <= 0:
        return 0
    return int(budget_bytes // expert_bytes) // 2


@dataclass
class Plan:
    budget_bytes: int
    pin_list: list = field(default_factory=list)  # [(layer, expert)]
    window_k: int = DEFAULT_WINDOW_K
    device_budget_bytes: int = None
    resident_tier: str = None
    extra: dict = field(default_factory=dict)  # keys moetools does not know, kept on rewrite

    def to_doc(self):
        doc = {
            "version": PLAN_VERSION,
            "budget_bytes": int(self.budget_bytes),
            "window_k": int(self.window_k),
            "pin_list": pins_doc(self.pin_list),
        }
        if self.device_budget_bytes is not None:
            doc["device_budget_bytes"] = int(self.device_budget_bytes)
        if self.resident_tier is not None:
            doc["resident_tier"] = self.resident_tier
        doc.update({key: value for key, value in self.extra.items() if key not in doc})
        return ordered(doc)


def pins_doc(pins):
    """[(layer, expert)] -> the wire list, sorted by (layer, expert), duplicates dropped."""
    return [{"layer": int(layer), "expert": int(expert)} for layer, expert in sorted(set(pins))]


def ordered(doc):
    """`doc` with the known keys first (in KNOWN_KEYS order), then the others as they came."""
    head = {key: doc[key] for key in KNOWN_KEYS if key in doc}
    head.update((key, value) for key, value in doc.items() if key not in head)
    return head


def clamp_pins(pins, budget_bytes, expert_bytes):
    """The first pins (in the caller's priority order) that fit under the pin ceiling."""
    return list(pins)[: pin_ceiling(budget_bytes, expert_bytes)]


def existing_plan_doc(path):
    """The JSON object of the plan at `path`, or None when there is no file.

    A file that is not JSON, not an object, or not version 1 is a FormatError: a writer must not
    replace what it cannot read back (another program's file, or a future plan version)."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return None
    if os.path.isdir(path):
        raise FormatError(path, "is a folder, not a plan file")
    what = "existing plan file"
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as err:
        raise FormatError(path, f"cannot read the existing plan file: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(path, "existing plan file is not UTF-8 JSON; refusing to overwrite it") from None
    if not text.strip():
        raise FormatError(path, "existing plan file is empty (not a plan); refusing to overwrite it")
    try:
        doc = loads(text, path, what)
    except FormatError as err:
        raise FormatError(path, f"{err.problem}; refusing to overwrite it", offset=err.offset) from None
    if not isinstance(doc, dict):
        raise FormatError(path, "existing plan file is not a JSON object; refusing to overwrite it")
    version = doc.get("version")
    if version != PLAN_VERSION or isinstance(version, bool):
        raise FormatError(path, f"existing plan file has version {json.dumps(version)}, not {PLAN_VERSION}; "
                          "refusing to overwrite it", key="version")
    return doc


def update_plan(path, owner, changes):
    """Write `changes` (a dict of keys `owner` owns) into the plan at `path`; returns the document written.

    Reads the old plan first and keeps every key not in `changes` (unknown ones too). A new file gets
    the fields the fork's daemon requires (`version`, `budget_bytes`, `window_k`, `pin_list`).
    `changes["pin_list"]` is a list of (layer, expert). Written atomically; the new mtime is at least
    one whole second after the old one (the fork polls `st_mtime` in seconds)."""
    owned = OWNED_KEYS[owner]
    stray = set(changes) - owned
    if stray:
        raise ValueError(f"{owner} does not own plan keys {sorted(stray)}")
    path = os.fspath(path)
    old = existing_plan_doc(path)
    old_mtime = os.stat(path).st_mtime if old is not None else None
    doc = dict(old) if old is not None else {"version": PLAN_VERSION, "budget_bytes": 0,
                                             "window_k": DEFAULT_WINDOW_K, "pin_list": []}
    for key, value in changes.items():
        if value is None:
            continue
        if key == "pin_list":
            value = pins_doc(value)
        elif key not in ("resident_tier", "cache_device"):
            value = int(value)
        doc[key] = value
    doc = ordered(doc)
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n"
    late = None
    with atomic.atomic_write(path, "w") as handle:
        handle.write(text)
        handle.flush()
        late = _advance_mtime(handle.fileno(), old_mtime)
    if late is not None:  # no utime on a file descriptor (Windows): set it on the renamed file
        try:
            os.utime(path, (late, late))
        except OSError as err:
            raise OutputError(f"{path}: cannot set the plan's mtime: {err.strerror or err}") from None
    return doc


def update_plan_locked(path, owner, changes, on_wait=None):
    """`update_plan` under the plan folder's lock (moetools.locking.folder_lock, waited for at most
    PLAN_WAIT_SECONDS): device-fit and trace-tail both read-modify-write the plan, so without it one
    tool's keys could be lost to the other's concurrent write. Removes stale plan temporaries of dead
    runs first. Returns the document written."""
    from moetools.atomic import check_output_folder
    from moetools.locking import PLAN_WAIT_SECONDS, folder_lock, remove_stale_temps

    check_output_folder(path, "--plan")  # the lock would create a missing folder tree
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    with folder_lock(folder, tool=owner, wait=True, timeout=PLAN_WAIT_SECONDS, on_wait=on_wait):
        remove_stale_temps(folder)
        return update_plan(path, owner, changes)


def _advance_mtime(fd, old_mtime):
    """Give the new file (before its rename) an mtime whose whole seconds differ from the old
    plan's: one second past it when the clock has not yet moved past that second. Returns the
    mtime still to set by name when this platform cannot set it on a descriptor, else None."""
    if old_mtime is None:
        return None
    if int(os.fstat(fd).st_mtime) > int(old_mtime):
        return None
    target = int(old_mtime) + 1
    if os.utime in os.supports_fd:
        os.utime(fd, (target, target))
        return None
    return target


def plan_mtime(path):
    """The plan's st_mtime in whole seconds (what the fork compares), or None without a file."""
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def active_cache_budget(doc):
    """The byte budget of the fork's one expert cache as a plan states it: `device_budget_bytes`
    when device-fit put the cache in VRAM (`cache_device` "vram"), else `budget_bytes` (the fork's
    `reload_plan_locked` picks the same key by whether its cache is device-backed)."""
    if doc.get("cache_device") == "vram" and isinstance(doc.get("device_budget_bytes"), int):
        return doc["device_budget_bytes"]
    budget = doc.get("budget_bytes")
    return budget if isinstance(budget, int) and not isinstance(budget, bool) else 0


def read_plan(path):
    what = "plan file"
    doc = load_json(path, what)
    name = display_name(path)
    version = require(doc, "version", int, name, what)
    if version != PLAN_VERSION:
        raise FormatError(name, f"plan version {version} is not supported (expected {PLAN_VERSION})", key="version")
    budget = require(doc, "budget_bytes", int, name, what)
    pins = []
    for index, entry in enumerate(require(doc, "pin_list", list, name, what)):
        layer = require(entry, "layer", int, name, f"pin_list[{index}]")
        expert = require(entry, "expert", int, name, f"pin_list[{index}]")
        pins.append((layer, expert))
    return Plan(
        budget_bytes=budget,
        pin_list=pins,
        window_k=doc.get("window_k", DEFAULT_WINDOW_K),
        device_budget_bytes=doc.get("device_budget_bytes"),
        resident_tier=doc.get("resident_tier"),
        extra={key: value for key, value in doc.items() if key not in KNOWN_KEYS},
    )


def write_plan(path, plan, owner="device-fit"):
    """Compatibility wrapper: update the keys `owner` owns from `plan` (see update_plan)."""
    values = {"budget_bytes": plan.budget_bytes, "pin_list": plan.pin_list, "window_k": plan.window_k,
              "device_budget_bytes": plan.device_budget_bytes, "resident_tier": plan.resident_tier}
    return update_plan(path, owner, {key: value for key, value in values.items() if key in OWNED_KEYS[owner]})
