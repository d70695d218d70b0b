"""Plan file (`GGML_MOE_PLAN_FILE`, JSON) for the serving fork, and the one writer every tool uses.

`version` 1, `budget_bytes` (host expert-cache bytes), `window_k` (tokens, default 8), `pin_list`
`[{"layer": L, "expert": E}, ...]` sorted by (layer, expert) and at most the pin ceiling (half the
budget in slots, the fork's rule), plus `device_budget_bytes` and `resident_tier` when known.

Tiers (CambrianTech/continuum core/expert-pager-policy/src/plan_file.rs `PlanPin.tier`, the
controller's `BanditPlanController::write_tiered_plan`, fixture `fixtures/plan-tiered.json`): a pin
may carry `"tier": N` and the plan a top-level `"default_tier": N`, each an INDEX into the container's
precision ladder (u32, 0 = sharpest; absent = the container default), never a quant name. The pins
are stamped with the pin tier, the unpinned tail is fetched at the default tier. moetools also keeps
its own `pin_tier` (the tier new pins get) so a pin_list rewrite keeps the tier the user asked for.

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
KNOWN_KEYS = ("version", "budget_bytes", "device_budget_bytes", "window_k", "resident_tier", "cache_device", "pin_list",
              "default_tier", "pin_tier")
TIER_KEYS = ("default_tier", "pin_tier")

# What each tool may change. Everything else in an existing plan is kept byte-for-value.
OWNED_KEYS = {
    "device-fit": frozenset({"budget_bytes", "device_budget_bytes", "resident_tier", "cache_device", *TIER_KEYS}),
    "trace-tail": frozenset({"pin_list", "budget_bytes", "window_k", *TIER_KEYS}),
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
    default_tier: int = None
    pin_tier: int = None
    pin_tiers: list = field(default_factory=list)  # per pin of pin_list: its tier index or None
    extra: dict = field(default_factory=dict)  # keys moetools does not know, kept on rewrite

    def to_doc(self):
        doc = {
            "version": PLAN_VERSION,
            "budget_bytes": int(self.budget_bytes),
            "window_k": int(self.window_k),
            "pin_list": pins_doc([(*pin, tier) for pin, tier in zip(self.pin_list, self.pin_tiers)]
                                 if self.pin_tiers else self.pin_list),
        }
        for key in TIER_KEYS:
            if getattr(self, key) is not None:
                doc[key] = int(getattr(self, key))
        if self.device_budget_bytes is not None:
            doc["device_budget_bytes"] = int(self.device_budget_bytes)
        if self.resident_tier is not None:
            doc["resident_tier"] = self.resident_tier
        doc.update({key: value for key, value in self.extra.items() if key not in doc})
        return ordered(doc)


def pins_doc(pins):
    """[(layer, expert)] or [(layer, expert, tier or None)] -> the wire list, sorted by (layer,
    expert), duplicates dropped (the first one's tier kept). A pin with a tier is written as the
    daemon's serde writes a tiered PlanPin, `{"layer": L, "expert": E, "tier": T}`; one without,
    byte for byte the v1 pin (plan_file.rs: serde skips a None tier)."""
    tiers = {}
    for pin in pins:
        tiers.setdefault((int(pin[0]), int(pin[1])), pin[2] if len(pin) > 2 else None)
    doc = []
    for (layer, expert), tier in sorted(tiers.items()):
        entry = {"layer": layer, "expert": expert}
        if tier is not None:
            entry["tier"] = int(tier)
        doc.append(entry)
    return doc


def _ladder_text(labels):
    return ", ".join(f"{index} {label}" for index, label in enumerate(labels))


def tier_index(value, what, path, key, ladder=None):
    """A plan's tier as the ladder index the daemon reads (plan_file.rs: u32). `what` names it in
    messages (a pin, or the key itself: `default_tier`); `ladder`: the container's tier labels, when
    one is known: an index must be inside it, and a label (another writer's) is matched to its index
    by moetools.tierlabels. Raises FormatError (exit 2) naming `what` and `key`."""
    from moetools.tierlabels import describe_unknown, find_tier, known_label, matching_tiers

    said = f"{what} {json.dumps(value)}" if what == key else f"{what} has tier {json.dumps(value)}"
    outside = f"{said}, outside the container's ladder ({_ladder_text(ladder)})" if ladder is not None else ""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise FormatError(path, f"{said}: a tier is a ladder index, 0 or more", key=key)
        if ladder is not None and value >= len(ladder):
            raise FormatError(path, outside.replace(", outside", " is outside", 1) if what == key else outside, key=key)
        return value
    if not isinstance(value, str):
        raise FormatError(path, f"{said}: a tier is a ladder index (0 = sharpest)", key=key)
    if not known_label(value) and (ladder is None or not matching_tiers(value, ladder)):
        raise FormatError(path, f"{what}: {describe_unknown(value)}", key=key)
    if ladder is None:
        raise FormatError(path, f"{said} names a tier; the daemon reads a ladder index (plan_file.rs u32): "
                                "give --container DIR to turn the name into its index", key=key)
    index = find_tier(value, ladder)
    if index is None:
        several = matching_tiers(value, ladder)
        if several:
            raise FormatError(path, f"{said} matches tiers {several} of the container's ladder "
                                    f"({_ladder_text(ladder)}): give the index", key=key)
        raise FormatError(path, outside.replace(", outside", " is outside", 1) if what == key else outside, key=key)
    return index


def plan_tiers(doc, path, ladder=None):
    """(per-pin tier index or None, default_tier or None, pin_tier or None) of a plan document, each
    checked by tier_index (a label resolved against `ladder`). Raises FormatError (exit 2) naming the
    first pin or key whose tier is outside the ladder, or not a tier."""
    path = display_name(path)
    pins = doc.get("pin_list") if isinstance(doc.get("pin_list"), list) else []
    tiers = []
    for index, pin in enumerate(pins):
        if not isinstance(pin, dict) or pin.get("tier") is None:
            tiers.append(None)
            continue
        what = f"pin_list[{index}] (layer {pin.get('layer')}, expert {pin.get('expert')})"
        tiers.append(tier_index(pin["tier"], what, path, f"pin_list[{index}].tier", ladder))
    top = [tier_index(doc[key], key, path, key, ladder) if doc.get(key) is not None else None for key in TIER_KEYS]
    return tiers, top[0], top[1]


def uniform_pin_tier(tiers):
    """The tier every pin carries, when they all carry the same one (the daemon's driver stamps
    every pin with --pin-tier); else None."""
    found = set(tiers)
    return found.pop() if len(found) == 1 and None not in found else None


def _tiered_pins(doc, path, new_pins, pin_tier, ladder):
    """The pin list to write with each pin's tier: `pin_tier` (--pin-tier) on every pin when given;
    else a pin kept from the old list keeps its own tier (or none), and a new pin gets the plan's
    `pin_tier`, or the tier every old pin shared. Labels in the old plan become indices (or are
    refused) by plan_tiers. `new_pins` None: the old pins."""
    old_tiers, _, kept_pin_tier = plan_tiers(doc, path, ladder)
    listed = doc.get("pin_list") if isinstance(doc.get("pin_list"), list) else []
    own = {(pin["layer"], pin["expert"]): tier for pin, tier in zip(listed, old_tiers)
           if isinstance(pin, dict) and all(isinstance(pin.get(key), int) for key in ("layer", "expert"))}
    if new_pins is None:
        new_pins = list(own)
    if pin_tier is not None:
        return [(int(layer), int(expert), pin_tier) for layer, expert in new_pins]
    fallback = kept_pin_tier if kept_pin_tier is not None else uniform_pin_tier(old_tiers)
    return [(int(layer), int(expert), own.get((int(layer), int(expert)), fallback)) for layer, expert in new_pins]


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


def update_plan(path, owner, changes, ladder=None):
    """Write `changes` (a dict of keys `owner` owns) into the plan at `path`; returns the document written.

    Reads the old plan first and keeps every key not in `changes` (unknown ones too). A new file gets
    the fields the fork's daemon requires (`version`, `budget_bytes`, `window_k`, `pin_list`).
    `changes["pin_list"]` is a list of (layer, expert): each pin keeps its tier across the rewrite
    (see _tiered_pins). `changes["pin_tier"]` / `["default_tier"]` are ladder indices; a pin tier is
    stamped on every pin. `ladder`: the container's tier labels, to check the plan's tiers against
    and turn labels into indices. Written atomically; the new mtime is at least one whole second
    after the old one (the fork polls `st_mtime` in seconds)."""
    owned = OWNED_KEYS[owner]
    stray = set(changes) - owned
    if stray:
        raise ValueError(f"{owner} does not own plan keys {sorted(stray)}")
    path = os.fspath(path)
    old = existing_plan_doc(path)
    old_mtime = os.stat(path).st_mtime if old is not None else None
    doc = dict(old) if old is not None else {"version": PLAN_VERSION, "budget_bytes": 0,
                                             "window_k": DEFAULT_WINDOW_K, "pin_list": []}
    named = ladder is not None and any(isinstance(pin, dict) and isinstance(pin.get("tier"), str)
                                       for pin in doc.get("pin_list") or [])
    if changes.get("pin_list") is not None or changes.get("pin_tier") is not None or named:
        # each pin keeps its tier; with a ladder, tier names another writer left become indices
        doc["pin_list"] = pins_doc(_tiered_pins(doc, path, changes.get("pin_list"), changes.get("pin_tier"), ladder))
    if ladder is not None or changes.get("pin_list") is not None or changes.get("pin_tier") is not None:
        _, default_tier, pin_tier = plan_tiers(doc, path, ladder)
        doc.update((key, value) for key, value in zip(TIER_KEYS, (default_tier, pin_tier)) if value is not None)
    for key, value in changes.items():
        if value is None or key == "pin_list":
            continue
        if key not in ("resident_tier", "cache_device"):
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


def update_plan_locked(path, owner, changes, on_wait=None, ladder=None):
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
        return update_plan(path, owner, changes, ladder)


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


def vram_cache_off_reason(doc):
    """Why the fork's VRAM expert cache stays off under the plan `doc` (a dict), or "" when it does not.

    With GGML_MOE_PLAN_FILE set, the fork's device cache starts at 0 bytes and only the plan's
    `device_budget_bytes` gives it a budget (CambrianTech/llama.cpp ggml-moe-residency.hpp
    `ResidencyCache::enable_device`: budget = 0 when a plan path is configured; `reload_plan_locked`
    applies `device_budget_bytes` only when it is > 0; `enabled()` is budget > 0). A plan without the
    key (trace-tail creates one when the file does not exist), or with 0, leaves it off."""
    budget = doc.get("device_budget_bytes")
    if budget is None:
        return "has no device_budget_bytes"
    if isinstance(budget, bool) or not isinstance(budget, int):
        return f"has a device_budget_bytes that is not a whole number ({json.dumps(budget)})"
    if budget <= 0:
        return f"has device_budget_bytes {budget}"
    return ""


def vram_cache_off_warning(path, doc):
    """The stderr line for a plan that leaves the fork's VRAM expert cache off, or ""."""
    reason = vram_cache_off_reason(doc)
    if not reason:
        return ""
    return (f"{display_name(path)} {reason}: the fork's VRAM expert cache will be off under this plan "
            "(ResidencyCache::enable_device starts it at 0 bytes when GGML_MOE_PLAN_FILE is set, and only "
            "a positive device_budget_bytes raises it); `moetools device-fit MODEL --vram SIZE --plan "
            f"{display_name(path)}` writes it")


def read_plan(path, ladder=None):
    """The plan at `path` (a Plan); tiers checked by plan_tiers against `ladder` when given."""
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
    pin_tiers, default_tier, pin_tier = plan_tiers(doc, name, ladder)
    return Plan(
        budget_bytes=budget,
        pin_list=pins,
        window_k=doc.get("window_k", DEFAULT_WINDOW_K),
        device_budget_bytes=doc.get("device_budget_bytes"),
        resident_tier=doc.get("resident_tier"),
        default_tier=default_tier,
        pin_tier=pin_tier,
        pin_tiers=pin_tiers if any(tier is not None for tier in pin_tiers) else [],
        extra={key: value for key, value in doc.items() if key not in KNOWN_KEYS},
    )


def write_plan(path, plan, owner="device-fit"):
    """Compatibility wrapper: update the keys `owner` owns from `plan` (see update_plan)."""
    values = {"budget_bytes": plan.budget_bytes, "pin_list": plan.pin_list, "window_k": plan.window_k,
              "device_budget_bytes": plan.device_budget_bytes, "resident_tier": plan.resident_tier}
    return update_plan(path, owner, {key: value for key, value in values.items() if key in OWNED_KEYS[owner]})
