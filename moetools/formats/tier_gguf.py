"""The metadata that marks a resident-only tier GGUF (written by `quantize --resident-only`).

A tier holds no routed expert tensors, so without these keys it would read as a dense model. No imports:
inspect and device-fit read them on the header path.
"""

# Metadata keys `quantize --resident-only` writes into each tier GGUF, so that the file itself says what
# it is (a tier has no routed expert tensors and would otherwise read as a dense model).
TIER_KEY = "moetools.tier"
RESIDENT_ONLY_KEY = "moetools.resident_only"
SOURCE_MODEL_KEY = "moetools.source_model"
SOURCE_FINGERPRINT_KEY = "moetools.source_fingerprint"


def tier_identity(metadata):
    """{"tier", "source_model", "source_fingerprint"} of a resident-only tier GGUF's metadata, else None."""
    if metadata.get(RESIDENT_ONLY_KEY) is not True:
        return None
    return {"tier": str(metadata.get(TIER_KEY, "")), "source_model": str(metadata.get(SOURCE_MODEL_KEY, "")),
            "source_fingerprint": str(metadata.get(SOURCE_FINGERPRINT_KEY, ""))}
