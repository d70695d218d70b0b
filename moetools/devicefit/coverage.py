"""The fork's hit-ratio model and its measured runs: the coverage curve trace-tail writes (or the
uniform floor without one), and `--observations` blended in as the fork's division bandit does.
Moved out of core.py (issue 28); core re-exports the names."""

from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import FormatError, UsageError
from moetools.formats.jsonio import loads

OBSERVATION_MIN_TOKENS = 64  # the serving fork's division bandit ignores shorter runs
OBSERVATION_WEIGHT = 0.4  # later measurements blend in with this weight


class Coverage(Record):
    """Hit ratio of the hot-expert cache against its size in slots."""

    FIELDS = (
        ("source", REQUIRED),  # "curve" or "uniform"
        ("policy", ""),
        ("curve", None),
        ("total_slots", 0),
    )

    def at(self, slots):
        if self.source == "curve":
            return float(self.curve.coverage(self.policy, slots))
        return min(1.0, slots / self.total_slots) if self.total_slots else 0.0

    @property
    def label(self):
        if self.source != "curve":
            return "uniform floor (slots / total slots)"
        origin = self.curve.extra.get("source") if self.curve is not None else None
        return f"curve ({self.policy}; {origin})" if isinstance(origin, str) and origin else f"curve ({self.policy})"


def coverage_model(curve, policy, facts, path="<curve>"):
    """A Coverage from a parsed curve (or None for the uniform floor). Raises UsageError/FormatError."""
    if curve is None:
        return Coverage("uniform", total_slots=facts.total_slots), []
    from moetools.formats.curve import CEILING_POLICIES

    if policy in CEILING_POLICIES:
        raise UsageError(f"--coverage-policy {policy}: Belady is the offline ceiling, never a prediction")
    if policy not in curve.hit:
        raise FormatError(path, f"coverage curve has no policy {policy!r} (it has {', '.join(sorted(curve.hit))})", key="hit")
    warnings = []
    total = curve.extra.get("total_slots")
    if isinstance(total, int) and facts.total_slots and total != facts.total_slots:
        warnings.append(f"coverage curve was measured on {total} slots, this model has {facts.total_slots}")
    curve_bytes = curve.extra.get("expert_bytes")
    if isinstance(curve_bytes, int) and facts.expert_bytes and curve_bytes != facts.expert_bytes:
        warnings.append(f"coverage curve was measured with {curve_bytes}-byte experts, this model's are {facts.expert_bytes}")
    return Coverage("curve", policy, curve, facts.total_slots), warnings


def parse_observations(text, path="<observations>"):
    """JSON lines `{"tier": label, "tok_s": x, "tokens": n}` -> list of (tier, tok_s, tokens)."""
    result = []
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        start = offset
        offset += len(line.encode("utf-8"))
        if not line.strip():
            continue
        doc = loads(line, path, f"observation on line {number}")
        if not isinstance(doc, dict):
            raise FormatError(path, f"line {number} is not a JSON object", offset=start)
        tier, tok_s, tokens = doc.get("tier"), doc.get("tok_s"), doc.get("tokens")
        if not isinstance(tier, str) or not tier:
            raise FormatError(path, f"line {number}: 'tier' must be a tier label", offset=start, key="tier")
        if isinstance(tok_s, bool) or not isinstance(tok_s, (int, float)) or not tok_s > 0:
            raise FormatError(path, f"line {number}: 'tok_s' must be a positive number", offset=start, key="tok_s")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise FormatError(path, f"line {number}: 'tokens' must be a whole number", offset=start, key="tokens")
        result.append((tier, float(tok_s), tokens))
    return result


def refine(predicted, observations):
    """Blend measurements into predictions as the serving fork's division bandit does.

    predicted: {tier: tok_s}. The first measurement of a tier (runs of at least 64 tokens) replaces the
    prediction; later ones blend in with weight 0.4. Returns ({tier: tok_s}, {tier: runs used}, ignored).
    """
    estimate, runs, ignored = dict(predicted), {tier: 0 for tier in predicted}, []
    for tier, tok_s, tokens in observations:
        if tier not in estimate:
            ignored.append(f"observation of unknown tier {tier!r}")
            continue
        if tokens < OBSERVATION_MIN_TOKENS:
            continue
        estimate[tier] = tok_s if runs[tier] == 0 else (1 - OBSERVATION_WEIGHT) * estimate[tier] + OBSERVATION_WEIGHT * tok_s
        runs[tier] += 1
    return estimate, runs, ignored


def match_observations(observations, labels):
    """Observations with each tier label replaced by the division label it names (moetools.tierlabels:
    an observation of `q4_K` is one of the tier `Q4_K_M`); a label naming none, or several, is kept
    as it is (and refine() reports it)."""
    if not observations:
        return []
    from moetools.tierlabels import find_tier

    matched = []
    for tier, tok_s, tokens in observations:
        index = find_tier(tier, labels)
        matched.append((labels[index] if index is not None else tier, tok_s, tokens))
    return matched
