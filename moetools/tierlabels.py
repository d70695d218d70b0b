"""Tier labels: one rule for matching the names the fork, the daemon and moetools give a precision tier.

The same tier is spelled three ways:
- the fork's quantizer and the daemon's tests name a resident tier by its ggml type, as
  `ggml_type_name` spells it (`q4_K`; CambrianTech/continuum core/continuum-core/src/capacity/
  division_actuation.rs, `parse_resident_manifest` test labels `q3_K`, `q4_K`, `q5_K`);
- `moetools quantize` names it by its llama-quantize mix (`Q4_K_M`; `Q4_K` is llama-quantize's
  alias of it, moetools/quantize/rules.py MIX_ALIASES);
- a tiered container's ladder names each tier by its ggml type in upper case (`Q4_K`, the daemon's
  expert_container.rs `TierSpec.quant`), or by a codebook name of the fork's (`VQ3R`, `IQ2`).

`same_tier` is the one equivalence every reader of a plan's `resident_tier`, a plan's tier, an
observation's tier or a `--pin-tier`/`--default-tier` label uses: `q4_K` = `Q4_K` = `Q4_K_M` =
`Q4_K_S` (the type a mix stands for), but two different mixes of one type (`Q4_K_S`, `Q4_K_M`) are
two tiers. A label is matched after trimming, as `parse_resident_manifest` trims `tier_label`; a
ggml type or mix name is matched in any case (ggml spells each type one way); any other label
(`native`, `VQ3R`) without case.

Written labels keep the daemon's form: the daemon publishes a catalog label verbatim (trimmed) as
the plan's `resident_tier` and compares labels as strings (`DivisionActuator::choose`), so moetools
writes the catalog's own string (`label_for_daemon`), and a plan's tiers as ladder indices (integers:
plan_file.rs `PlanPin.tier: Option<u32>`, `PlanFileDocument.default_tier`), never as names.
"""

from moetools.gguf.constants import GGML_TYPE_IDS

NATIVE = "native"  # division_actuation.rs NATIVE_TIER_LABEL: the model's own resident weights

_TYPES = {name.lower(): name for name in GGML_TYPE_IDS}


def _mixes():
    """llama-quantize's mix names -> the ggml type each stands for (moetools/quantize/rules.py MIXES,
    a table without numpy), and the aliases (`Q4_K` -> `Q4_K_M`)."""
    from moetools.quantize.rules import MIX_ALIASES, MIXES

    return {name: default for name, (_, default) in MIXES.items()}, MIX_ALIASES


def label_for_daemon(label):
    """The label as the daemon holds it: `tier_label` trimmed (parse_resident_manifest)."""
    return label.strip()


def tier_type(label):
    """The ggml type (ggml's spelling, `q4_K`) a tier label stands for: a ggml type name in any case,
    or a llama-quantize mix (`Q4_K_M` -> `q4_K`); None for any other label (`native`, `VQ3R`)."""
    text = label.strip()
    if text.lower() in _TYPES:
        return _TYPES[text.lower()]
    mixes, aliases = _mixes()
    name = aliases.get(text.upper(), text.upper())
    return mixes.get(name)


def _mix(label):
    """The mix a label names explicitly (`Q4_K_S`, `Q4_K_M`), None for a bare type name (`Q4_K`,
    `q8_0`: the type itself, whichever mix produced it)."""
    text = label.strip()
    if text.lower() in _TYPES:
        return None
    mixes, _ = _mixes()
    return text.upper() if text.upper() in mixes else None


def known_label(label):
    """True for a label this rule can match without a ladder: a ggml type, a mix, or `native`."""
    return tier_type(label) is not None or label.strip().lower() == NATIVE


def same_tier(first, second):
    """Whether two labels name one tier (see the module docstring)."""
    a, b = first.strip(), second.strip()
    if a == b:
        return True
    type_a, type_b = tier_type(a), tier_type(b)
    if type_a is None or type_b is None:
        return type_a is None and type_b is None and a.lower() == b.lower()
    if type_a != type_b:
        return False
    mix_a, mix_b = _mix(a), _mix(b)
    return mix_a is None or mix_b is None or mix_a == mix_b


def matching_tiers(label, labels):
    """Indices of `labels` that name the tier `label` names: the exact (trimmed) matches when there
    are any, else every equivalent one (same_tier)."""
    exact = [index for index, other in enumerate(labels) if other.strip() == label.strip()]
    return exact or [index for index, other in enumerate(labels) if same_tier(label, other)]


def find_tier(label, labels):
    """The one index of `labels` naming `label`'s tier, or None (no match, or several)."""
    found = matching_tiers(label, labels)
    return found[0] if len(found) == 1 else None


def describe_unknown(label):
    """Why `label` is not a tier label, in one line (for exit-2 messages)."""
    return (f"{label!r} is not a tier: give a ladder index (0 = sharpest), a ggml type (q8_0, q6_K, q4_K, ...) "
            "or a llama-quantize mix (Q4_K_M, ...)")


def tier_option(text, option, ladder=None):
    """The ladder index a `--pin-tier`/`--default-tier` value names: a whole number is the index
    itself (what the daemon's moe-pager-driver takes, `--pin-tier N`), checked against `ladder` (the
    container's tier labels) when there is one; a label is matched in the ladder (same_tier), so it
    needs one. Raises UsageError (exit 2) in one line."""
    from moetools.errors import UsageError

    text = text.strip()
    shown = f" ({', '.join(f'{index} {label}' for index, label in enumerate(ladder))})" if ladder is not None else ""
    if text.isdigit():
        index = int(text)
        if ladder is not None and index >= len(ladder):
            raise UsageError(f"{option} {text}: outside the container's ladder{shown}")
        return index
    if not known_label(text) and not (ladder is not None and matching_tiers(text, ladder)):
        raise UsageError(f"{option}: {describe_unknown(text)}")
    if ladder is None:
        raise UsageError(f"{option} {text}: a tier name needs --container DIR (the plan holds the tier's index in "
                         "the container's ladder); or give the index")
    found = matching_tiers(text, ladder)
    if not found:
        raise UsageError(f"{option} {text}: not in the container's ladder{shown}")
    if len(found) > 1:
        raise UsageError(f"{option} {text}: matches tiers {found} of the container's ladder{shown}; give the index")
    return found[0]
