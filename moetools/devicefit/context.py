"""The context trade-off both runtimes make without `--ctx`: plan 4k, 8k, 16k, 32k, 64k, 128k and the
training context (up to it), and choose the largest context whose speed is within 5% of the best."""

CONTEXT_STEPS = (4096, 8192, 16384, 32768, 65536, 131072)
TRADE_OFF = 0.05


def contexts_to_try(train):
    """The candidate contexts for a model trained on `train` tokens, ascending."""
    return sorted({step for step in CONTEXT_STEPS if step <= train} | ({train} if train >= 1 else set()))


def choose(candidates):
    """The largest-context candidate costing at most 5% of the best speed.

    candidates: [(context, tok_s)] of the plans that fit. Returns (context, best tok/s) or None."""
    if not candidates:
        return None
    best = max(tok_s for _, tok_s in candidates)
    within = [context for context, tok_s in candidates if tok_s >= (1 - TRADE_OFF) * best]
    return max(within), best
