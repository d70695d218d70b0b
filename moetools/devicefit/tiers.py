"""device-fit's container tiers: `--pin-tier` / `--default-tier` (the daemon's moe-pager-driver flags),
checked against the container's ladder, written into the plan, and priced in the speed model.

Sources (CambrianTech/continuum):
- core/expert-pager-policy/src/bin/moe-pager-driver.rs `parse_args`: `--pin-tier N` / `--default-tier N`
  are ladder indices (u32): "hot pins served from ladder bank --pin-tier, the entire unpinned cold
  tail fetched from --default-tier"; omitting both is the plain v1 plan.
- core/expert-pager-policy/src/controller.rs `BanditPlanController::write_tiered_plan`: every pin gets
  `tier` = the pin tier, the document `default_tier` = the default tier; plan_file.rs `PlanPin.tier`
  (an index into the container's ladder, 0 = sharpest; absent = the container default, tier 0 of a
  single-tier container).
- core/continuum-core/src/capacity/expert_container.rs `ExpertFetcher::record_bytes`: a tier's record
  size is "what the caller must size buf (and the cache must account) with".

The speed model with tiers: a pinned expert costs the pin tier's record bytes in the cache, every
other one the default tier's, and a miss reads a default-tier record (the cold tail), so

    slots = P + (budget - P x pin_bytes) // default_bytes,   P = the plan's pins (or the pin ceiling)
    t     = (1 - coverage(slots)) x experts_per_token x default_bytes / h2d + floor

A sharper (bigger) pin tier leaves fewer slots and so a lower figure; a smaller default tier more
slots and fewer bytes per miss, a higher one.
"""

from moetools.devicefit.record import REQUIRED, Record


class TierCosts(Record):
    """What one expert costs at the plan's tiers (bytes), and how many are pinned (None: the ceiling)."""

    FIELDS = (
        ("default_tier", REQUIRED),
        ("pin_tier", REQUIRED),
        ("default_bytes", REQUIRED),
        ("pin_bytes", REQUIRED),  # mean over the pins
        ("pins", None),
    )


class PlanTierSettings(Record):
    """device-fit's tier inputs: the options as ladder indices (None: not given), the ladder, the
    costs the speed model uses (None: not priced) and notes."""

    FIELDS = (
        ("pin_tier", None),
        ("default_tier", None),
        ("ladder", None),  # formats.container.Ladder
        ("costs", None),
        ("notes", list),
    )

    @property
    def labels(self):
        return self.ladder.labels if self.ladder is not None else None


def tiered_slots(budget_bytes, costs, total_slots, pin_ceiling_slots):
    """(slots, pins) the cache holds with pins at the pin tier and the rest at the default tier."""
    if budget_bytes <= 0 or costs.default_bytes <= 0:
        return 0, 0
    pins = pin_ceiling_slots if costs.pins is None else costs.pins
    pins = max(0, min(pins, budget_bytes // max(1, costs.pin_bytes)))
    slots = pins + (budget_bytes - pins * costs.pin_bytes) // costs.default_bytes
    return min(slots, total_slots) if total_slots else slots, pins


def plan_tier_settings(pin_text, default_text, container, plan_path):
    """Read and check device-fit's tier inputs. The container's ladder is read (manifest only) when a
    tier is asked for or the existing plan holds tiers; the plan's tiers must lie in it (exit 2
    naming the first that does not), and a tier named by label needs it."""
    from moetools.formats.plan import existing_plan_doc, plan_tiers, uniform_pin_tier
    from moetools.tierlabels import tier_option

    doc = existing_plan_doc(plan_path) if plan_path else None
    pins = doc.get("pin_list") if doc is not None and isinstance(doc.get("pin_list"), list) else []
    plan_has_tiers = doc is not None and (any(isinstance(pin, dict) and "tier" in pin for pin in pins)
                                          or "default_tier" in doc or "pin_tier" in doc)
    asked = pin_text is not None or default_text is not None
    settings = PlanTierSettings()
    if container and (asked or plan_has_tiers):
        from moetools.formats.container import read_ladder

        settings.ladder = read_ladder(container)
    labels = settings.labels
    settings.pin_tier = tier_option(pin_text, "--pin-tier", labels) if pin_text is not None else None
    settings.default_tier = tier_option(default_text, "--default-tier", labels) if default_text is not None else None
    pin_tiers, plan_default, plan_pin = [], None, None
    if doc is not None and (labels is not None or asked):
        pin_tiers, plan_default, plan_pin = plan_tiers(doc, plan_path, labels)
    if settings.ladder is None:
        if asked:
            settings.notes.append("tiers are written into the plan but not priced: give --container DIR (its ladder's "
                                  "record sizes) to see what they cost")
        return settings
    default = next(t for t in (settings.default_tier, plan_default, 0) if t is not None)
    pin = next(t for t in (settings.pin_tier, plan_pin, uniform_pin_tier(pin_tiers), default) if t is not None)
    if settings.pin_tier is not None:
        pin_tiers = [pin] * len(pin_tiers)
    sizes = settings.ladder.record_bytes
    pinned = [sizes[tier if tier is not None else default] for tier in pin_tiers]
    pin_bytes = sum(pinned) // len(pinned) if pinned else sizes[pin]
    settings.costs = TierCosts(default, pin, sizes[default], pin_bytes, len(pinned) or None)
    return settings


def tiers_doc(settings, division=None):
    """The `tiers` entry of device-fit's JSON (None without tiers)."""
    if settings is None or (settings.ladder is None and settings.pin_tier is None and settings.default_tier is None):
        return None
    doc = {"pin_tier": settings.pin_tier, "default_tier": settings.default_tier,
           "ladder": settings.labels, "ladder_record_bytes": settings.ladder.record_bytes if settings.ladder else None,
           "priced": settings.costs is not None}
    if settings.costs is not None:
        costs = settings.costs
        doc.update(priced_pin_tier=costs.pin_tier, priced_default_tier=costs.default_tier,
                   pin_record_bytes=costs.pin_bytes, default_record_bytes=costs.default_bytes,
                   pins=division.pinned if division is not None else costs.pins)
    return doc
