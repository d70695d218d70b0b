"""Where device-fit looks for a model's resident tiers, in order:

1. `--tiers DIR` (must exist);
2. the serving daemon's folder `<storage root>/device-fit/<slug of the model id>/` (the rules in
   `moetools.formats.storage`), where `quantize --install` puts them and the daemon discovers them;
3. `device-fit/<stem>/` beside the model (quantize's default output folder);
4. the model's own folder (`X.gguf.resident.json` beside `X.gguf`).

Tiers are merged: the same GGUF found twice counts once; another GGUF with a label already listed
is skipped with a warning. In the daemon's folder the `resident-bytes` override file is checked
against the manifest of the GGUF the daemon would load.
"""

import os

from moetools.devicefit import core
from moetools.errors import FormatError
from moetools.formats import storage


def tier_folders(model_path, tiers_dir=None, storage_dir=None):
    """[(folder, why)] to search, existing ones only (an explicit --tiers is always listed)."""
    found = []
    if tiers_dir:
        found.append((tiers_dir, "--tiers"))
    for folder, why in ((storage_dir, "daemon storage"), (core.default_tier_folder(model_path), "beside the model"),
                        (os.path.dirname(os.path.abspath(model_path)), "model folder")):
        if folder and os.path.isdir(folder):
            found.append((folder, why))
    unique, seen = [], set()
    for folder, why in found:
        key = os.path.realpath(folder)
        if key not in seen:
            seen.add(key)
            unique.append((folder, why))
    return unique


def discover_tiers(model_path, facts, tiers_dir=None, storage_dir=None):
    """(tiers sorted by resident bytes descending, warnings) from every folder of `tier_folders`."""
    tiers, warnings, by_label, gguf_seen = [], [], {}, set()
    for folder, why in tier_folders(model_path, tiers_dir, storage_dir):
        prefix = core.model_stem(model_path) + "-" if why == "model folder" else ""
        if why != "--tiers" and not _has_manifests(folder, prefix):
            continue  # nothing to read: keep the manifest reader (and dataclasses) off the start-up path
        found, folder_warnings = core.load_tiers(folder, facts, prefix=prefix)
        warnings += folder_warnings
        for tier in found:
            key = os.path.realpath(tier.gguf)
            if key in gguf_seen:
                continue
            if tier.label in by_label:
                warnings.append(f"skipping tier manifest {tier.manifest}: tier {tier.label!r} already found in "
                                f"{os.path.dirname(by_label[tier.label].manifest)}")
                continue
            gguf_seen.add(key)
            by_label[tier.label] = tier
            tiers.append(tier)
    if storage_dir and os.path.isdir(storage_dir):
        warnings += override_warnings(storage_dir, tiers)
    tiers.sort(key=lambda tier: -tier.resident_bytes)
    return tiers, warnings


def _has_manifests(folder, prefix):
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return any(name.endswith(storage.MANIFEST_SUFFIX) and name.startswith(prefix) for name in names)


def override_warnings(folder, tiers):
    """What is wrong with the daemon's `resident-bytes` override in `folder`, as warnings."""
    try:
        priced = storage.read_resident_bytes(folder)
    except FormatError as err:
        return [str(err)]
    if priced is None:
        return []
    chosen = storage.daemon_override_gguf(folder)
    if chosen is None:
        return [f"{folder}: resident-bytes without a GGUF beside it: the daemon has no override to load"]
    for tier in tiers:
        if os.path.realpath(tier.gguf) == os.path.realpath(chosen) and tier.resident_bytes != priced:
            return [f"{folder}: resident-bytes says {priced} but the daemon's override {os.path.basename(chosen)} "
                    f"(newest GGUF there) is tier {tier.label!r} of {tier.resident_bytes} bytes"]
    return []
