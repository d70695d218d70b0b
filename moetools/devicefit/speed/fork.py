"""The streaming fork's decode speed: expert misses of its hot-expert cache crossing PCIe."""


def fork_tok_s(coverage, experts_per_token, expert_bytes, h2d_bytes_per_s, floor_s, drive_share=0.0,
               disk_bytes_per_s=None, cache_on_host=False):
    """The streaming fork, per token: the expert bytes read (experts_per_token x expert_bytes) that miss
    the cache cross PCIe at h2d, and the share of them the page cache does not hold (drive_share) is read
    from the drive first; with the cache in host RAM its hits cross PCIe too.

        tok/s = 1 / (hits' PCIe + (1 - coverage) x bytes x (1/h2d + drive_share/disk) + floor)

    With the cache in VRAM and every expert in RAM this is 1 / ((1 - coverage) x bytes / h2d + floor)."""
    read = experts_per_token * expert_bytes
    miss_seconds = (1.0 - coverage) * read / h2d_bytes_per_s
    if drive_share > 0 and disk_bytes_per_s:
        miss_seconds += (1.0 - coverage) * read * drive_share / disk_bytes_per_s
    hit_seconds = coverage * read / h2d_bytes_per_s if cache_on_host else 0.0
    return 1.0 / (hit_seconds + miss_seconds + floor_s)
