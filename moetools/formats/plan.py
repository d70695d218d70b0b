"""Plan file (`GGML_MOE_PLAN_FILE`, JSON) for the serving fork.

`version` 1, `budget_bytes` (host expert-cache bytes), `window_k` (tokens, default 8), `pin_list`
`[{"layer": L, "expert": E}, ...]` sorted by (layer, expert) and at most the pin ceiling (half the
budget in slots, the fork's rule), plus `device_budget_bytes` and `resident_tier` when known.
"""

from dataclasses import dataclass, field

from moetools import atomic
from moetools.errors import FormatError
from moetools.formats.jsonio import load_json, require

PLAN_VERSION = 1
DEFAULT_WINDOW_K = 8


def pin_ceiling(budget_bytes, expert_bytes):
    """How many (layer, expert) slots may be pinned: half the budget in slots (the fork's rule)."""
    if expert_bytes <= 0:
        return 0
    return int(budget_bytes // expert_bytes) // 2


@dataclass
class Plan:
    budget_bytes: int
    pin_list: list = field(default_factory=list)  # [(layer, expert)]
    window_k: int = DEFAULT_WINDOW_K
    device_budget_bytes: int = None
    resident_tier: str = None

    def to_doc(self):
        doc = {
            "version": PLAN_VERSION,
            "budget_bytes": int(self.budget_bytes),
            "window_k": int(self.window_k),
            "pin_list": [{"layer": int(layer), "expert": int(expert)} for layer, expert in sorted(set(self.pin_list))],
        }
        if self.device_budget_bytes is not None:
            doc["device_budget_bytes"] = int(self.device_budget_bytes)
        if self.resident_tier is not None:
            doc["resident_tier"] = self.resident_tier
        return doc


def clamp_pins(pins, budget_bytes, expert_bytes):
    """The first pins (in the caller's priority order) that fit under the pin ceiling."""
    return list(pins)[: pin_ceiling(budget_bytes, expert_bytes)]


def write_plan(path, plan):
    atomic.write_json(path, plan.to_doc())


def read_plan(path):
    what = "plan file"
    doc = load_json(path, what)
    version = require(doc, "version", int, path, what)
    if version != PLAN_VERSION:
        raise FormatError(path, f"plan version {version} is not supported (expected {PLAN_VERSION})", key="version")
    budget = require(doc, "budget_bytes", int, path, what)
    pins = []
    for index, entry in enumerate(require(doc, "pin_list", list, path, what)):
        layer = require(entry, "layer", int, path, f"pin_list[{index}]")
        expert = require(entry, "expert", int, path, f"pin_list[{index}]")
        pins.append((layer, expert))
    return Plan(
        budget_bytes=budget,
        pin_list=pins,
        window_k=doc.get("window_k", DEFAULT_WINDOW_K),
        device_budget_bytes=doc.get("device_budget_bytes"),
        resident_tier=doc.get("resident_tier"),
    )
