"""The serving fork's and daemon's READ rules, restated in Python for tests (not copied code).

Each function names the consumer it restates. Tests write an artifact with moetools and check it
with these rules, so a change in what moetools writes that the consumer would read differently
fails here. Sources (read with the search tools):
- CambrianTech/llama.cpp ggml/src/ggml-moe-residency.hpp: `parse_pager_plan`,
  `ResidencyCache::reload_plan_locked`, `ResidencyCache::ensure_pool`.
- CambrianTech/continuum core/continuum-core/src/capacity/division_actuation.rs:
  `parse_resident_manifest`, `discover_resident_tiers`; the model registry's
  `resolve_device_fit_override`, `device_fit_cache_dir`, `storage_root`, `first_gguf_in_dir`.
"""

import json
import os
import re

_INT = re.compile(r"-?\d+")


def _strtoll(text, start):
    match = _INT.match(text, start)
    return int(match.group()) if match else 0


def parse_pager_plan(text):
    """ggml-moe-residency.hpp `parse_pager_plan`: strstr for each key (first occurrence in the whole
    text), skip `"`, `:`, space and tab, strtoll; pins = every "layer"/"expert" pair between the
    first `[` after `"pin_list"` and the next `]`. Returns None when the fork would not accept it."""
    def num_after(key):
        at = text.find(key)
        if at < 0:
            return -1
        p = at + len(key)
        while p < len(text) and text[p] in '": \t':
            p += 1
        return _strtoll(text, p)

    plan = {"budget_bytes": 0, "device_budget_bytes": 0, "window_k": 0, "pins": []}
    b, db, k = num_after('"budget_bytes"'), num_after('"device_budget_bytes"'), num_after('"window_k"')
    if b >= 0:
        plan["budget_bytes"] = b
    if db >= 0:
        plan["device_budget_bytes"] = db
    if k >= 0:
        plan["window_k"] = k
    pl = text.find('"pin_list"')
    if pl >= 0:
        p = text.find("[", pl)
        end = text.find("]", p) if p >= 0 else -1
        q = p
        while p >= 0 and end >= 0 and q < end:
            lq = text.find('"layer"', q)
            if lq < 0 or lq > end:
                break
            eq = text.find('"expert"', lq)
            if eq < 0 or eq > end:
                break
            lp = lq + len('"layer"')
            while text[lp] in ': "':
                lp += 1
            ep = eq + len('"expert"')
            while text[ep] in ': "':
                ep += 1
            plan["pins"].append((_strtoll(text, lp), _strtoll(text, ep)))
            q = ep
    ok = b >= 0 or k >= 0 or bool(plan["pins"])
    return plan if ok else None


def fork_reloads(old_stat, new_stat):
    """`ResidencyCache::reload_plan_locked`: reload only when (int) st_mtime changed and size > 0."""
    return int(new_stat.st_mtime) != int(old_stat.st_mtime) and new_stat.st_size > 0


def pin_bias_generations(window_k):
    """`reload_plan_locked`: a hinted expert's retention bias = 2 x window_k generations (4 when 0)."""
    return window_k * 2 if window_k else 4


def parse_resident_manifest(text):
    """division_actuation.rs `parse_resident_manifest`: JSON with a non-empty (trimmed) string
    `tier_label` and a positive u64 `resident_bytes`; anything else is refused (None)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    label = doc.get("tier_label") if isinstance(doc, dict) else None
    size = doc.get("resident_bytes") if isinstance(doc, dict) else None
    if not isinstance(label, str) or not label.strip() or not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        return None
    return label.strip(), size


def discover_resident_tiers(folder):
    """division_actuation.rs `discover_resident_tiers` (without the native tier 0): every file directly
    in `folder` ending `.resident.json`, in path order, whose manifest parses and whose GGUF (the name
    without the suffix) is a file. Returns [(label, resident_bytes, gguf_path)]."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for path in sorted(os.path.join(folder, name) for name in names if name.endswith(".resident.json")):
        try:
            with open(path, encoding="utf-8") as handle:
                tier = parse_resident_manifest(handle.read())
        except OSError:
            continue
        gguf = path[: -len(".resident.json")]
        if tier and os.path.isfile(gguf):
            out.append((tier[0], tier[1], gguf))
    return out


def device_fit_slug(model_id):
    """The model registry's `device_fit_cache_dir`: each char, ASCII alphanumeric -> lowercase, any
    other char -> '-' (one per char, no run collapsing)."""
    return "".join(c.lower() if c.isascii() and c.isalnum() else "-" for c in model_id)


def storage_root(env, home):
    """The model registry's `storage_root`: CONTINUUM_STORAGE_PATH (non-blank), else a
    `CONTINUUM_STORAGE_PATH=` line of ~/.continuum/config.env, else ~/.continuum."""
    value = env.get("CONTINUUM_STORAGE_PATH", "")
    if value.strip():
        return value
    try:
        with open(os.path.join(home, ".continuum", "config.env"), encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line.startswith("CONTINUUM_STORAGE_PATH="):
                    found = line[len("CONTINUUM_STORAGE_PATH="):].strip()
                    if found:
                        return found
    except OSError:
        pass
    return os.path.join(home, ".continuum")


def first_gguf_in_dir(folder):
    """The model registry's `first_gguf_in_dir` + `pick_best_candidate`: the main-model GGUF (not
    *mmproj*, not mtp-*) with the newest mtime, ties by path."""
    candidates = []
    for name in os.listdir(folder):
        low = name.lower()
        path = os.path.join(folder, name)
        if low.endswith(".gguf") and "mmproj" not in low and not low.startswith("mtp-") and os.path.isfile(path):
            candidates.append(path)
    candidates.sort(key=lambda p: (-os.stat(p).st_mtime_ns, p))
    return candidates[0] if candidates else None


def resolve_device_fit_override(folder, usable_bytes):
    """The model registry's `resolve_device_fit_override`: (first GGUF, bytes in `resident-bytes`)
    when that plain-text integer parses and fits `usable_bytes`, else None."""
    if not os.path.isdir(folder):
        return None
    gguf = first_gguf_in_dir(folder)
    if gguf is None:
        return None
    try:
        with open(os.path.join(folder, "resident-bytes"), encoding="utf-8") as handle:
            size = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return (gguf, size) if size <= usable_bytes else None


def canonical_name(name):
    """ggml-moe-residency.hpp `canonical_name_key`: after the first '#', up to the last '#' of the rest."""
    first = name.find("#")
    if first < 0:
        return name
    start = name[first + 1:]
    last = start.rfind("#")
    return start[:last] if last >= 0 else start


def fnv1a(name):
    """ggml-moe-residency.hpp `hash_name` over the canonical segment (the fork's offset basis)."""
    h = 1469598103934665603
    for byte in canonical_name(name).encode():
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def segment(records, layer_of):
    """expert-pager-policy segment.rs `TokenSegmenter::push` + the drain loop of trace_tail.rs
    `MoeTraceTail::drain`: every record (known key or not) runs the boundary rule; a token
    completes only when a later token starts (the open one is never emitted); empty tokens are
    skipped. records: [(tkey, expert)]; layer_of: {tkey: layer}. Returns [set of (layer, expert)]."""
    seen, prev, current, out = set(), None, set(), []
    for tkey, expert in records:
        if prev != tkey:
            if tkey in seen:
                if current:
                    out.append(current)
                current = set()
                seen = set()
            seen.add(tkey)
            prev = tkey
        if tkey in layer_of:
            current.add((layer_of[tkey], expert))
    return out


def parse_tkey_table(text):
    """segment.rs `TkeyTable::from_json`: {"<u64 decimal>": {"layer": u32, ...}} -> {tkey: layer};
    raises ValueError where the Rust loader would fail."""
    raw = json.loads(text)
    table = {}
    for key, value in raw.items():
        if not key.isdigit() or int(key) >= 1 << 64:
            raise ValueError(f"tkey table key {key!r} not u64")
        layer = value["layer"]
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < 1 << 32:
            raise ValueError(f"layer {layer!r} not u32")
        table[int(key)] = layer
    return table


def dir_container_record_bytes(folder):
    """ggml-moe-container-fetcher.h `dir_container_record_bytes`: the first "record_bytes" in the first
    4095 bytes of manifest.json, accepted only as a non-zero multiple of 4096 (else 0: no container)."""
    with open(os.path.join(folder, "manifest.json"), "rb") as handle:
        head = handle.read(4095).decode("utf-8", errors="replace")
    at = head.find('"record_bytes"')
    if at < 0:
        return 0
    colon = head.find(":", at)
    match = _INT.match(head[colon + 1:].lstrip()) if colon >= 0 else None
    value = int(match.group()) if match else 0
    return value if value > 0 and value % 4096 == 0 else 0
