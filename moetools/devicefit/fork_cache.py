"""The serving fork's expert cache, as it allocates it (pure: numbers in, numbers out).

Source: CambrianTech/llama.cpp `ggml/src/ggml-moe-residency.hpp`, class `ResidencyCache`:
- ONE cache: host RAM, or VRAM once `enable_device` flips it (then `budget_bytes` comes from the plan's
  `device_budget_bytes`, else `GGML_MOE_VRAM_CACHE_GB`; a host cache's from the plan's `budget_bytes`,
  else `GGML_MOE_HOST_CACHE_GB`). Never both at once.
- Each weight matrix of an expert (gate, up, down: one cache key each, `expert_pin_keys`) takes one
  slot in the pool of its size class, `need = expert_size + pad` (`get_slot`, `prefetch`).
- `ensure_pool`: `slot_size = round_up(need, 256)`; every pool gets `budget_bytes / MAX_POOLS` (6 --
  the fork divides by the cap, not by the classes present, its own NOTE says so), `max_slots = share /
  slot_size`; a class with 0 slots, or a 7th class, gets no pool (its matrices always stream from the
  mmap). Each pool buffer holds one more slot as a tail guard.
- The pad passed by the caller is not in that file; moetools assumes upstream llama.cpp's expert-copy
  padding (`ggml-backend.cpp`: `min(expert_size, 512)`).

`expert_slots` turns pools into the (layer, expert) slots device-fit's coverage curve is measured in:
the largest share f of every expert the pools can hold at once (each pool must hold f x experts x
the matrix kinds it serves), times the model's experts. Any expert no longer fits any slot.
"""

from collections import namedtuple

SLOT_ALIGN = 256
MAX_POOLS = 6
PAD_CAP = 512

Pool = namedtuple("Pool", "need_bytes slot_bytes slots kinds buffer_bytes")
ForkCache = namedtuple("ForkCache", "device budget_bytes pools unpooled expert_slots pooled_bytes")


def slot_need(expert_size):
    """Bytes one matrix of one expert asks of its pool: the matrix plus the copy padding."""
    return expert_size + min(expert_size, PAD_CAP)


def size_classes(matrix_bytes):
    """[(need_bytes, kinds)] in first-use order from [(block, per-expert bytes of one matrix), ...]
    listed in the model's tensor order; `kinds` = how many (block, matrix) pairs share that class."""
    order, kinds = [], {}
    for _block, size in matrix_bytes:
        need = slot_need(size)
        if need not in kinds:
            order.append(need)
            kinds[need] = 0
        kinds[need] += 1
    return [(need, kinds[need]) for need in order]


def fork_cache(budget_bytes, matrix_bytes, n_expert, n_layers, device="vram"):
    """The fork's cache for `budget_bytes` (device "vram" or "host": same pools either way).

    matrix_bytes: [(block, bytes of one expert's slice of one expert tensor)] over every expert tensor.
    Returns ForkCache(device, budget_bytes, pools, unpooled need sizes, expert_slots, pooled_bytes)."""
    share = max(0, int(budget_bytes)) // MAX_POOLS
    pools, unpooled = [], []
    for index, (need, kinds) in enumerate(size_classes(matrix_bytes)):
        slot = -(-need // SLOT_ALIGN) * SLOT_ALIGN
        slots = share // slot
        if slots == 0 or index >= MAX_POOLS:
            unpooled.append(need)
            continue
        pools.append(Pool(need, slot, slots, kinds, (slots + 1) * slot))
    expert_slots = 0
    if pools and n_expert and n_layers:
        fraction = min(1.0, min(pool.slots / (n_expert * pool.kinds) for pool in pools))
        expert_slots = int(fraction * n_expert * n_layers)
    return ForkCache(device, int(budget_bytes), tuple(pools), tuple(unpooled), expert_slots,
                     sum(pool.buffer_bytes for pool in pools))


def choose_cache_device(vram_budget, host_budget, matrix_bytes, n_expert, n_layers):
    """"vram" or "host": where moetools puts the fork's one cache -- the one holding more whole
    experts (VRAM on a tie: a VRAM hit costs no PCIe copy). A rule of moetools, not of the fork."""
    vram = fork_cache(vram_budget, matrix_bytes, n_expert, n_layers, "vram")
    host = fork_cache(host_budget or 0, matrix_bytes, n_expert, n_layers, "host")
    return "vram" if vram.expert_slots >= host.expert_slots else "host"


def cache_doc(cache):
    """JSON form for device-fit's document."""
    return {"device": cache.device, "budget_bytes": cache.budget_bytes, "expert_slots": cache.expert_slots,
            "pooled_bytes": cache.pooled_bytes, "unpooled_need_bytes": list(cache.unpooled),
            "pools": [{"need_bytes": p.need_bytes, "slot_bytes": p.slot_bytes, "slots": p.slots,
                       "matrix_kinds": p.kinds, "buffer_bytes": p.buffer_bytes} for p in cache.pools]}
