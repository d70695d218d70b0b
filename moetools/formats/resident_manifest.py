"""Resident manifest (`X.gguf.resident.json`, beside its GGUF `X.gguf`): one precision tier of a
model's resident weights, as `quantize --resident-only` writes it and device-fit and the daemon read it.

Required (the daemon's contract, CambrianTech/continuum `division_actuation.rs`
`parse_resident_manifest`): a non-empty `tier_label` (the type or mix name) and a positive
`resident_bytes`; moetools also writes `resident_only` 1. `discover_resident_tiers` finds the GGUF by
dropping the `.resident.json` suffix from the manifest's path, so the manifest is named after its
GGUF. Readers ignore extra keys; moetools adds the GGUF file name, the source model and error
figures. Manifests of older moetools (`{stem}-{tier}.resident.json`, GGUF named in `gguf`) are still
read by moetools (the daemon does not find their GGUF).
"""

import os
from dataclasses import asdict, dataclass, field

from moetools import atomic
from moetools.errors import FormatError
from moetools.formats.jsonio import load_json, require
from moetools.formats.tier_gguf import (  # noqa: F401  (the tier GGUF's keys, re-exported with the manifest)
    RESIDENT_ONLY_KEY, SOURCE_FINGERPRINT_KEY, SOURCE_MODEL_KEY, TIER_KEY, tier_identity)

SUFFIX = ".resident.json"


def manifest_name(gguf_name):
    """The manifest's file name for a GGUF file name: `k3-q4_K.gguf` -> `k3-q4_K.gguf.resident.json`."""
    return gguf_name + SUFFIX


@dataclass
class ResidentManifest:
    tier_label: str  # ggml type name: q4_0, q8_0, q4_K, q6_K, bf16, ...
    resident_bytes: int  # total tensor bytes of the resident GGUF
    gguf: str = ""  # file name of the resident GGUF, relative to the manifest's folder
    source_model: str = ""  # file name of the source model (first shard)
    source_fingerprint: str = ""  # moetools.gguf.Model.fingerprint of the source
    tensor_count: int = 0
    bits_per_weight: float = 0.0
    rmse: float = 0.0
    max_rel_error: float = 0.0
    fallbacks: list = field(default_factory=list)  # [{"tensor": name, "type": ggml name, "reason": text}]
    extra: dict = field(default_factory=dict)  # any other keys, kept on read and written back
    path: str = ""  # where it was read from (not written)

    def to_doc(self):
        doc = {"resident_only": 1}
        doc.update({key: value for key, value in asdict(self).items() if key not in ("extra", "path")})
        doc.update(self.extra)
        return doc

    @property
    def gguf_path(self):
        """The resident GGUF's path: the `gguf` key resolved against the manifest's folder, else (as
        the daemon finds it) the manifest's path without the `.resident.json` suffix."""
        if self.gguf:
            return os.path.join(os.path.dirname(self.path), self.gguf)
        if self.path.endswith(".gguf" + SUFFIX):
            return self.path[: -len(SUFFIX)]
        return ""


# The optional keys moetools writes, with the JSON type each must have when present.
_OPTIONAL_FIELDS = {
    "gguf": str, "source_model": str, "source_fingerprint": str, "tensor_count": int,
    "bits_per_weight": (int, float), "rmse": (int, float), "max_rel_error": (int, float), "fallbacks": list,
}


def write_manifest(path, manifest, overwrite=True):
    atomic.write_json(path, manifest.to_doc(), overwrite=overwrite)


def read_manifest(path):
    """Parse and validate a resident manifest. Raises FormatError naming the file and the key."""
    what = "resident manifest"
    doc = load_json(path, what)
    if require(doc, "resident_only", int, path, what) != 1:
        raise FormatError(path, "resident_only must be 1", key="resident_only")
    # trimmed, as the daemon's parse_resident_manifest trims it: the label it publishes as resident_tier
    tier = require(doc, "tier_label", str, path, what).strip()
    if not tier:
        raise FormatError(path, "tier_label is empty", key="tier_label")
    resident_bytes = require(doc, "resident_bytes", int, path, what)
    if resident_bytes <= 0:
        raise FormatError(path, "resident_bytes must be positive", key="resident_bytes")
    fields = {key: require(doc, key, kind, path, what) for key, kind in _OPTIONAL_FIELDS.items() if key in doc}
    known = {"resident_only", "tier_label", "resident_bytes", *_OPTIONAL_FIELDS}
    extra = {key: value for key, value in doc.items() if key not in known}
    return ResidentManifest(tier_label=tier, resident_bytes=resident_bytes, extra=extra, path=os.fspath(path), **fields)


def find_manifests(folder):
    """Paths of every `*.resident.json` directly in `folder`, sorted; those a quantize run is
    publishing right now (or was, when killed) are left out until its last rename
    (formats/quantize_staging.py)."""
    from moetools.formats.quantize_staging import pending_names

    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        raise FormatError(folder, "tier folder does not exist") from None
    pending = pending_names(folder)
    return sorted(os.path.join(folder, name) for name in names if name.endswith(SUFFIX) and name not in pending)
