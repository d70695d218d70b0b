"""The serving fork's and daemon's READ rules, restated in Python for tests (not copied code).

Each function names the consumer it restates. Tests write an artifact with moetools and check it
with these rules, so a change in what moetools writes that the consumer would read differently
fails here. Sources (read with the search tools):
- CambrianTech/llama.cpp ggml/src/ggml-moe-residency.hpp: `parse_pager_plan`,
  `ResidencyCache::reload_plan_locked`, `ResidencyCache::ensure_pool`.
- CambrianTech/continuum core/continuum-core/src/capacity/division_actuation.rs:
  `parse_resident_manifest`, `discover_resident_tiers`; core/continuum-core/src/model_registry/
  artifacts.rs ("Local model artifact resolution"): `resolve_device_fit_override`,
  `device_fit_cache_dir`, `storage_root`, `first_gguf_in_dir`.
- the fork's server context: CambrianTech/llama.cpp tools/server/server-context.cpp
  `server_output_limits`, applied in `server_context_impl::load_model` (`params_base.n_outputs_max`).
- the daemon's per-port files: continuum core/continuum-core/src/inference/llama_server.rs
  `moe_glass_box_paths`; its trace tail: core/continuum-core/src/capacity/trace_tail.rs
  `MoeTraceTail::drain` (`MAX_DRAIN_BYTES`) and `pin_ceiling`, called with the block count by
  core/continuum-core/src/modules/serving_daemon.rs `publish_moe_host_cache_lease`
  (geometry from core/continuum-core/src/capacity/moe_serving.rs `moe_serving_context`).
- llama-quantize's `--tensor-type-file`: CambrianTech/llama.cpp (and upstream)
  tools/quantize/quantize.cpp `parse_tensor_type_file` / `parse_tensor_type`.
- expert container: CambrianTech/llama.cpp ggml/src/ggml-moe-container.h, ggml-moe-wexp.h,
  ggml-moe-packer.h (`moec_pack_dir`), tools/moe-pack, ggml-moe-container-fetcher.h and
  ggml-backend.cpp (`ggml_backend_sched_compute_splits`); continuum
  core/continuum-core/src/capacity/expert_container.rs.
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


def fork_server_output_rows(n_batch, n_parallel, n_draft_max=0, embedding=False):
    """tools/server/server-context.cpp `server_output_limits` as `server_context_impl::load_model`
    applies it (params_base.n_outputs_max = output_limits.total) before the target context is created:
    an embedding server outputs every batch row; otherwise common_speculative_get_output_limits(n_batch,
    n_parallel, n_max) -- one row per slot plus the drafted tokens' rows (n_max 0 without a
    speculative type), at most n_batch -- and at least 1."""
    if embedding:
        return n_batch
    return max(1, min(n_batch, n_parallel * (1 + n_draft_max)))


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
    """model_registry/artifacts.rs `device_fit_cache_dir`: each char, ASCII alphanumeric -> lowercase, any
    other char -> '-' (one per char, no run collapsing)."""
    return "".join(c.lower() if c.isascii() and c.isalnum() else "-" for c in model_id)


def storage_root(env, home):
    """model_registry/artifacts.rs `storage_root`: CONTINUUM_STORAGE_PATH (non-blank), else a
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
    """model_registry/artifacts.rs `first_gguf_in_dir` + `pick_best_candidate`: the main-model GGUF (not
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
    """model_registry/artifacts.rs `resolve_device_fit_override`: (first GGUF, bytes in `resident-bytes`)
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


# --- expert container (read from CambrianTech/llama.cpp at commits 8bbc58a0 / 8216f7c6 / 114a1d95
# and CambrianTech/continuum 096f3d20) ------------------------------------------------------------

# ggml-moe-container.h `enum MoecQuant` and ggml-moe-wexp.h `enum WexpFmt` (VQ3R=4, VQ2R=5, "never
# 0/1"); tools/moe-pack writes fmt 2 (MOEC_Q_IQ2, "confirmed against MoecQuant") for byte-copied IQ2.
MOEC_Q_UNKNOWN, MOEC_Q_RVQ3, MOEC_Q_IQ2, MOEC_Q_MXFP4 = 0, 1, 2, 3
WEXP_VQ3R, WEXP_VQ2R = 4, 5
# ggml type ids (ggml.h) of the byte-copied families the fork has a code for
GGML_IQ2_IDS = {16, 17, 22}  # IQ2_XXS, IQ2_XS, IQ2_S
GGML_MXFP4 = 39


def fork_record_fmt(gate_type_id):
    """The record header `fmt` the fork's code space gives a byte-copied record by its gate matrix's
    ggml type: IQ2 for IQ2_* (moe-pack labels K3's IQ2_XS-gate / IQ3_XXS-down records IQ2), MXFP4 for
    MXFP4, MOEC_Q_UNKNOWN where the fork has no code."""
    if gate_type_id in GGML_IQ2_IDS:
        return MOEC_Q_IQ2
    return MOEC_Q_MXFP4 if gate_type_id == GGML_MXFP4 else MOEC_Q_UNKNOWN


def daemon_manifest_error(doc):
    """continuum core/continuum-core/src/capacity/expert_container.rs `ExpertContainer::open`: serde
    of `ContainerManifest` (no deny_unknown_fields: extra keys ignored; required version u32, model
    String, fmt String, record_bytes u64, n_layers u16, experts_per_layer u16, activated_per_token
    u32; optional top_k_per_layer, tiers), then version <= KNOWN_VERSION (2) and record_bytes a
    non-zero multiple of RECORD_ALIGN (4096). Returns None when accepted, else the error's kind."""
    def is_uint(value, bits):
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << bits

    required = {"version": lambda v: is_uint(v, 32), "model": lambda v: isinstance(v, str),
                "fmt": lambda v: isinstance(v, str), "record_bytes": lambda v: is_uint(v, 64),
                "n_layers": lambda v: is_uint(v, 16), "experts_per_layer": lambda v: is_uint(v, 16),
                "activated_per_token": lambda v: is_uint(v, 32)}
    for key, ok in required.items():
        if key not in doc or not ok(doc[key]):
            return f"ManifestParse {key}"
    if doc.get("top_k_per_layer") is not None and not is_uint(doc["top_k_per_layer"], 32):
        return "ManifestParse top_k_per_layer"
    if doc["version"] > 2:
        return "ManifestVersion"
    if doc["record_bytes"] == 0 or doc["record_bytes"] % 4096:
        return "RecordMisaligned"
    return None


def fork_server_fetch(record_bytes, expert, expert_size):
    """ggml-backend.cpp `ggml_backend_sched_compute_splits`, container mode: for each MUL_MAT_ID
    weight input `blk.N.ffn_*_exps.weight` the fork fetches `expert_size` bytes (the tensor's
    per-expert stride) at DirContainerFetcher::pack_src(N, expert * record_bytes) from experts-L{N}.bin.
    Returns (byte offset in the bank, bytes read). It adds no gate/up/down offset (see FORK.md, known gaps);
    ADD_ID inputs (expert biases) are never fetched from the container ("not worth splitting")."""
    return expert * record_bytes, expert_size


def moe_pack_dir(model_path, out, layers, experts, top_k, layer_base, fmt=MOEC_Q_IQ2):
    """What the fork's packer writes (tools/moe-pack main -> GgufMoeSource + Iq2ExpertSource ->
    ggml-moe-packer.h `moec_pack_dir`): manifest.json exactly as its fprintf (numeric fmt =
    MOEC_Q_IQ2 whatever --fmt says, no banks), banks experts-L{L} for L = 0..layers-1 reading GGUF
    block layer_base + L, record = WEXP header (layer L, header fmt = --fmt, corr 0) + gate|up|down,
    stride = align_up(32 + max gate + max up + max down, 16 KiB). Single-file GGUF only."""
    import struct

    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(model_path).tensors}

    def slices(block, which):
        data = tensors[f"blk.{block}.ffn_{which}_exps.weight"].data
        return [data[e].tobytes() for e in range(experts)]

    per_layer = [{w: slices(layer_base + L, w) for w in ("gate", "up", "down")} for L in range(layers)]
    longest = {w: max(len(layer[w][0]) for layer in per_layer) for w in ("gate", "up", "down")}
    stride = -(-(32 + sum(longest.values())) // 16384) * 16384
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "manifest.json"), "w") as handle:
        handle.write("{\n  \"version\": 1,\n  \"model\": \"%s\",\n  \"fmt\": %u,\n  \"record_bytes\": %u,\n"
                     "  \"n_layers\": %u,\n  \"experts_per_layer\": %u,\n  \"activated_per_token\": %u,\n"
                     "  \"top_k_per_layer\": %u\n}\n" % ("kimi-k3-iq2", MOEC_Q_IQ2, stride, layers, experts, top_k * layers, top_k))
    for L, layer in enumerate(per_layer):
        with open(os.path.join(out, f"experts-L{L}.bin"), "wb") as handle:
            for e in range(experts):
                gate, up, down = layer["gate"][e], layer["up"][e], layer["down"][e]
                header = struct.pack("<4sHHBBHIIIII", b"WEXP", L, e, fmt, 0, 0, 32, 32 + len(gate),
                                     32 + len(gate) + len(up), 0, stride // 4096)
                body = header + gate + up + down
                handle.write(body + bytes(stride - len(body)))
    return stride


# --- tiered (version-2) containers: read from CambrianTech/continuum expert_container.rs (096f3d20),
# CambrianTech/llama.cpp ggml-moe-container-fetcher.h (175ac9d6) and ggml-moe-packer.h
# (`moec_pack_dir_tiered`), continuum core/expert-pager-policy/fixtures/plan-tiered.json ------------

def daemon_tier_error(doc):
    """expert_container.rs `ExpertContainer::open` after the version gate: `effective_tiers()` (the
    declared `tiers`, or for an empty/absent list one synthesized tier {0, fmt, record_bytes}); serde
    of each `TierSpec` (id u16, quant String, record_bytes u64, unknown keys ignored); then for every
    tier id == its index (TierIdMismatch) and record_bytes a non-zero multiple of 4096
    (RecordMisaligned). Returns None when accepted, else the error's kind."""
    tiers = doc.get("tiers") or [{"id": 0, "quant": doc.get("fmt"), "record_bytes": doc.get("record_bytes")}]
    for index, tier in enumerate(tiers):
        if not isinstance(tier.get("id"), int) or not 0 <= tier["id"] < 1 << 16 or not isinstance(tier.get("quant"), str) \
                or not isinstance(tier.get("record_bytes"), int):
            return f"ManifestParse tiers[{index}]"
        if tier["id"] != index:
            return "TierIdMismatch"
        if tier["record_bytes"] == 0 or tier["record_bytes"] % 4096:
            return "RecordMisaligned"
    return None


def daemon_bank_name(doc, layer, tier):
    """expert_container.rs `ExpertContainer::bank_path`: version < 2 -> experts-L{n}.bin (its only
    tier); version >= 2 -> experts-L{n}-T{t}.bin for every tier, a single tier too."""
    return f"experts-L{layer}.bin" if doc["version"] < 2 else f"experts-L{layer}-T{tier}.bin"


def daemon_reads_tiered(folder):
    """expert_container.rs `ExpertContainer::fetch` of every (layer 0..n_layers-1, expert, tier):
    TierOutOfRange / LayerOutOfRange never arise here; `ExpertBank::open` (file exists, size ==
    tier record_bytes x experts_per_layer) and `verify_identity` (WEXP, header layer == n, expert).
    Returns None when every fetch succeeds, else the first error."""
    doc = json.loads(open(os.path.join(folder, "manifest.json")).read())
    error = daemon_manifest_error(doc) or daemon_tier_error(doc)
    if error:
        return error
    tiers = doc.get("tiers") or [{"id": 0, "record_bytes": doc["record_bytes"]}]
    for tier in tiers:
        for n in range(doc["n_layers"]):
            path = os.path.join(folder, daemon_bank_name(doc, n, tier["id"]))
            if not os.path.exists(path):
                return f"BankIo {path}"
            if os.path.getsize(path) != tier["record_bytes"] * doc["experts_per_layer"]:
                return f"BankGeometry {path}"
            with open(path, "rb") as handle:
                for expert in range(doc["experts_per_layer"]):
                    handle.seek(expert * tier["record_bytes"])
                    head = handle.read(8)
                    if head[:4] != b"WEXP" or int.from_bytes(head[4:6], "little") != n or \
                            int.from_bytes(head[6:8], "little") != expert:
                        return f"RecordIdentity {path} expert {expert}"
    return None


def tiered_fetcher_read(folder, layer, expert, tier, record_bytes):
    """ggml-moe-container-fetcher.h `TieredContainerFetcher::read`: bank dir/experts-L{layer}-T{tier}.bin
    (opened lazily, a missing one cached as absent), one read of record_bytes (from the manifest's
    tier row) at expert * record_bytes. Returns the bytes, or None (missing bank or short read)."""
    path = os.path.join(folder, f"experts-L{layer}-T{tier}.bin")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as handle:
        handle.seek(expert * record_bytes)
        data = handle.read(record_bytes)
    return data if len(data) == record_bytes else None


def plan_tier_error(doc, n_tiers):
    """The daemon's tiered plan (continuum core/expert-pager-policy fixtures/plan-tiered.json: each
    pin may carry an integer "tier", the plan a top-level "default_tier"), read against a container's
    ladder as `ExpertContainer::fetch` does: a tier >= the container's tier count is TierOutOfRange.
    Returns None when every tier is in range, else which."""
    if "default_tier" in doc and not 0 <= doc["default_tier"] < n_tiers:
        return "default_tier TierOutOfRange"
    for index, pin in enumerate(doc.get("pin_list") or []):
        if "tier" in pin and not 0 <= pin["tier"] < n_tiers:
            return f"pin_list[{index}] TierOutOfRange"
    return None


def daemon_plan_serde_error(doc):
    """continuum core/expert-pager-policy/src/plan_file.rs serde of `PlanFileDocument` (version u32,
    budget_bytes u64, window_k u32, pin_list Vec<PlanPin>; PlanPin {layer u32, expert u32, tier
    Option<u32> (serde default: absent = None)}) and its `default_tier: Option<u32>` (set by
    controller.rs `BanditPlanController::write_tiered_plan`); unknown keys are ignored (no
    deny_unknown_fields). Returns None when the daemon parses it, else which field fails."""
    def is_uint(value, bits):
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << bits

    for key, bits in (("version", 32), ("budget_bytes", 64), ("window_k", 32)):
        if not is_uint(doc.get(key), bits):
            return key
    if not isinstance(doc.get("pin_list"), list):
        return "pin_list"
    for index, pin in enumerate(doc["pin_list"]):
        if not isinstance(pin, dict) or not is_uint(pin.get("layer"), 32) or not is_uint(pin.get("expert"), 32):
            return f"pin_list[{index}]"
        if pin.get("tier") is not None and not is_uint(pin["tier"], 32):
            return f"pin_list[{index}].tier"
    if doc.get("default_tier") is not None and not is_uint(doc["default_tier"], 32):
        return "default_tier"
    return None


def moec_pack_dir_tiered_manifest(model, fmt, layers, experts, top_k, tiers):
    """ggml-moe-packer.h `moec_pack_dir_tiered`'s manifest.json, as its fprintf writes it: version 2,
    numeric fmt, NO top-level record_bytes, top_k_per_layer, tiers [{id, quant (MoecQuant number),
    record_bytes}]. `tiers`: [(quant number, record_bytes)]. Its banks are experts-L{L}-T{t}.bin."""
    rows = ",\n".join('    { "id": %u, "quant": %u, "record_bytes": %u }' % (index, quant, record_bytes)
                      for index, (quant, record_bytes) in enumerate(tiers))
    return ("{\n  \"version\": 2,\n  \"model\": \"%s\",\n  \"fmt\": %u,\n  \"n_layers\": %u,\n"
            "  \"experts_per_layer\": %u,\n  \"activated_per_token\": %u,\n  \"top_k_per_layer\": %u,\n"
            "  \"tiers\": [\n%s\n  ]\n}\n" % (model, fmt, layers, experts, top_k * layers, top_k, rows))


def moe_glass_box_paths(port, home):
    """llama_server.rs `moe_glass_box_paths(port)`: `dirs::home_dir()/.continuum/logs/` joined with
    moe-capture-{port}.jsonl, moe-plan-{port}.json, moe-trace-{port}.bin (no storage root)."""
    folder = os.path.join(home, ".continuum", "logs")
    return {"capture": os.path.join(folder, f"moe-capture-{port}.jsonl"),
            "plan": os.path.join(folder, f"moe-plan-{port}.json"),
            "trace": os.path.join(folder, f"moe-trace-{port}.bin")}


DAEMON_MAX_DRAIN_BYTES = 4 * 1024 * 1024  # trace_tail.rs MAX_DRAIN_BYTES


def daemon_drain_offset(length, offset=0):
    """trace_tail.rs `MoeTraceTail::drain`: the offset it reads from. When `len - offset` exceeds
    MAX_DRAIN_BYTES: target = len - MAX_DRAIN_BYTES, offset = target - target % 12, and the segmenter
    and carry restart (returned as the second value)."""
    if length > offset and length - offset > DAEMON_MAX_DRAIN_BYTES:
        target = length - DAEMON_MAX_DRAIN_BYTES
        return target - (target % 12), True
    return offset, False


def daemon_pin_ceiling(budget_bytes, expert_bytes_total, n_layers, n_experts_per_layer):
    """trace_tail.rs `pin_ceiling`: expert_count = n_layers * n_experts_per_layer; 0 if it or the
    total is 0; per_expert = total / expert_count (0 -> 0); ((budget / 2) / per_expert), u64 integer
    division throughout. serving_daemon.rs passes moe_serving.rs' n_layers, the GGUF block count."""
    expert_count = n_layers * n_experts_per_layer
    if expert_count == 0 or expert_bytes_total == 0:
        return 0
    per_expert = expert_bytes_total // expert_count
    if per_expert == 0:
        return 0
    return (budget_bytes // 2) // per_expert


def parse_tensor_type_file(text):
    """quantize.cpp `parse_tensor_type_file`: `while (file >> arg)` -- every whitespace-separated word
    (spaces, tabs or newlines; no comment syntax) is one `parse_tensor_type` argument: split at the
    FIRST `=`; no `=` -> "malformed tensor type"; empty name -> "missing tensor name"; nothing after
    `=` -> "missing quantization type"; the name lower-cased; the type a ggml type name compared
    case-insensitively. Returns [(name, type word)] or the first failing word and its reason."""
    pairs = []
    for word in re.split(r"[ \t\n\v\f\r]+", text):  # isspace() in the C locale
        if not word:
            continue
        sep = word.find("=")
        if sep < 0:
            return word, "malformed tensor type"
        if sep == 0:
            return word, "missing tensor name"
        if sep == len(word) - 1:
            return word, "missing quantization type"
        pairs.append((word[:sep].lower(), word[sep + 1:]))
    return pairs
# --- the fork's launch (device-fit --emit env) ---------------------------------------------------
# Sources: CambrianTech/llama.cpp ggml/src/ggml-moe-residency.hpp (`MoeServingConfig::from_env`,
# `ResidencyCache::enable_device`, `reload_plan_locked`, `enabled`), ggml/src/ggml-backend.cpp
# (`ggml_backend_sched_compute_splits`: the paged path, the trace, the "[MOE-PAGER] ... Paging is
# currently doing NOTHING" warning), ggml/src/ggml-cuda/ggml-cuda.cu (`get_op_batch_size`,
# `ggml_backend_cuda_device_offload_op`, `ggml_backend_cuda_reg`); llama.cpp's `-ot`
# (common/arg.cpp `parse_tensor_buffer_overrides`, src/llama-model.cpp: `std::regex_search` of each
# pattern against the tensor name, first match wins); CambrianTech/continuum
# core/continuum-core/src/inference/engine_install.rs (`EngineInstallReceipt::read`),
# core/continuum-core/src/inference/llama_server.rs (`cold_expert_offload_ot`),
# core/continuum-core/src/capacity/device_fit.rs (`default_compute_reserve_bytes`).

GIB = 1 << 30
_ATOF = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def fork_cache_bytes(value):
    """`MoeServingConfig::from_env`: a `GGML_MOE_*_CACHE_GB` value is `(size_t)(atof(v) * 1024^3)`;
    unset is 0. atof reads the longest numeric prefix (0 when there is none)."""
    if value is None:
        return 0
    match = _ATOF.match(value)
    return max(0, int(float(match.group()) * GIB)) if match else 0


def device_cache_budget(env, plan_text=None):
    """Bytes of the fork's VRAM expert cache: ggml_backend_sched_compute_splits calls enable_device only
    when GGML_MOE_VRAM_CACHE_GB is non-zero; enable_device starts the budget at 0 when GGML_MOE_PLAN_FILE
    is set (else the env bytes); reload_plan_locked then takes the plan's device_budget_bytes when it is
    > 0. 0 = off (`enabled()` is budget_bytes > 0)."""
    env_bytes = fork_cache_bytes(env.get("GGML_MOE_VRAM_CACHE_GB"))
    if env_bytes == 0:
        return 0
    if not env.get("GGML_MOE_PLAN_FILE"):
        return env_bytes
    plan = parse_pager_plan(plan_text) if plan_text is not None else None
    return plan["device_budget_bytes"] if plan and plan["device_budget_bytes"] > 0 else 0


def offload_min_batch(env):
    """ggml-cuda.cu `ggml_backend_cuda_reg`: atoi(GGML_OP_OFFLOAD_MIN_BATCH) when set, else 32."""
    value = env.get("GGML_OP_OFFLOAD_MIN_BATCH")
    if value is None:
        return 32
    match = re.match(r"\s*[+-]?\d+", value)
    return int(match.group()) if match else 0


def mul_mat_id_offloads(env, n_tokens):
    """ggml-cuda.cu `ggml_backend_cuda_device_offload_op`: get_op_batch_size(op) >= the min batch, where
    a MUL_MAT_ID's batch is op->ne[2], its tokens."""
    return n_tokens >= offload_min_batch(env)


def tensor_override(name, argv):
    """The buffer type llama.cpp gives tensor `name` from the `-ot`/`--override-tensor` values in argv
    (each `PATTERN=BUFT`, comma-separated; std::regex_search, first match wins), or None."""
    for flag, value in zip(argv, argv[1:]):
        if flag not in ("-ot", "--override-tensor"):
            continue
        for item in value.split(","):
            pattern, _, buft = item.partition("=")
            if re.search(pattern, name):
                return buft
    return None


def fork_pages(name, argv, env, n_tokens=1):
    """ggml_backend_sched_compute_splits pages an expert weight (and writes its trace records) only when
    it is a split input in a host buffer of usage WEIGHTS consumed as src[0] of a MUL_MAT_ID on the GPU:
    the tensor is placed on the CPU (-ot ...=CPU), its CPU buffer stays a host buffer (--no-repack: the
    CPU_REPACK buffer is not host and its op never offloads), the layers are on the GPU (-ngl) and the
    decode batch offloads (mul_mat_id_offloads). Each is one of the warning's three causes."""
    if not re.match(r"blk\.\d+\.ffn_(gate|up|down|gate_up)_exps\.", name):
        return False
    ngl = argv[argv.index("-ngl") + 1] if "-ngl" in argv else "0"
    return (tensor_override(name, argv) == "CPU" and ("--no-repack" in argv or "-nr" in argv)
            and ngl not in ("0", "") and mul_mat_id_offloads(env, n_tokens))


def daemon_launch_path_errors(env):
    """continuum engine_install.rs `EngineInstallReceipt::read`: GGML_MOE_CAPTURE_FILE, GGML_MOE_PLAN_FILE,
    GGML_MOE_TRACE_FILE and LLAMA_RESIDENT_OVERRIDE, when set, must be absolute (the daemon runs the
    server from the engine's own folder, `command`)."""
    return [f"receipted engine requires absolute {key}"
            for key in ("GGML_MOE_CAPTURE_FILE", "GGML_MOE_PLAN_FILE", "GGML_MOE_TRACE_FILE", "LLAMA_RESIDENT_OVERRIDE")
            if env.get(key) is not None and not os.path.isabs(env[key])]


def cold_expert_offload_ot(hot_layers, n_layers):
    """continuum llama_server.rs `cold_expert_offload_ot`: hot indices >= n_layers dropped; cold = the
    other blocks; None when nothing is cold; else `blk\\.(c1|c2|...)\\.ffn.*_exps=CPU`."""
    hot = {layer for layer in hot_layers if layer < n_layers}
    cold = [layer for layer in range(n_layers) if layer not in hot]
    if not cold:
        return None
    return "blk\\.(" + "|".join(map(str, cold)) + ")\\.ffn.*_exps=CPU"


def daemon_default_reserve(vram_bytes):
    """continuum device_fit.rs `default_compute_reserve_bytes`: (vram / 10).max(2 GiB), which it says
    mirrors the fork's fit-device default."""
    return max(vram_bytes // 10, 2 * GIB)


# --- the fork's speed switches (CambrianTech/llama.cpp ggml/src/ggml-moe-residency.hpp 0832f66b
# `MoeServingConfig::from_env`; ggml/src/ggml-backend.cpp e696f67b `moe_pick_base_fetcher`,
# `ggml_backend_sched_compute_splits`; ggml/src/ggml-moe-container-fetcher.h 175ac9d6) --------------

FORK_SWITCHES = ("GGML_MOE_GATHER", "GGML_MOE_DIRECT_READ", "GGML_MOE_PREFETCH")


def fork_switch_on(env, name):
    """`MoeServingConfig::from_env`: `c.gather = getenv("GGML_MOE_GATHER") != nullptr`, and the same for
    `direct_read` and `prefetch`: set to any value ("0" and "" included) is on, unset is off. `env` maps
    a name to its value, None for unset (as device-fit's launch does)."""
    return env.get(name) is not None


def fork_base_fetcher(env, windows):
    """ggml-backend.cpp `moe_pick_base_fetcher`, the fetcher that fills the expert cache on a miss:
    GGML_MOE_CONTAINER first (`DirContainerFetcher`, "container-dir": buffered fopen/fread of the banks),
    then, under `_WIN32` only, `DirectReadFetcher` ("direct-read-unbuffered") when GGML_MOE_DIRECT_READ is
    on, else `MmapFaultFetcher` ("mmap-prefetch": memcpy through the model's mmap). Returns the name()."""
    if env.get("GGML_MOE_CONTAINER"):
        return "container-dir"
    if windows and fork_switch_on(env, "GGML_MOE_DIRECT_READ"):
        return "direct-read-unbuffered"
    return "mmap-prefetch"


def fork_os_prefetch(env, windows):
    """`ggml_backend_sched_compute_splits`: the PrefetchVirtualMemory over the routed experts' mmap
    ranges sits in `#ifdef _WIN32` and runs only when `moe_prefetch` (GGML_MOE_PREFETCH) is on."""
    return windows and fork_switch_on(env, "GGML_MOE_PREFETCH")


def fork_gathers(env, cache_on, backend_has_gather_entry):
    """`ggml_backend_sched_compute_splits`: the offset table (MUL_MAT_ID src[3], slots read in place) is
    built only inside `if (host_cache_on)`, when `moe_gather_on` (GGML_MOE_GATHER) and the backend's
    registry returns a "ggml_backend_moe_gather_entry" proc (and its supports_op accepts the node)."""
    return cache_on and fork_switch_on(env, "GGML_MOE_GATHER") and backend_has_gather_entry
