"""Expert container (`GGML_MOE_CONTAINER`, a folder): manifest, record header, checksum sidecars.

The only module that reads or writes the container's on-disk layout (DESIGN section 3):

- `manifest.json`: `version`, `model`, `fmt`, `record_bytes`, `n_layers`, `experts_per_layer`,
  `activated_per_token` (the serving fork's keys), plus moetools' own: `layers` (GGUF block number of
  each bank), `banks` (each bank's record layout: ggml type, offset and bytes of gate, up and down,
  its fork `fmt` code, and its source tensors' identity), `matrix_types` (when `fmt` is "mixed"),
  `source` (file, path, fingerprint), `expert_biases` and `checksums`. The fork and the daemon
  ignore keys they do not know.
- `experts-L{N}.bin`, N the GGUF block number: record r (expert r) at `r * record_bytes`. A record is
  a 32-byte little-endian header, then gate | up | down back to back, zero padding. The header's
  `fmt` byte is the fork's code (FORK_FMT_CODES), `corr_off` 0: moetools writes no FP16 corrections,
  and expert biases stay in the GGUF (the fork's server streams only the MUL_MAT_ID weights).

Manifests written by the fork's own packer (CambrianTech/llama.cpp `ggml-moe-packer.h`
`moec_pack_dir`, called by tools/moe-pack: numeric `fmt`, no `banks`, banks `experts-L{n}` for
n = 0..n_layers-1) are read too: each bank's layout then comes from its first record header.
- `experts-L{N}.xxh3` (moetools only; the fork ignores it): a 32-byte header then one little-endian
  u64 xxh3-64 per record, over the whole record including header and padding.

Version 2 (tiered, `container-encode --tiers`): the manifest adds `tiers[] {id, quant, record_bytes}`
(descending fidelity, id = index; moetools adds each tier's `fmt` and `banks`), and every bank is
`experts-L{N}-T{t}.bin` (sidecar `experts-L{N}-T{t}.xxh3`), each tier with its own record size. The
readers: CambrianTech/continuum core/continuum-core/src/capacity/expert_container.rs
(`ExpertContainer::open`: KNOWN_VERSION 2, tier id == index, every tier's record_bytes a 4 KiB
multiple; `bank_path`: the version picks the naming) and CambrianTech/llama.cpp
ggml/src/ggml-moe-container-fetcher.h `TieredContainerFetcher::read` (bank per (layer, tier), record
at expert * that tier's record_bytes). The top-level `record_bytes` and `fmt` are tier 0's (the daemon's
serde needs them); the fork's `moec_pack_dir_tiered` (ggml-moe-packer.h) writes no top-level
record_bytes and numeric quants, and is read too. A v2 manifest read here is the tier-0 view:
`ContainerManifest.tier_view(t)` gives tier t's record size, banks and file names.
"""

import dataclasses
import os
import struct
from collections import namedtuple
from dataclasses import dataclass, field

from moetools import atomic
from moetools.errors import FormatError
from moetools.formats.jsonio import load_json, require

VERSION = 1  # what a single-tier encode writes (byte-identical to earlier moetools)
TIERED_VERSION = 2  # container-encode --tiers
KNOWN_VERSION = 2  # the newest this moetools reads (expert_container.rs ExpertContainer::KNOWN_VERSION)
MANIFEST_NAME = "manifest.json"
MAGIC = b"WEXP"
HEADER_BYTES = 32
PAGE_BYTES = 4096  # O_DIRECT granularity: record_4k_blocks counts these
RECORD_ALIGN = 16384  # record_bytes is rounded up to this
MATRICES = ("gate", "up", "down")

# "WEXP", layer u16 @4, expert u16 @6, fmt u8 @8, flags u8 @9, codebook u16 @10,
# gate_off u32 @12, up_off u32 @16, down_off u32 @20, corr_off u32 @24, record_4k_blocks u32 @28
HEADER = struct.Struct("<4sHHBBHIIIII")
assert HEADER.size == HEADER_BYTES

CHECKSUM_MAGIC = b"WXH3"
CHECKSUM_VERSION = 1  # what a single-tier encode writes (byte-identical to earlier moetools)
TIERED_VERSION = 2  # container-encode --tiers
KNOWN_VERSION = 2  # the newest this moetools reads (expert_container.rs ExpertContainer::KNOWN_VERSION)
# magic, version u16, layer u16, n_records u32, reserved u32, record_bytes u64, source fingerprint 8 bytes
CHECKSUM_HEADER = struct.Struct("<4sHHIIQ8s")
assert CHECKSUM_HEADER.size == 32


def align_up(value, alignment):
    return -(-value // alignment) * alignment


def bank_name(layer):
    return f"experts-L{layer}.bin"


def checksum_name(layer):
    return f"experts-L{layer}.xxh3"


def tier_bank_name(layer, tier):
    """A v2 bank: expert_container.rs bank_path and TieredContainerFetcher::bank name it so, every
    tier included (a single-tier v2 container too)."""
    return f"experts-L{layer}-T{tier}.bin"


def tier_checksum_name(layer, tier):
    return f"experts-L{layer}-T{tier}.xxh3"


def is_container_file(name):
    """True for a name the container owns (manifest, bank, sidecar, or a temporary twin of one)."""
    base = name[1:] if name.startswith(".") else name
    return base.startswith((MANIFEST_NAME, "experts-L"))


# --- the fork's record format code ------------------------------------------------------------

# The header `fmt` byte in the fork's code space, not a ggml type id: CambrianTech/llama.cpp
# ggml/src/ggml-moe-container.h `MoecQuant` (UNKNOWN 0, RVQ3 1, IQ2 2, MXFP4 3) and
# ggml/src/ggml-moe-wexp.h `WexpFmt` (VQ3R 4, VQ2R 5, "never 0/1"); the fork's packer
# (tools/moe-pack, Iq2ExpertSource) byte-copies IQ2 experts with fmt 2 "confirmed against MoecQuant",
# and writes the same number as the manifest's `fmt`. moetools byte-copies GGUF experts too, so a
# record gets IQ2 or MXFP4 by its gate matrix's type, else UNKNOWN (0): the fork has no code for
# other ggml types (a Q4_0 gate's ggml id, 2, read as IQ2 by the fork, was the bug).
FORK_FMT_CODES = {"UNKNOWN": 0, "RVQ3": 1, "IQ2": 2, "MXFP4": 3, "VQ3R": 4, "VQ2R": 5}
FORK_FMT_NAMES = {code: name for name, code in FORK_FMT_CODES.items()}
_GGML_FAMILY = {"iq2_xxs": "IQ2", "iq2_xs": "IQ2", "iq2_s": "IQ2", "mxfp4": "MXFP4"}


def fork_fmt_code(gate_type_name):
    """The fork's record `fmt` (FORK_FMT_CODES) for a record whose gate matrix has this ggml type:
    the gate's family, as the fork's packer labels K3's records IQ2 with IQ2_XS gate and up and an
    IQ3_XXS down; UNKNOWN (0) for a family the fork has no code for."""
    family = _GGML_FAMILY.get(gate_type_name)
    return FORK_FMT_CODES[family] if family else FORK_FMT_CODES["UNKNOWN"]


def fork_fmt_name(code):
    return FORK_FMT_NAMES.get(code, f"code{code}")


# --- record header -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordHeader:
    """The 32-byte header at the start of every record; offsets are relative to the record start."""

    layer: int
    expert: int
    fmt: int  # the fork's code (FORK_FMT_CODES), not a ggml type id
    flags: int
    codebook: int
    gate_off: int
    up_off: int
    down_off: int
    corr_off: int  # the fork's FP16 corrections: 0, moetools writes none
    record_4k_blocks: int  # record_bytes / 4096

    FIELDS = ("magic", "layer", "expert", "fmt", "flags", "codebook", "gate_off", "up_off", "down_off",
              "corr_off", "record_4k_blocks")

    def pack_into(self, buffer, offset=0):
        HEADER.pack_into(buffer, offset, MAGIC, self.layer, self.expert, self.fmt, self.flags, self.codebook,
                         self.gate_off, self.up_off, self.down_off, self.corr_off, self.record_4k_blocks)

    def pack(self):
        buffer = bytearray(HEADER_BYTES)
        self.pack_into(buffer)
        return bytes(buffer)

    @classmethod
    def unpack(cls, buffer, offset=0):
        """Parse a header; raises ValueError when the magic is not `WEXP`."""
        magic, *values = HEADER.unpack_from(buffer, offset)
        if magic != MAGIC:
            raise ValueError(f"magic is {magic!r}, not {MAGIC!r}")
        return cls(*values)

    def differences(self, other):
        """[(field, self value, other value)] for every field that differs."""
        return [(name, getattr(self, name), getattr(other, name)) for name in self.FIELDS[1:]
                if getattr(self, name) != getattr(other, name)]


# --- bank layout -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slice:
    """One piece of a record: a matrix (`gate`, `up`, `down`) or an expert bias (`gate_bias`, ...)."""

    name: str
    type_name: str  # ggml type name
    offset: int  # from the record start
    n_bytes: int

    @property
    def end(self):
        return self.offset + self.n_bytes

    def to_doc(self):
        return {"type": self.type_name, "offset": self.offset, "bytes": self.n_bytes}


@dataclass(frozen=True)
class BankLayout:
    """Where each slice sits in every record of one bank (all records of a bank share it)."""

    layer: int  # the bank's number: in its file name experts-L{layer}.bin and in every header's `layer`
    slices: tuple  # Slice: gate, up, down (then the biases an older moetools put there), from HEADER_BYTES
    block: int = None  # GGUF block number of the bank's experts (= layer with --banks block)
    fmt_code: int = None  # the header fmt read from a fork-packed bank; None: derived from the types
    from_header: bool = False  # layout read from a record header (a fork-packed bank): down's end unknown

    def slice(self, name):
        for piece in self.slices:
            if piece.name == name:
                return piece
        raise KeyError(name)

    @property
    def corr(self):
        return self.slices[3:]

    @property
    def corr_off(self):
        return self.slices[3].offset if len(self.slices) > 3 else 0

    @property
    def payload_bytes(self):
        return self.slices[-1].end

    @property
    def fmt_id(self):
        if self.fmt_code is not None:
            return self.fmt_code
        return fork_fmt_code(self.slice("gate").type_name)

    def header(self, expert, record_bytes):
        """The header record `expert` of this bank must carry."""
        return RecordHeader(
            layer=self.layer, expert=expert, fmt=self.fmt_id, flags=0, codebook=0,
            gate_off=self.slice("gate").offset, up_off=self.slice("up").offset,
            down_off=self.slice("down").offset, corr_off=self.corr_off,
            record_4k_blocks=record_bytes // PAGE_BYTES,
        )

    def to_doc(self):
        doc = {"layer": self.layer, "file": bank_name(self.layer), "checksums": checksum_name(self.layer),
               "fork_fmt": self.fmt_id}
        for piece in self.slices[:3]:
            doc[piece.name] = piece.to_doc()
        doc["corr"] = [{"name": piece.name} | piece.to_doc() for piece in self.corr]
        doc["payload_bytes"] = self.payload_bytes
        return doc


def layout_slices(layer, pieces, block=None):
    """A BankLayout from [(name, ggml type name, bytes)] in record order (gate, up, down, biases)."""
    slices, offset = [], HEADER_BYTES
    for name, type_name, n_bytes in pieces:
        slices.append(Slice(name, type_name, offset, n_bytes))
        offset += n_bytes
    return BankLayout(layer, tuple(slices), layer if block is None else block)


# How banks are numbered (file name experts-L{N}.bin and each record header's `layer`):
# "block" = the GGUF block number, what the fork's server opens (and its packer writes: block =
# layer_base + L); "ordinal" = the MoE-layer ordinal, L0 = the first routed layer, what the daemon's
# reader (continuum expert_container.rs ExpertBank::open / verify_identity) expects and checks.
BANK_NUMBERINGS = ("block", "ordinal")
DEFAULT_BANK_NUMBERING = "block"


def other_numbering(numbering):
    return "ordinal" if numbering == "block" else "block"


def bank_numbers(blocks, numbering):
    """Bank numbers for the ascending GGUF `blocks` of the MoE layers under `numbering`."""
    return list(blocks) if numbering == "block" else list(range(len(blocks)))


# --- tiers (v2) ---------------------------------------------------------------------------------


@dataclass
class TierSpec:
    """One precision tier of a v2 container: `id` (= its index, 0 the sharpest), `quant` (the label
    the daemon carries through: the ggml type name, upper case, e.g. "Q4_K"), its own `record_bytes`
    and bank layouts (one per MoE layer, same bank numbers as every other tier)."""

    id: int
    quant: str
    record_bytes: int
    banks: list  # BankLayout per MoE layer
    fmt: str = ""  # ggml type name of every matrix of this tier, or "mixed"

    def to_doc(self):
        banks = []
        for bank in self.banks:
            doc = bank.to_doc()
            doc["file"] = tier_bank_name(bank.layer, self.id)
            doc["checksums"] = tier_checksum_name(bank.layer, self.id)
            banks.append(doc)
        return {"id": self.id, "quant": self.quant, "record_bytes": self.record_bytes, "fmt": self.fmt, "banks": banks}


# --- manifest ----------------------------------------------------------------------------------


@dataclass
class ContainerManifest:
    model: str  # source model stem, e.g. "kimi-k3"
    fmt: str  # ggml type name of every expert matrix, or "mixed"
    record_bytes: int
    experts_per_layer: int
    activated_per_token: int  # top-k x MoE layers
    banks: list  # BankLayout per MoE layer, ascending block number
    matrix_types: dict = None  # when fmt is "mixed": matrix -> type name, or per-bank list of names
    top_k: int = 0
    source: dict = field(default_factory=dict)  # file, shards, architecture, fingerprint, expert_bytes
    version: int = VERSION
    bank_numbering: str = DEFAULT_BANK_NUMBERING  # see BANK_NUMBERINGS
    extra: dict = field(default_factory=dict)  # unknown keys, kept
    path: str = ""  # where it was read from (not written)
    # {bank number: [source tensor identity]}: per tensor a bank's records come from, its name, shard
    # file, offset and bytes, and the shard's size and mtime_ns when encoded (written as each bank's
    # "source"): a rerun keeps a bank without reading the source only while these are unchanged.
    bank_sources: dict = field(default_factory=dict)
    packer: str = "moetools"  # "fork": written by the fork's moec_pack_dir (no banks, sidecars or source)
    tiers: list = field(default_factory=list)  # TierSpec per tier (v2); empty for v1
    tier: int = None  # which tier this view reads (v2: 0 unless tier_view chose another)

    @property
    def n_layers(self):
        return len(self.banks)

    @property
    def layers(self):
        return [bank.layer for bank in self.banks]

    @property
    def fingerprint(self):
        return self.source.get("fingerprint", "")

    @property
    def bank_bytes(self):
        return self.record_bytes * self.experts_per_layer

    @property
    def n_tiers(self):
        return len(self.tiers) or 1

    @property
    def tier_labels(self):
        """The ladder's quant labels, tier 0 first (a v1 container: its one fmt)."""
        return [tier.quant for tier in self.tiers] or [self.fmt]

    def bank_file(self, layer):
        """File name of this view's bank `layer` (the version picks the naming, as the daemon's does)."""
        return tier_bank_name(layer, self.tier or 0) if self.version >= TIERED_VERSION else bank_name(layer)

    def checksum_file(self, layer):
        return tier_checksum_name(layer, self.tier or 0) if self.version >= TIERED_VERSION else checksum_name(layer)

    def tier_view(self, tier):
        """This manifest as tier `tier` reads it: that tier's record_bytes, fmt, banks and file names.
        Raises KeyError for a tier outside the ladder."""
        if not self.tiers:
            if tier != 0:
                raise KeyError(tier)
            return self
        if not 0 <= tier < len(self.tiers):
            raise KeyError(tier)
        spec = self.tiers[tier]
        return dataclasses.replace(self, record_bytes=spec.record_bytes, fmt=spec.fmt or spec.quant, banks=spec.banks,
                                   matrix_types=None, tier=tier)

    def bank(self, layer):
        for bank in self.banks:
            if bank.layer == layer:
                return bank
        raise KeyError(layer)

    def to_doc(self):
        doc = {
            "version": self.version,
            "model": self.model,
            "fmt": self.fmt,
            "record_bytes": self.record_bytes,
            "n_layers": self.n_layers,
            "experts_per_layer": self.experts_per_layer,
            "activated_per_token": self.activated_per_token,
            "layers": self.layers,
            "bank_numbering": self.bank_numbering,
            "blocks": [bank.block for bank in self.banks],
            "top_k": self.top_k,
            "top_k_per_layer": self.top_k,
        }
        if self.matrix_types:
            doc["matrix_types"] = self.matrix_types
        doc["header_bytes"] = HEADER_BYTES
        files = "experts-L{N}-T{t}.xxh3" if self.tiers else "experts-L{N}.xxh3"
        doc["checksums"] = {"algorithm": "xxh3_64", "files": files, "scope": "whole record"}
        doc["source"] = self.source
        if self.tiers:  # v2: the banks are per tier, each tier row carries its own
            doc["tiers"] = [tier.to_doc() for tier in self.tiers]
            bank_lists = [tier_doc["banks"] for tier_doc in doc["tiers"]]
        else:
            doc["banks"] = [bank.to_doc() for bank in self.banks]
            bank_lists = [doc["banks"]]
        for bank_docs in bank_lists:
            for bank_doc, bank in zip(bank_docs, self.banks):
                if bank.layer in self.bank_sources:
                    bank_doc["source"] = self.bank_sources[bank.layer]
        doc.update(self.extra)
        return doc


def write_manifest(folder, manifest):
    """Write `manifest.json` atomically (the encoder writes it last, once every bank is complete)."""
    atomic.write_json(os.path.join(folder, MANIFEST_NAME), manifest.to_doc())


def manifest_path(folder_or_file):
    path = os.fspath(folder_or_file)
    return os.path.join(path, MANIFEST_NAME) if os.path.isdir(path) else path


def _int(doc, key, path, what, minimum=0):
    value = require(doc, key, int, path, what)
    if value < minimum:
        raise FormatError(path, f"{key} is {value}, must be at least {minimum}", key=key)
    return value


def _bank_from_doc(doc, path, index):
    what = f"bank {index} of the container manifest"
    layer = _int(doc, "layer", path, what)
    pieces = []
    for name in MATRICES:
        piece = require(doc, name, dict, path, what)
        pieces.append((name, require(piece, "type", str, path, what), _int(piece, "bytes", path, what, 1)))
    for piece in doc.get("corr") or []:
        pieces.append((require(piece, "name", str, path, what), require(piece, "type", str, path, what),
                       _int(piece, "bytes", path, what, 1)))
    layout = layout_slices(layer, pieces)
    declared = [doc[name].get("offset") for name in MATRICES] + [piece.get("offset") for piece in doc.get("corr") or []]
    actual = [piece.offset for piece in layout.slices]
    if any(d is not None and d != a for d, a in zip(declared, actual)):
        raise FormatError(path, f"bank of layer {layer}: slice offsets {declared} are not back to back from {HEADER_BYTES}",
                          key=f"banks[{index}]")
    return layout


def _bank_from_header(folder, layer, record_bytes, path, name=bank_name):
    """A fork-packed bank's layout from its first record header (moec_pack_dir's manifest lists no
    banks): gate | up | down back to back from the header, down running to corr_off (or to the
    record's end: the fork does not say where it ends). None when the bank has no readable header."""
    try:
        with open(os.path.join(folder, name(layer)), "rb") as handle:
            header = RecordHeader.unpack(handle.read(HEADER_BYTES).ljust(HEADER_BYTES, b"\0"))
    except (OSError, ValueError, struct.error):
        return None
    end = header.corr_off or record_bytes
    offsets = (header.gate_off, header.up_off, header.down_off, end)
    if header.gate_off != HEADER_BYTES or not all(a < b for a, b in zip(offsets, offsets[1:])) or end > record_bytes:
        raise FormatError(os.path.join(folder, name(layer)),
                          f"record header offsets gate {header.gate_off}, up {header.up_off}, down {header.down_off}, "
                          f"corr {header.corr_off} are not gate | up | down back to back from {HEADER_BYTES} within "
                          f"record_bytes {record_bytes}", offset=0)
    kind = fork_fmt_name(header.fmt)
    pieces = [(name, kind, b - a) for name, a, b in zip(MATRICES, offsets, offsets[1:])]
    if header.corr_off:
        pieces.append(("corrections", "f16", record_bytes - header.corr_off))
    layout = layout_slices(layer, pieces)
    return BankLayout(layer, layout.slices, layer, fmt_code=header.fmt, from_header=True)


def _fork_packed_banks(folder, n_layers, record_bytes, path, name=bank_name):
    """Layouts of a fork-packed container's banks experts-L0..L{n_layers-1} (moec_pack_dir numbers
    them 0.. and its Iq2ExpertSource writes header layer = that number). A bank without a readable
    header borrows another's layout, so verify can still name it missing or broken."""
    layouts = [_bank_from_header(folder, layer, record_bytes, path, name) for layer in range(n_layers)]
    template = next((layout for layout in layouts if layout is not None), None)
    if template is None:
        raise FormatError(path, f"a manifest of the fork's packer (no \"banks\"), and no bank {name(0)}.. has a "
                                "readable record header to take the layout from", key="banks")
    return [layout if layout is not None else BankLayout(layer, template.slices, layer, template.fmt_code, True)
            for layer, layout in enumerate(layouts)]


def _manifest_doc(folder_or_file):
    """(path, JSON object, version) of a container's manifest.json; FormatError when there is none,
    or its version is newer than this moetools reads."""
    path = manifest_path(folder_or_file)
    if not os.path.exists(path):
        raise FormatError(path, "no container manifest here (is this a container folder?)")
    doc = load_json(path, "container manifest")
    version = _int(doc, "version", path, "container manifest", 1)
    if version > KNOWN_VERSION:
        raise FormatError(path, f"container version {version} is newer than this moetools reads ({KNOWN_VERSION})", key="version")
    return path, doc, version


Ladder = namedtuple("Ladder", "path labels record_bytes")


def read_ladder(folder_or_file):
    """The precision ladder of a container: its tiers' labels and record sizes, tier 0 first (a v1
    container: its one tier, `fmt` and `record_bytes`, as expert_container.rs `effective_tiers`
    synthesizes it). Reads manifest.json only, checked as the daemon's `ExpertContainer::open`
    checks the ladder (version, tier id == index, record_bytes a 4096 multiple); no bank is opened,
    so device-fit's header path stays cheap. Raises FormatError (exit 2)."""
    path, doc, version = _manifest_doc(folder_or_file)
    what = "container manifest"
    if version >= TIERED_VERSION:
        rows = _tier_docs(doc, path)
    else:
        rows = [{"quant": doc.get("fmt"), "record_bytes": _int(doc, "record_bytes", path, what, PAGE_BYTES)}]
    labels = [row["quant"] if isinstance(row["quant"], str) else
              fork_fmt_name(row["quant"]) if isinstance(row["quant"], int) else "" for row in rows]
    return Ladder(path, labels, [row["record_bytes"] for row in rows])


def read_manifest(folder_or_file):
    """Parse and validate `manifest.json` (given the container folder or the file itself)."""
    path, doc, version = _manifest_doc(folder_or_file)
    what = "container manifest"
    tier_docs = None
    if version >= TIERED_VERSION:
        tier_docs = _tier_docs(doc, path)
        if "record_bytes" not in doc:  # moec_pack_dir_tiered writes none: tier 0's is the top-level one
            doc = dict(doc, record_bytes=tier_docs[0]["record_bytes"])
        doc = {key: value for key, value in doc.items() if key != "banks"}
        if "banks" in tier_docs[0]:
            doc["banks"] = tier_docs[0]["banks"]
    record_bytes = _int(doc, "record_bytes", path, what, PAGE_BYTES)
    if record_bytes % PAGE_BYTES:
        raise FormatError(path, f"record_bytes {record_bytes} is not a multiple of {PAGE_BYTES}", key="record_bytes")
    n_layers = _int(doc, "n_layers", path, what)
    packer = "moetools" if "banks" in doc else "fork"
    fmt_value = doc.get("fmt")
    if packer == "fork":
        # moec_pack_dir: numeric fmt (MoecQuant), no banks/layers/blocks/sidecars, ordinal bank numbers
        if isinstance(fmt_value, int) and not isinstance(fmt_value, bool):
            doc = dict(doc, fmt=fork_fmt_name(fmt_value))
        doc.setdefault("bank_numbering", "ordinal")
        bank_docs = []
        first_name = (lambda layer: tier_bank_name(layer, 0)) if tier_docs else bank_name
        banks = _fork_packed_banks(os.path.dirname(path), n_layers, record_bytes, path, first_name)
    else:
        bank_docs = require(doc, "banks", list, path, what)
        banks = [_bank_from_doc(bank, path, index) for index, bank in enumerate(bank_docs)]
    bank_sources = {bank.layer: bank_doc["source"] for bank, bank_doc in zip(banks, bank_docs)
                    if isinstance(bank_doc.get("source"), list)}
    if len(banks) != n_layers:
        raise FormatError(path, f"n_layers is {n_layers} but {len(banks)} banks are listed", key="n_layers")
    layers = doc.get("layers")
    if layers is not None and layers != [bank.layer for bank in banks]:
        raise FormatError(path, f"layers {layers} differ from the banks' layers", key="layers")
    if len({bank.layer for bank in banks}) != len(banks):
        raise FormatError(path, "a layer is listed twice", key="banks")
    for bank in banks:
        if bank.payload_bytes > record_bytes:
            raise FormatError(path, f"layer {bank.layer}'s record payload ({bank.payload_bytes} bytes) exceeds record_bytes {record_bytes}",
                              key="record_bytes")
    numbering = doc.get("bank_numbering", DEFAULT_BANK_NUMBERING)
    if numbering not in BANK_NUMBERINGS:
        raise FormatError(path, f"bank_numbering {numbering!r} is neither 'block' nor 'ordinal'", key="bank_numbering")
    blocks = doc.get("blocks")
    if blocks is not None:
        if not isinstance(blocks, list) or len(blocks) != len(banks) or not all(isinstance(b, int) for b in blocks):
            raise FormatError(path, "blocks must list one GGUF block number per bank", key="blocks")
        banks = [BankLayout(bank.layer, bank.slices, block, bank.fmt_code, bank.from_header) for bank, block in zip(banks, blocks)]
    if numbering == "ordinal" and [bank.layer for bank in banks] != list(range(len(banks))):
        raise FormatError(path, "bank_numbering 'ordinal' needs banks numbered 0..n_layers-1", key="banks")
    top_k = doc.get("top_k", doc.get("top_k_per_layer", 0))
    known = {"version", "model", "fmt", "record_bytes", "n_layers", "experts_per_layer", "activated_per_token",
             "layers", "top_k", "matrix_types", "header_bytes", "checksums", "source", "banks", "bank_numbering",
             "blocks", "top_k_per_layer", "tiers"}
    tiers = []
    if tier_docs:
        blocks_of = [bank.block for bank in banks]
        tiers = _tiers_from_docs(tier_docs, os.path.dirname(path), n_layers, path, packer, [bank.layer for bank in banks], blocks_of)
        if packer == "moetools":
            banks = tiers[0].banks
        fmt_value = doc.get("fmt")
        if isinstance(fmt_value, int) and not isinstance(fmt_value, bool):
            doc = dict(doc, fmt=fork_fmt_name(fmt_value))
    source = doc.get("source") or {}
    if not isinstance(source, dict):
        raise FormatError(path, "source must be an object", key="source")
    return ContainerManifest(
        model=require(doc, "model", str, path, what),
        fmt=require(doc, "fmt", str, path, what),
        record_bytes=record_bytes,
        experts_per_layer=_int(doc, "experts_per_layer", path, what, 1),
        activated_per_token=_int(doc, "activated_per_token", path, what),
        banks=banks,
        matrix_types=doc.get("matrix_types"),
        top_k=top_k if isinstance(top_k, int) and not isinstance(top_k, bool) else 0,
        bank_numbering=numbering,
        source=source,
        version=version,
        extra={key: value for key, value in doc.items() if key not in known},
        path=path,
        bank_sources=bank_sources,
        packer=packer,
        tiers=tiers,
        tier=0 if tiers else None,
    )


def _tier_docs(doc, path):
    """A v2 manifest's `tiers` rows, checked as expert_container.rs ExpertContainer::open checks them:
    id == index, record_bytes a positive multiple of 4096; none (or []) is one tier from the top level."""
    rows = doc.get("tiers")
    if rows is None or rows == []:
        # effective_tiers(): no tiers is the degenerate single tier {0, fmt, record_bytes}, whose banks
        # a version-2 reader still names experts-L{n}-T0.bin (bank_path)
        rows = [{"id": 0, "quant": doc.get("fmt", ""), "record_bytes": doc.get("record_bytes")}]
        if "banks" in doc:
            rows[0]["banks"] = doc["banks"]
    if not isinstance(rows, list):
        raise FormatError(path, "\"tiers\" of a version-2 container manifest must be a list", key="tiers")
    for index, row in enumerate(rows):
        what = f"tiers[{index}] of the container manifest"
        if not isinstance(row, dict):
            raise FormatError(path, f"{what} is not an object", key=f"tiers[{index}]")
        tier_id = require(row, "id", int, path, what)
        if tier_id != index:
            raise FormatError(path, f"tiers[{index}] has id {tier_id}: tier ids must equal their index "
                                    f"(descending fidelity, expert_container.rs TierIdMismatch)", key=f"tiers[{index}].id")
        quant = row.get("quant")
        if isinstance(quant, bool) or not isinstance(quant, (str, int)):
            raise FormatError(path, f"{what}: quant must be a label (or the fork packer's MoecQuant number)",
                              key=f"tiers[{index}].quant")
        record_bytes = _int(row, "record_bytes", path, what, PAGE_BYTES)
        if record_bytes % PAGE_BYTES:
            raise FormatError(path, f"tiers[{index}] record_bytes {record_bytes} is not a multiple of {PAGE_BYTES}",
                              key=f"tiers[{index}].record_bytes")
    return rows


def _tiers_from_docs(rows, folder, n_layers, path, packer, layers, blocks):
    """TierSpecs of a v2 manifest: moetools' rows carry their banks; the fork's packer's rows do not,
    and each tier's layout then comes from its banks' first record headers."""
    tiers = []
    for index, row in enumerate(rows):
        quant = row["quant"] if isinstance(row["quant"], str) else fork_fmt_name(row["quant"])
        record_bytes = row["record_bytes"]
        if "banks" in row:
            bank_docs = require(row, "banks", list, path, f"tiers[{index}]")
            banks = [_bank_from_doc(bank, path, position) for position, bank in enumerate(bank_docs)]
        else:
            banks = _fork_packed_banks(folder, n_layers, record_bytes, path, lambda layer, t=index: tier_bank_name(layer, t))
        if [bank.layer for bank in banks] != layers:
            raise FormatError(path, f"tiers[{index}] lists banks {[bank.layer for bank in banks]}, tier 0 {layers}",
                              key=f"tiers[{index}].banks")
        for bank in banks:
            if bank.payload_bytes > record_bytes:
                raise FormatError(path, f"tier {index} layer {bank.layer}: record payload ({bank.payload_bytes} bytes) "
                                        f"exceeds the tier's record_bytes {record_bytes}", key=f"tiers[{index}].record_bytes")
        banks = [BankLayout(bank.layer, bank.slices, block, bank.fmt_code, bank.from_header) for bank, block in zip(banks, blocks)]
        tiers.append(TierSpec(index, quant, record_bytes, banks, row.get("fmt") or quant))
    return tiers


def missing_tier_banks(folder, manifest):
    """Bank files a v2 manifest names that are not in `folder` (paths), tier by tier."""
    missing = []
    for tier in range(len(manifest.tiers)):
        view = manifest.tier_view(tier)
        missing += [os.path.join(folder, view.bank_file(layer)) for layer in view.layers
                    if not os.path.exists(os.path.join(folder, view.bank_file(layer)))]
    return missing


# --- checksum sidecar --------------------------------------------------------------------------


@dataclass
class Checksums:
    """One bank's sidecar: xxh3-64 of every record, and what it was computed for."""

    layer: int
    record_bytes: int
    fingerprint: str  # source model fingerprint (16 hex digits)
    digests: list  # int per record
    path: str = ""

    def pack(self):
        fingerprint = bytes.fromhex(self.fingerprint) if self.fingerprint else bytes(8)
        head = CHECKSUM_HEADER.pack(CHECKSUM_MAGIC, CHECKSUM_VERSION, self.layer, len(self.digests), 0,
                                    self.record_bytes, fingerprint.ljust(8, b"\0")[:8])
        return head + struct.pack(f"<{len(self.digests)}Q", *self.digests)


def write_checksums(folder, checksums):
    atomic.write_bytes(os.path.join(folder, checksum_name(checksums.layer)), checksums.pack())


def read_checksums(path):
    """Parse a bank's checksum sidecar. Raises FormatError naming the file and offset."""
    path = os.fspath(path)
    with open(path, "rb") as handle:
        data = handle.read()
    if len(data) < CHECKSUM_HEADER.size:
        raise FormatError(path, f"checksum file is {len(data)} bytes, shorter than its {CHECKSUM_HEADER.size}-byte header")
    magic, version, layer, count, _reserved, record_bytes, fingerprint = CHECKSUM_HEADER.unpack_from(data)
    if magic != CHECKSUM_MAGIC:
        raise FormatError(path, f"not a moetools checksum file (magic {magic!r})", offset=0)
    if version != CHECKSUM_VERSION:
        raise FormatError(path, f"checksum file version {version} is not {CHECKSUM_VERSION}", offset=4)
    expected = CHECKSUM_HEADER.size + 8 * count
    if len(data) != expected:
        raise FormatError(path, f"checksum file is {len(data)} bytes, {count} records need {expected}", offset=min(len(data), expected))
    digests = list(struct.unpack_from(f"<{count}Q", data, CHECKSUM_HEADER.size))
    return Checksums(layer, record_bytes, fingerprint.hex(), digests, path)
