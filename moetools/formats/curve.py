"""Coverage curve: hit ratio of each residency policy against cache size in slots.

Written by `trace-tail --curve`, read by `device-fit --coverage`:
`{"slots": [s1 < s2 < ...], "hit": {"lru": [...], "predictive": [...], "belady": [...], ...},
"demand_policies": [...], "ceiling_policies": ["belady"], "requests": n, "tokens": n,
"decode_tokens": n}` with hit = request hit ratio over decode requests. `demand_policies` names the
online demand caches (every miss admitted and fetched: what a serving cache can reach),
`ceiling_policies` the offline optimum (never a prediction). Optional: `topk_instruments` (top-S
residency sets that bypass the cache, instruments only, never read as coverage), `distinct`
(distinct experts seen), `expert_bytes`, `total_slots`.

Curves written before `demand_policies` existed hold `decay_bandit`, `recency` and `prefill_pin`
as top-S sets (optimistic: misses bypass the cache, arm switches reload it for free); only their
`lru` and `lfu` are demand caches.
"""

import math
from dataclasses import dataclass, field

from moetools import atomic
from moetools.errors import FormatError
from moetools.formats.jsonio import display_name, load_json, require

CEILING_POLICIES = ("belady",)  # offline optimum: a ceiling, never a prediction
LEGACY_DEMAND_POLICIES = ("lru", "lfu")  # the demand caches of a curve without `demand_policies`


@dataclass
class Curve:
    slots: list
    hit: dict  # policy -> list of hit ratios, one per slots entry
    requests: int = 0
    tokens: int = 0
    decode_tokens: int = 0
    extra: dict = field(default_factory=dict)

    def to_doc(self):
        doc = {"slots": [int(s) for s in self.slots], "hit": {k: [float(v) for v in vs] for k, vs in self.hit.items()},
               "requests": int(self.requests), "tokens": int(self.tokens), "decode_tokens": int(self.decode_tokens)}
        doc.update(self.extra)
        return doc

    def demand_policies(self):
        """The online demand caches this curve holds (for an old curve: its LRU and LFU)."""
        named = self.extra.get("demand_policies")
        if isinstance(named, list):
            return [name for name in named if name in self.hit and name not in CEILING_POLICIES]
        return [name for name in LEGACY_DEMAND_POLICIES if name in self.hit]

    def mean_hit(self, policy):
        return sum(self.hit[policy]) / len(self.hit[policy])

    def coverage(self, policy, slots):
        """Hit ratio at `slots`: piecewise linear through (0, 0) and the points, flat past the last."""
        return interpolate(self.slots, self.hit[policy], slots)


def interpolate(xs, ys, x):
    """Piecewise-linear y at x through (0, 0) and (xs, ys); flat beyond the last point."""
    if x <= 0:
        return 0.0
    prev_x, prev_y = 0, 0.0
    for point_x, point_y in zip(xs, ys):
        if x <= point_x:
            if point_x == prev_x:
                return float(point_y)
            return prev_y + (point_y - prev_y) * (x - prev_x) / (point_x - prev_x)
        prev_x, prev_y = point_x, float(point_y)
    return prev_y


def write_curve(path, curve):
    atomic.write_json(path, curve.to_doc())


def parse_curve(doc, path="<curve>"):
    """Validate a curve document (already parsed JSON). Raises FormatError."""
    what = "coverage curve"
    slots = require(doc, "slots", list, path, what)
    if not slots:
        raise FormatError(path, "coverage curve has no points", key="slots")
    for index, value in enumerate(slots):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise FormatError(path, f"slots[{index}] = {value!r} is not a positive whole number", key="slots")
        if index and value <= slots[index - 1]:
            raise FormatError(path, f"slots must increase (slots[{index}] = {value} after {slots[index - 1]})", key="slots")
    hits = require(doc, "hit", dict, path, what)
    if not hits:
        raise FormatError(path, "coverage curve has no policies", key="hit")
    for policy, values in hits.items():
        if not isinstance(values, list) or len(values) != len(slots):
            raise FormatError(path, f"hit[{policy!r}] must be a list of {len(slots)} ratios", key="hit")
        for index, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not 0 <= value <= 1:
                raise FormatError(path, f"hit[{policy!r}][{index}] = {value!r} is not a ratio in [0, 1]", key="hit")
    counts = {key: doc.get(key, 0) for key in ("requests", "tokens", "decode_tokens")}
    extra = {key: value for key, value in doc.items() if key not in ("slots", "hit", *counts)}
    return Curve(slots=list(slots), hit={k: [float(v) for v in vs] for k, vs in hits.items()}, extra=extra, **counts)


def read_curve(path):
    """Read a coverage curve from `path` (`-` for stdin)."""
    return parse_curve(load_json(path, "coverage curve"), display_name(path))


def default_coverage_policy(curve, path="<curve>"):
    """(policy, note): the policy device-fit predicts from when --coverage-policy is not given: the
    online demand cache with the highest mean hit ratio over the curve's points (the first listed
    on a tie). `note` is None for a current curve; for an older one it says which policy was used
    and why. Raises FormatError when the curve has no policy that may predict."""
    candidates = curve.demand_policies()
    legacy = not isinstance(curve.extra.get("demand_policies"), list)
    if candidates:
        best = max(candidates, key=lambda name: (curve.mean_hit(name), -candidates.index(name)))
        if not legacy:
            return best, None
        return best, (f"coverage curve from an older moetools (no demand_policies): predicting from {best}, the best of its "
                      f"demand caches ({', '.join(candidates)}); its decay_bandit/recency/prefill_pin figures are top-S sets "
                      "that bypass the cache and overstate coverage")
    others = [name for name in curve.hit if name not in CEILING_POLICIES]
    if not others:
        raise FormatError(path, "coverage curve holds only the Belady ceiling: no policy to predict from", key="hit")
    best = max(others, key=lambda name: (curve.mean_hit(name), -others.index(name)))
    return best, (f"coverage curve names no demand cache: predicting from {best}, which may not be a demand cache "
                  "(re-run trace-tail --curve for demand-cache curves)")
