"""device-fit's core: divide one GPU between compute reserve, resident weights, KV cache and the
hot-expert cache; predict decode speed for every feasible division; build the launch settings.

Pure functions over plain data (`ModelFacts`, `Tier`, `FitOptions`); reads only the small JSON files it
is given through moetools.formats. Sizes are bytes, speeds tokens/s, times seconds.
"""

import os

from moetools.devicefit import compute as computemod
from moetools.devicefit import context as contextmod
from moetools.devicefit import kv as kvmod
from moetools.devicefit import layers as layersmod
from moetools.devicefit.coverage import (  # noqa: F401  (re-exported: run.py and the tests read them here)
    OBSERVATION_MIN_TOKENS, OBSERVATION_WEIGHT, Coverage, coverage_model, match_observations, parse_observations, refine)
from moetools.devicefit.speed import fork_tok_s
from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import FormatError, GGUFError, UsageError
from moetools.sizes import format_size
from moetools.gguf.constants import Keys
from moetools.gguf.model import expert_tensor_kind, model_stem

GIB = 1024**3
DEFAULT_MARGIN = GIB  # CUDA context, cuBLAS workspace, fragmentation: llama.cpp's own --fit-target default
CTX_STEP = 256
NATIVE = "native"


class ModelFacts(Record):
    """What device-fit needs from a model, read once from its header."""

    FIELDS = (
        ("path", REQUIRED),
        ("architecture", REQUIRED),
        ("fingerprint", REQUIRED),
        ("shape", REQUIRED),
        ("graph", REQUIRED),  # compute.GraphShape: what the compute buffer depends on
        ("resident_bytes", REQUIRED),  # every tensor that is not a routed expert
        ("file_bytes", REQUIRED),  # all shards, as llama.cpp maps them
        ("block_count", REQUIRED),
        ("expert_count", REQUIRED),
        ("moe_layers", REQUIRED),  # block numbers holding routed experts
        ("layer_expert_bytes", REQUIRED),  # {block: bytes of all that block's expert tensors}
        ("experts_per_token", REQUIRED),  # sum of top-k over the MoE layers
        ("expert_bytes", REQUIRED),  # mean bytes of one (layer, expert) over the MoE layers, rounded up
        ("warnings", list),
        ("layers", None),  # layers.LayerBytes: per-block dense and expert-matrix bytes (upstream placement)
        ("expert_matrix_bytes", list),  # [(block, bytes of one expert's slice)] per expert tensor: the fork's pools
        ("mtp_blocks", tuple),  # NextN/MTP blocks llama.cpp leaves unloaded (no --spec-type draft-mtp): not in `layers`
        ("mtp_loaded", False),  # model_facts(load_mtp=True): the NextN tensors are in `layers` (MTP drafting)
    )

    @property
    def fingerprint(self):
        """The model's structural fingerprint (moetools.gguf.Model.fingerprint), hashed when first asked for
        (only tier discovery compares it: a plan without tiers pays neither hashlib's import nor the hash)."""
        value = self._fingerprint
        if callable(value):
            value = self._fingerprint = value()
        return value

    @fingerprint.setter
    def fingerprint(self, value):
        self._fingerprint = value

    @property
    def total_slots(self):
        return self.expert_count * len(self.moe_layers)

    @property
    def dense(self):
        return not self.moe_layers


def model_facts(model, load_mtp=False):
    """ModelFacts of an open moetools.gguf.Model. Raises GGUFError naming a missing key.

    load_mtp: as llama_model_params.load_mtp (--spec-type draft-mtp): the NextN/MTP blocks' tensors
    are loaded with the trunk's, so they stay in `layers`."""
    from moetools.gguf import validate

    validate.check_metadata(model)  # the metadata every command checks (issue 32)
    shape = kvmod.kv_shape(model)  # its own refusals name the KV cache's reasons first
    validate.check_model(model)  # then what llama.cpp's load_tensors refuses
    per_expert = model.expert_bytes_by_layer
    # the reader checked every expert tensor holds expert_count experts, so a layer's bytes are exact
    layer_bytes = {block: value * model.expert_count for block, value in per_expert.items()}
    moe_layers = sorted(per_expert)
    experts_per_token = 0
    top_k_of = {}
    if moe_layers and not model.get_int(Keys.EXPERT_COUNT, 0):
        # llama.cpp reads n_expert from the key alone: 0 or missing, and the expert tensors' shapes fail to load
        raise GGUFError(model.path, "the file has expert tensors but expert_count is missing or 0 (llama.cpp "
                                    "refuses it)", key=model.key(Keys.EXPERT_COUNT))
    if moe_layers:
        top_k = model.layer_values(Keys.EXPERT_USED_COUNT, required_for="experts per token")
        for block in moe_layers:
            if top_k[block] == 0:
                raise GGUFError(model.path, f"top-k 0 of layer {block} is not a positive count",
                                key=model.key(Keys.EXPERT_USED_COUNT))
            experts_per_token += top_k[block]
            top_k_of[block] = top_k[block]
    mean = -(-sum(per_expert.values()) // len(moe_layers)) if moe_layers else 0
    mtp = layersmod.mtp_blocks(model)
    mtp_skipped = frozenset() if load_mtp else layersmod.mtp_skipped_tensors(model)
    graph = computemod.graph_shape(model, shape)
    warnings = list(model.warnings) + list(shape.notes) + list(graph.notes)
    if mtp and not load_mtp:
        skipped = sum(tensor.n_bytes for tensor in model.tensors if tensor.name in mtp_skipped)
        warnings.append(f"NextN/MTP block(s) {', '.join(map(str, mtp))} ({format_size(skipped)}) are not loaded by "
                        "llama.cpp without --spec-type draft-mtp: left out of the llama runtime's placement")
    return ModelFacts(
        path=model.path,
        architecture=model.architecture,
        fingerprint=lambda: model.fingerprint,
        shape=shape,
        graph=graph,
        resident_bytes=model.resident_bytes,
        file_bytes=sum(header.file_size for header in model.headers),
        block_count=model.block_count,
        expert_count=model.expert_count,
        moe_layers=moe_layers,
        layer_expert_bytes=dict(sorted(layer_bytes.items())),
        experts_per_token=experts_per_token,
        expert_bytes=mean,
        warnings=warnings,
        layers=layersmod.layer_bytes(model, top_k_of, skip_names=mtp_skipped),
        mtp_blocks=mtp,
        mtp_loaded=bool(load_mtp and mtp),
        expert_matrix_bytes=[(expert_tensor_block(tensor.name), tensor.n_bytes // tensor.shape[-1])
                             for tensor in model.expert_tensors],
    )


def expert_tensor_block(name):
    return expert_tensor_kind(name)[0]


def fork_slots(facts, budget_bytes):
    """(layer, expert) slots the fork's cache gives `budget_bytes` (its pools by expert size, see
    fork_cache); the plain budget / expert bytes when the facts carry no per-matrix sizes."""
    from moetools.devicefit import fork_cache

    if not facts.expert_matrix_bytes:
        return budget_bytes // facts.expert_bytes if facts.expert_bytes else 0
    return fork_cache.fork_cache(budget_bytes, facts.expert_matrix_bytes, facts.expert_count, len(facts.moe_layers)).expert_slots


def chosen_fork_cache(result):
    """The fork's one cache for a fit: in VRAM (the expert budget) or in host RAM (the --ram host
    budget), whichever holds more experts (fork_cache.choose_cache_device). None when unfittable/dense."""
    from moetools.devicefit import fork_cache

    facts, chosen = result.facts, result.chosen
    if chosen is None or facts.dense:
        return None
    host = result.host["host_cache_bytes"] if result.host else 0
    args = (facts.expert_matrix_bytes, facts.expert_count, len(facts.moe_layers))
    device = fork_cache.choose_cache_device(chosen.expert_budget_bytes, host, *args)
    return fork_cache.fork_cache(chosen.expert_budget_bytes if device == "vram" else host, *args, device=device)


# --- resident tiers ---------------------------------------------------------------------------

class Tier(Record):
    """One way to hold the resident weights: the model's own (native) or a resident-only GGUF."""

    FIELDS = (
        ("label", REQUIRED),
        ("resident_bytes", REQUIRED),
        ("gguf", REQUIRED),  # the GGUF that supplies the resident weights
        ("manifest", ""),
    )


def default_tier_folder(model_path):
    """Where `quantize --resident-only` puts a model's tiers: device-fit/<stem>/ beside the model."""
    return os.path.join(os.path.dirname(os.path.abspath(model_path)), "device-fit", model_stem(model_path))


def load_tiers(folder, facts, prefix=""):
    """Resident tiers of this model found in `folder`: (list of Tier, warnings).

    Skipped with a warning: malformed manifests, manifests whose GGUF is missing, manifests recorded
    against another model (by `source_fingerprint`, else by `source_model`), duplicate labels.
    """
    # formats use dataclasses; imported only when there are tiers to read (header path start-up)
    from moetools.formats.resident_manifest import find_manifests, read_manifest

    tiers, warnings, seen = [], [], set()
    for path in find_manifests(folder):
        if prefix and not os.path.basename(path).startswith(prefix):
            continue  # a shared folder (the model's own): only this model's names
        try:
            manifest = read_manifest(path)
        except FormatError as err:
            warnings.append(f"skipping tier manifest: {err}")
            continue
        if manifest.source_fingerprint and manifest.source_fingerprint != facts.fingerprint:
            warnings.append(f"skipping tier manifest {path}: made from another model "
                            f"(source_fingerprint {manifest.source_fingerprint}, this model is {facts.fingerprint})")
            continue
        if (not manifest.source_fingerprint and manifest.source_model
                and model_stem(manifest.source_model) != model_stem(facts.path)):
            warnings.append(f"skipping tier manifest {path}: made from another model ({manifest.source_model!r})")
            continue
        if not manifest.source_fingerprint and not manifest.source_model:
            warnings.append(f"tier manifest {path} does not record its source model; assuming it is of this model")
        gguf = manifest.gguf_path
        if not gguf or not os.path.isfile(gguf):
            warnings.append(f"skipping tier manifest {path}: its GGUF {gguf or '(none named)'!s} is missing")
            continue
        if manifest.tier_label in seen or manifest.tier_label == NATIVE:
            warnings.append(f"skipping tier manifest {path}: tier {manifest.tier_label!r} already listed")
            continue
        seen.add(manifest.tier_label)
        tiers.append(Tier(manifest.tier_label, manifest.resident_bytes, gguf, path))
    tiers.sort(key=lambda tier: -tier.resident_bytes)
    return tiers, warnings


# --- the division -----------------------------------------------------------------------------

class FitOptions(Record):

    FIELDS = (
        ("vram", REQUIRED),
        ("reserve", None),  # overrides compute buffer + margin as a whole
        ("margin", DEFAULT_MARGIN),  # added to the modelled compute buffer
        ("ctx", None),  # default: the training context
        ("ctx_reason", "as asked"),  # why ctx is what it is, for the notes
        ("min_ctx", 4096),
        ("kv", kvmod.KVSettings),
        ("h2d_bytes_per_s", 25e9),
        ("h2d_label", "--h2d"),  # where the rate came from, as the notes name it ("host profile" with --host)
        ("floor_s", 0.010),
        ("ram", None),
        ("os_reserve", 4 * GIB),
        ("container", ""),
        ("disk_bytes_per_s", 3e9),  # the drive's read rate, for the experts the page cache cannot hold
        ("disk_label", "--disk-bw"),
        ("tiers", None),  # devicefit.tiers.TierCosts: pins and the rest priced at the plan's container tiers
    )


class Division(Record):
    """One resident tier's division of the card."""

    FIELDS = (
        ("tier", REQUIRED),
        ("feasible", False),
        ("context", 0),
        ("kv", list),  # KVCache
        ("compute_bytes", 0),  # the compute buffer at this context (0 when --reserve overrides)
        ("expert_budget_bytes", 0),
        ("free_bytes", 0),  # VRAM left after resident + KV (the expert budget, or unused on a dense model)
        ("slots", 0),
        ("coverage", 0.0),
        ("tok_s_predicted", 0.0),
        ("tok_s", 0.0),
        ("observations", 0),
        ("shortfall_bytes", 0),
        ("note", ""),
        ("pinned", 0),  # experts held at the pin tier (only with container tiers)
    )

    @property
    def kv_bytes(self):
        return kvmod.total(self.kv)

    def to_doc(self):
        return {
            "tier": self.tier.label,
            "resident_bytes": self.tier.resident_bytes,
            "resident_gguf": self.tier.gguf,
            "feasible": self.feasible,
            "context": self.context,
            "kv_bytes": self.kv_bytes,
            "kv": [cache.to_doc() for cache in self.kv],
            "compute_bytes": self.compute_bytes,
            "expert_budget_bytes": self.expert_budget_bytes,
            "slots": self.slots,
            "coverage": round(self.coverage, 6),
            "tok_s_predicted": round(self.tok_s_predicted, 4),
            "tok_s": round(self.tok_s, 4),
            "tok_s_source": "measured" if self.observations else "predicted",
            "observations": self.observations,
            "shortfall_bytes": self.shortfall_bytes,
            "note": self.note,
        }


class ComputeModel:
    """The compute buffer at a context, memoised (it does not depend on the resident tier).

    With --reserve the user's figure replaces compute buffer + margin and this returns 0."""

    def __init__(self, facts, options):
        self.facts = facts
        self.options = options
        self.cache = {}

    @property
    def modelled(self):
        return self.options.reserve is None

    def at(self, ctx):
        if not self.modelled:
            return 0
        if ctx not in self.cache:
            # shared by every fit of this model and these settings (the context trade-off fits 7 times)
            memo = self.facts.graph.__dict__.setdefault("_fit_memo", {})
            key = (ctx, self.options.kv.as_tuple())
            if key not in memo:
                memo[key] = computemod.compute_buffers(self.facts.graph, self.facts.shape, ctx, self.options.kv,
                                                       alignment=computemod.CUDA_ALIGNMENT)
            self.cache[ctx] = memo[key]
        return self.cache[ctx].device_bytes


def fit_context(shape, settings, wanted, floor, room, compute_bytes=0):
    """The largest context <= wanted (squeezed in steps of 256, never below `floor`) whose caches,
    plus `compute_bytes` (the compute buffer at `wanted`: an upper bound for smaller contexts), fit in
    `room` bytes: (context, caches) or (None, caches at `floor`)."""
    room -= compute_bytes
    caches = kvmod.kv_caches(shape, wanted, settings)
    if kvmod.total(caches) <= room:
        return wanted, caches
    low = -(-floor // CTX_STEP)  # multiples of 256 in [floor, wanted)
    high = (wanted - 1) // CTX_STEP
    best = None
    while low <= high:
        middle = (low + high) // 2
        candidate = kvmod.kv_caches(shape, middle * CTX_STEP, settings)
        if kvmod.total(candidate) <= room:
            best = (middle * CTX_STEP, candidate)
            low = middle + 1
        else:
            high = middle - 1
    if best:
        return best
    return None, kvmod.kv_caches(shape, floor, settings)


def speed(facts, coverage, options, cache_on_host=False, share=None):
    """The fork's tok/s with its misses read from RAM, or from the drive for the share of the experts the
    page cache cannot hold (speed.fork_tok_s); with container tiers a miss reads a default-tier record
    (devicefit/tiers.py)."""
    expert_bytes = options.tiers.default_bytes if options.tiers is not None else facts.expert_bytes
    return fork_tok_s(coverage, facts.experts_per_token, expert_bytes, options.h2d_bytes_per_s, options.floor_s,
                      drive_share(facts, options) if share is None else share, options.disk_bytes_per_s, cache_on_host)


def cache_slots(facts, budget_bytes, options):
    """(slots, pinned) of the hot-expert cache for `budget_bytes`: the fork's pools (fork_slots), or
    with container tiers the pins at the pin tier's record size and the rest at the default tier's."""
    if options.tiers is None:
        return min(fork_slots(facts, budget_bytes), facts.total_slots), 0
    from moetools.devicefit.tiers import tiered_slots
    from moetools.formats.plan import pin_ceiling

    return tiered_slots(budget_bytes, options.tiers, facts.total_slots, pin_ceiling(budget_bytes, facts.expert_bytes))


def drive_share(facts, options):
    """The share of the expert bytes a cache miss reads from the drive rather than RAM: the page cache
    holds what RAM has room for after the OS reserve and the model's other bytes in it, the rest comes
    from the drive. The fork reads a miss through llama.cpp's mmap of the GGUF (the resident weights
    share the page cache with the experts), or from a container's banks with buffered fopen/fread
    (CambrianTech/llama.cpp ggml-moe-container-fetcher.h DirContainerFetcher: the page cache holds
    records; only the resident weights are mapped). 0 when --ram is not given (said in speed_assumes)."""
    experts = sum(facts.layer_expert_bytes.values())
    if not experts or options.ram is None:
        return 0.0
    mapped = facts.resident_bytes if options.container else facts.file_bytes - experts
    room = options.ram - options.os_reserve - mapped
    return min(1.0, max(0.0, 1.0 - room / experts))


def speed_assumes(result):
    """What the fork's tok/s rests on, in words: where its cache is, where its misses come from."""
    facts, options, chosen = result.facts, result.options, result.chosen
    if chosen is None or facts.dense:
        return ""
    cache = chosen_fork_cache(result)
    where = "a host-RAM cache whose hits still cross PCIe" if cache is not None and cache.device == "host" else "a VRAM cache"
    share = drive_share(facts, options)
    h2d = f"{options.h2d_bytes_per_s / 1e9:g} GB/s ({options.h2d_label})"
    source = "the container's banks" if options.container else "the model's mmap"
    if cache is not None and cache.device == "host" and options.container:
        misses = (f"misses read from {source} on the drive (the host cache takes the RAM the page cache would hold) "
                  f"at {options.disk_bytes_per_s / 1e9:g} GB/s ({options.disk_label}), then PCIe at {h2d}")
    elif options.ram is None:
        misses = f"misses from RAM over PCIe at {h2d}, assuming the page cache holds every expert (no --ram)"
    elif share > 0:
        misses = (f"misses from {source} over PCIe at {h2d}; the page cache holds {1 - share:.0%} of the experts, the other "
                  f"{share:.0%} are read from the drive at {options.disk_bytes_per_s / 1e9:g} GB/s ({options.disk_label})")
    else:
        misses = f"misses from RAM (the page cache holds every expert) over PCIe at {h2d}"
    return f"{where}; {misses}"


def divide(facts, tier, options, coverage, usable, wanted, floor, compute=None):
    """The division of `usable` VRAM (after the margin or the --reserve) for one resident tier."""
    compute = compute or ComputeModel(facts, options)
    division = Division(tier)
    room = usable - tier.resident_bytes
    if room < 0:
        caches = kvmod.kv_caches(facts.shape, floor, options.kv)
        division.shortfall_bytes = tier.resident_bytes + kvmod.total(caches) + compute.at(floor) - usable
        division.note = "resident weights do not fit"
        return division
    context, caches = fit_context(facts.shape, options.kv, wanted, floor, room, compute.at(wanted))
    if context is None:
        division.shortfall_bytes = kvmod.total(caches) + compute.at(floor) - room
        division.note = f"KV and compute buffer for the {floor}-token minimum context do not fit"
        return division
    division.feasible = True
    division.context = context
    division.kv = caches
    division.compute_bytes = compute.at(context)
    division.free_bytes = room - division.kv_bytes - division.compute_bytes
    if context < wanted:
        division.note = f"context squeezed from {wanted}"
    if facts.dense:
        division.coverage = 1.0
    else:
        division.expert_budget_bytes = division.free_bytes
        division.slots, division.pinned = cache_slots(facts, division.free_bytes, options)
        division.coverage = coverage.at(division.slots)
    division.tok_s_predicted = division.tok_s = speed(facts, division.coverage, options)
    return division


class Fit(Record):

    FIELDS = (
        ("facts", REQUIRED),
        ("options", REQUIRED),
        ("reserve", REQUIRED),
        ("usable", REQUIRED),
        ("wanted", REQUIRED),
        ("floor", REQUIRED),
        ("coverage", REQUIRED),
        ("divisions", REQUIRED),
        ("chosen", None),
        ("margin", 0),  # bytes over the modelled compute buffer (0 when --reserve overrides)
        ("compute", None),  # compute.ComputeBuffers at the chosen context (None with --reserve)
        ("host", None),
        ("warnings", list),
        ("notes", list),
    )

    @property
    def verdict(self):
        if self.chosen is None:
            return "unfittable"
        return "native" if self.chosen.tier.label == NATIVE else "override"

    @property
    def shortfall_bytes(self):
        if self.chosen is not None:
            return 0
        return min(division.shortfall_bytes for division in self.divisions)


# ggml types from lowest to highest quantization error at about the same bits per weight (llama.cpp's
# tools/quantize perplexity table: super-block K- and i-quants beat the legacy formats of their size).
ERROR_ORDER = ("f32", "f16", "bf16", "q8_0", "q6_K", "q5_K", "q5_1", "q5_0", "iq4_nl", "q4_K", "iq4_xs", "q4_1",
               "q4_0", "q3_K", "iq3_s", "iq3_xxs", "q2_K", "iq2_s", "iq2_xs", "iq2_xxs", "iq1_m", "iq1_s")


def tier_error_rank(tier):
    """Position of a tier's type in ERROR_ORDER (the type its label stands for: `Q4_K_M` ranks as
    `q4_K`, moetools.tierlabels); the native weights rank first (they need no override), unknown
    types last."""
    from moetools.tierlabels import tier_type

    if tier.label == NATIVE:
        return -1
    kind = tier_type(tier.label)
    return ERROR_ORDER.index(kind) if kind in ERROR_ORDER else len(ERROR_ORDER)


def fit(facts, tiers, options, coverage=None, observations=()):
    """Divide the card for the native weights and every tier; choose the fastest feasible division.

    Raises UsageError for VRAM at or below the reserve, or a context of 0.
    """
    if options.reserve is not None and options.vram <= options.reserve:
        raise UsageError(f"--reserve {format_size(options.reserve)} leaves nothing of VRAM {format_size(options.vram)}")
    if options.reserve is None and options.margin < 0:
        raise UsageError("--margin must not be negative")
    if options.reserve is None and options.vram <= options.margin:
        raise UsageError(f"--margin {format_size(options.margin)} leaves nothing of VRAM {format_size(options.vram)}")
    wanted = facts.shape.context_train if options.ctx is None else options.ctx
    if wanted < 1:
        raise UsageError("the context must be at least 1 token" if options.ctx is not None
                         else "the model's training context is 0; give --ctx")
    if options.min_ctx < 1:
        raise UsageError("--min-ctx must be at least 1 token")
    kvmod.check_settings(facts.shape, options.kv)
    coverage = coverage or Coverage("uniform", total_slots=facts.total_slots)
    warnings, notes = list(facts.warnings), []
    if options.ctx is not None and options.ctx > facts.shape.context_train:
        warnings.append(f"context {options.ctx} is above the training context {facts.shape.context_train}; "
                        "sized as asked, as llama.cpp allocates it")
    floor = min(options.min_ctx, wanted)
    compute = ComputeModel(facts, options)
    fixed = options.margin if compute.modelled else options.reserve
    usable = options.vram - fixed
    # the buffer only grows with the context: the floor's is needed only when the wanted one leaves nothing
    if compute.modelled and compute.at(wanted) >= usable and compute.at(floor) >= usable:
        raise UsageError(f"--margin {format_size(options.margin)} plus the {format_size(compute.at(floor))} compute buffer "
                         f"of a {floor}-token context leave nothing of VRAM {format_size(options.vram)}")
    native = Tier(NATIVE, facts.resident_bytes, facts.path)
    divisions = [divide(facts, tier, options, coverage, usable, wanted, floor, compute) for tier in [native, *tiers]]
    feasible = [division for division in divisions if division.feasible]
    infeasible = {d.tier.label for d in divisions if not d.feasible}
    observations = match_observations(observations, [d.tier.label for d in divisions])
    estimate, runs, ignored = refine({d.tier.label: d.tok_s_predicted for d in feasible},
                                     [o for o in observations if o[0] not in infeasible])
    warnings += ignored
    warnings += [f"ignoring observations of tier {label!r}: it does not fit with these settings"
                 for label in sorted(infeasible & {o[0] for o in observations})]
    for division in feasible:
        division.tok_s = estimate[division.tier.label]
        division.observations = runs[division.tier.label]
    chosen = None
    if feasible:
        # fastest; on a tie the larger (more precise) resident weights, then the lower quantization error
        chosen = max(feasible, key=lambda d: (round(d.tok_s, 9), d.tier.resident_bytes, -tier_error_rank(d.tier)))
    picked = chosen or divisions[0]
    reserve = fixed + picked.compute_bytes if compute.modelled else fixed
    result = Fit(facts, options, reserve, options.vram - reserve, wanted, floor, coverage, divisions, chosen,
                 margin=options.margin if compute.modelled else 0,
                 compute=compute.cache.get(picked.context) if compute.modelled and picked.feasible else None,
                 warnings=warnings, notes=notes)
    if chosen is None:
        notes.append(f"unfittable: {format_size(result.shortfall_bytes)} short for the smallest division "
                     f"(resident weights + KV and compute buffer for {floor} tokens in {format_size(usable)} usable)")
    else:
        if chosen.context < options.min_ctx:
            why = options.ctx_reason if options.ctx is not None else "the model's training context"
            notes.append(f"context {chosen.context} ({why}) is below --min-ctx {options.min_ctx}")
        if facts.dense:
            notes.append("dense model: every weight is resident; no expert budget")
        elif not divisions[0].feasible:
            notes.append("native resident weights do not fit; using a resident tier")
        native_division = divisions[0]
        if chosen is not native_division and native_division.feasible and native_division.tok_s:
            notes.append(f"native fits too; tier {chosen.tier.label} is {chosen.tok_s / native_division.tok_s:.2f}x its speed")
        if not facts.dense and chosen.slots >= facts.total_slots:
            spare = chosen.expert_budget_bytes - facts.total_slots * facts.expert_bytes
            notes.append(f"every expert fits in VRAM ({facts.total_slots} slots); {format_size(max(0, spare))} of the budget is spare")
        elif not facts.dense and coverage.source == "uniform":
            notes.append("coverage is the uniform floor (slots / total slots); give --coverage for a measured curve")
    if options.ram is not None:
        result.host = host_budget(facts, chosen, options, warnings)
        cache = chosen_fork_cache(result)
        if cache is not None and cache.device == "host" and not chosen.observations:
            # the emitted settings put the one cache in host RAM: its slots, and its hits cross PCIe
            slots = min(cache.expert_slots, facts.total_slots)
            chosen.coverage = coverage.at(slots)
            # the pinned host cache takes the RAM past the OS reserve and the mapped bytes (host_budget): with a
            # container no page cache is left for its banks, so its misses are drive reads; a mapped model's
            # experts all fit beside the cache (the budget counts the whole file), so its misses come from RAM
            share = 1.0 if options.container else None
            chosen.tok_s_predicted = chosen.tok_s = speed(facts, chosen.coverage, options, cache_on_host=True, share=share)
    return result


def smallest_vram(facts, tiers, options, coverage=None, limit=1 << 44):
    """The smallest VRAM (to 64 MiB, the reserve rule and settings unchanged) on which some division
    fits at the minimum context, or None past `limit` bytes."""
    def fits(vram):
        trial = options.replace(vram=vram, ctx=options.ctx if options.ctx is not None
                                else min(options.min_ctx, facts.shape.context_train or options.min_ctx))
        try:
            return fit(facts, tiers, trial, coverage).chosen is not None
        except UsageError:  # at or below the reserve
            return False
    from moetools.devicefit.bisect import smallest

    return smallest(fits, options.vram, limit, step=64 * 1024 * 1024)


def fit_trade_off(facts, tiers, options, coverage=None, observations=()):
    """Without `options.ctx`: fit at 4k, 8k, ... 128k and the training context and keep the largest
    context whose speed is within 5% of the best (contexts below --min-ctx are not tried; those that do
    not fit are squeezed, as fit() does).
    With `options.ctx`: fit() as asked. Returns (Fit, rows) — one row per context tried."""
    if options.ctx is not None:
        return fit(facts, tiers, options, coverage, observations), []
    train = facts.shape.context_train
    if train < 1:
        raise UsageError("the model's training context is 0; give --ctx")
    results, rows = {}, []
    for asked in [c for c in contextmod.contexts_to_try(train) if c >= min(options.min_ctx, train)]:
        trial = options.replace(ctx=asked, ctx_reason="the model's training context" if asked == train
                                else "tried for the trade-off")
        result = fit(facts, tiers, trial, coverage, observations)
        chosen = result.chosen
        results[asked] = result
        rows.append({"context_asked": asked, "context": chosen.context if chosen else 0, "feasible": chosen is not None,
                     "tier": chosen.tier.label if chosen else "", "slots": chosen.slots if chosen else 0,
                     "coverage": round(chosen.coverage, 6) if chosen else 0.0, "tok_s": round(chosen.tok_s, 4) if chosen else 0.0})
    picked = contextmod.choose([(row["context_asked"], row["tok_s"]) for row in rows if row["feasible"]])
    if picked is None:
        return results[rows[-1]["context_asked"]], rows
    asked, best = picked
    result = results[asked]
    result.notes.append(f"context {result.chosen.context}: the largest of {', '.join(str(r['context_asked']) for r in rows)} "
                        f"costing at most 5% of the best speed ({result.chosen.tok_s:.2f} vs {best:.2f} tok/s); give --ctx to choose")
    for row in rows:
        row["chosen"] = row["context_asked"] == asked
    return result, rows


def host_budget(facts, chosen, options, warnings):
    """The host expert-cache budget: RAM - OS reserve - the model's mmap footprint, never negative.

    The footprint is every shard's bytes when experts are read through llama.cpp's mmap; with a
    container (its banks read with buffered fread, never mapped) only the resident weights are mapped.
    """
    resident = chosen.tier.resident_bytes if chosen else facts.resident_bytes
    footprint = resident if options.container else facts.file_bytes
    budget = max(0, options.ram - options.os_reserve - footprint)
    if budget + footprint + options.os_reserve > options.ram:
        warnings.append(f"pinned host cache + mapped model ({format_size(footprint)}) + OS reserve exceed RAM ({format_size(options.ram)}): "
                        "no host expert cache; the page cache will thrash")
    return {"ram_bytes": options.ram, "os_reserve_bytes": options.os_reserve, "mmap_bytes": footprint,
            "host_cache_bytes": budget, "host_slots": min(fork_slots(facts, budget), facts.total_slots)}


# --- the document -----------------------------------------------------------------------------

def _division_doc(division, facts):
    """A division's entry, with the same field names as the top level where they apply."""
    doc = division.to_doc()
    doc.update(resident_source=division.tier.label, expert_bytes=facts.expert_bytes,
               experts_per_token=facts.experts_per_token, free_bytes=division.free_bytes)
    return doc


def _fork_cache_doc(result):
    from moetools.devicefit import fork_cache

    cache = chosen_fork_cache(result)
    return fork_cache.cache_doc(cache) if cache else None


def to_doc(result, launch=None):
    """The JSON document of a fit (sizes in bytes)."""
    facts, options, chosen = result.facts, result.options, result.chosen
    picked = chosen or Division(Tier(NATIVE, facts.resident_bytes, facts.path))
    doc = {
        "model": facts.path,
        "architecture": facts.architecture,
        "vram_bytes": options.vram,
        "reserve_bytes": result.reserve,
        "compute_bytes": result.compute.device_bytes if result.compute else 0,
        "compute_host_bytes": result.compute.host_bytes if result.compute else 0,
        "margin_bytes": result.margin,
        "reserve_source": "compute+margin" if result.compute or options.reserve is None else "--reserve",
        "usable_bytes": result.usable,
        "resident_bytes": picked.tier.resident_bytes if chosen else 0,
        "resident_source": picked.tier.label if chosen else "none",
        "resident_gguf": picked.tier.gguf if chosen else "",
        "verdict": result.verdict,
        "context": picked.context,
        "context_wanted": result.wanted,
        "context_train": facts.shape.context_train,
        "min_context": result.floor,
        "kv_bytes": picked.kv_bytes,
        "kv_bytes_per_token": kvmod.bytes_per_token(facts.shape, options.kv),
        "kv": [cache.to_doc() for cache in picked.kv],
        "ctk": options.kv.ctk,
        "ctv": options.kv.ctv,
        "ubatch": kvmod.n_ubatch(options.kv, picked.context or result.wanted),
        "parallel": options.kv.n_seq,
        "kv_unified": options.kv.unified,
        "swa_full": options.kv.swa_full,
        "flash_attn": options.kv.flash_attn,
        "expert_budget_bytes": picked.expert_budget_bytes,
        "fork_cache": _fork_cache_doc(result),
        "free_bytes": picked.free_bytes,
        "slots": picked.slots,
        "total_slots": facts.total_slots,
        "expert_bytes": facts.expert_bytes,
        "experts_per_token": facts.experts_per_token,
        "coverage": round(picked.coverage, 6),
        "speed_assumes": speed_assumes(result),
        "coverage_source": result.coverage.label,
        "tok_s": round(picked.tok_s, 4),
        "tok_s_predicted": round(picked.tok_s_predicted, 4),
        "h2d_bytes_per_s": options.h2d_bytes_per_s,
        "floor_s": options.floor_s,
        "shortfall_bytes": result.shortfall_bytes,
        "divisions": [_division_doc(division, facts) for division in result.divisions],
        "host": result.host,
        "warnings": list(result.warnings),
        "notes": list(result.notes),
    }
    if launch is not None:
        doc["launch"] = launch
    return doc


def fork_default_reserve(vram_bytes):
    """The compute reserve the fork's own planning holds back when nothing is measured: max(2 GiB, 10% of
    VRAM) (CambrianTech/continuum core/continuum-core/src/capacity/device_fit.rs
    default_compute_reserve_bytes, which states it mirrors the fork's fit-device `--reserve-gb` default).
    Shown beside device-fit's own reserve, never used in the division."""
    return max(2 * GIB, int(vram_bytes) // 10)


def fork_ledger(result, name):
    """The fork's division as a one-device ledger (the same fields as --runtime llama's `devices`)."""
    chosen = result.chosen
    capacity = result.options.vram
    compute = result.reserve - result.margin  # the modelled buffer, or the whole --reserve
    if chosen is None:
        return [{"name": name, "kind": "gpu", "capacity_bytes": capacity, "compute_bytes": compute,
                 "resident_bytes": 0, "kv_bytes": 0, "expert_bytes": 0, "margin_bytes": result.margin,
                 "free_bytes": capacity - result.reserve}]
    return [{"name": name, "kind": "gpu", "capacity_bytes": capacity, "compute_bytes": compute,
             "resident_bytes": chosen.tier.resident_bytes, "kv_bytes": chosen.kv_bytes,
             "expert_bytes": chosen.expert_budget_bytes, "margin_bytes": result.margin,
             "free_bytes": capacity - result.reserve - chosen.tier.resident_bytes - chosen.kv_bytes - chosen.expert_budget_bytes}]
