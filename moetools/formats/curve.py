"""Coverage curve: hit ratio of each residency policy against cache size in slots.

Written by `trace-tail --curve`, read by `device-fit --coverage`:
`{"slots": [s1 < s2 < ...], "hit": {"lru": [...], "lfu": [...], "belady": [...], "decay_bandit": [...]},
"requests": n, "tokens": n, "decode_tokens": n}` with hit = request hit ratio over decode requests.
Optional: `distinct` (distinct experts seen), `expert_bytes`, `total_slots`.
"""

import math
from dataclasses import dataclass, field

from moetools import atomic
from moetools.errors import FormatError
from moetools.formats.jsonio import display_name, load_json, require

CEILING_POLICIES = ("belady",)  # offline optimum: a ceiling, never a prediction


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
