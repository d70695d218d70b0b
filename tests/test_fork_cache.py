"""device-fit's model of the fork's ONE expert cache and its pools by expert size, held against
CambrianTech/llama.cpp ggml/src/ggml-moe-residency.hpp `ResidencyCache::ensure_pool` (slot = need
rounded up to 256, budget / MAX_POOLS (6) per pool, no pool for a class with 0 slots or a 7th class)
and `MoeServingConfig::from_env` (GGML_MOE_HOST_CACHE_GB / GGML_MOE_VRAM_CACHE_GB / GGML_MOE_CAPTURE_FILE)."""

import json

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.devicefit import fork_cache
from moetools.formats.plan import active_cache_budget

MIB = 1 << 20


def test_one_size_class_gets_a_sixth_of_the_budget_in_256_byte_slots():
    sizes = [(block, 1000) for block in range(4) for _ in range(3)]  # 4 layers x (gate, up, down) of 1000 B
    cache = fork_cache.fork_cache(6 * 100 * 1536, sizes, n_expert=64, n_layers=4)
    (pool,) = cache.pools
    # need = 1000 + min(1000, 512) = 1512 -> slot 1536; share = budget / 6 = 100 slots
    assert (pool.need_bytes, pool.slot_bytes, pool.slots, pool.kinds) == (1512, 1536, 100, 12)
    assert pool.buffer_bytes == 101 * 1536  # one guard slot past the last
    assert cache.expert_slots == 100 // 3  # each expert takes three slots of the one pool
    assert fork_cache.fork_cache(6 * 1535, sizes, 8, 4).expert_slots == 0  # a share smaller than one slot


def test_a_seventh_size_class_and_a_starved_class_get_no_pool():
    sizes = [(block, 10_000 + 1000 * block) for block in range(7)]
    cache = fork_cache.fork_cache(6 * 20 * 20_000, sizes, n_expert=4, n_layers=7)
    assert len(cache.pools) == 6 and cache.unpooled == (16_000 + 512,)
    small = fork_cache.fork_cache(6 * 11_000, [(0, 1000), (1, 50_000)], n_expert=4, n_layers=2)
    assert [p.need_bytes for p in small.pools] == [1512] and small.unpooled == (50_512,)


def test_cache_full_at_every_expert():
    sizes = [(block, 4096) for block in range(2) for _ in range(3)]
    cache = fork_cache.fork_cache(10**12, sizes, n_expert=8, n_layers=2)
    assert cache.expert_slots == 16


@pytest.fixture(scope="module")
def k3(preset_model):
    return preset_model("kimi-k3", 2)


def run(*args):
    return CliRunner().invoke(cli, ["device-fit", "--runtime", "fork", *map(str, args)], catch_exceptions=False)


def test_one_cache_in_host_ram_when_it_holds_more_experts(k3, tmp_path):
    doc = json.loads(run(k3, "--vram", "32G", "--ctx", 32768, "--ram", "2T", "--json").stdout)
    assert doc["fork_cache"]["device"] == "host" and doc["fork_cache"]["budget_bytes"] == doc["host"]["host_cache_bytes"]
    env = run(k3, "--vram", "32G", "--ctx", 32768, "--ram", "2T", "--emit", "env", "--capture", tmp_path / "cap.jsonl").stdout
    lines = env.splitlines()
    gib = doc["host"]["host_cache_bytes"] / (1 << 30)
    assert "unset GGML_MOE_VRAM_CACHE_GB" in lines  # never both caches: from_env would size a device cache too
    assert f"export GGML_MOE_HOST_CACHE_GB={int(gib * 100) / 100:.2f}" in lines
    assert f"export GGML_MOE_CAPTURE_FILE={tmp_path / 'cap.jsonl'}" in lines
    plan = tmp_path / "plan.json"
    run(k3, "--vram", "32G", "--ctx", 32768, "--ram", "2T", "--plan", plan, "--json")
    written = json.loads(plan.read_text())
    assert written["cache_device"] == "host" and active_cache_budget(written) == written["budget_bytes"]


def test_one_cache_in_vram_without_a_host_budget(k3, tmp_path):
    plan = tmp_path / "plan.json"
    doc = json.loads(run(k3, "--vram", "32G", "--ctx", 32768, "--plan", plan, "--json").stdout)
    assert doc["fork_cache"]["device"] == "vram" and doc["slots"] == doc["fork_cache"]["expert_slots"]
    written = json.loads(plan.read_text())
    assert written["cache_device"] == "vram" and active_cache_budget(written) == written["device_budget_bytes"]
    env = run(k3, "--vram", "32G", "--ctx", 32768, "--emit", "env").stdout.splitlines()
    assert "unset GGML_MOE_HOST_CACHE_GB" in env and any(line.startswith("export GGML_MOE_VRAM_CACHE_GB=") for line in env)


def test_a_budget_the_pools_cannot_use_is_explained(preset_model):
    """Kimi-K3-class experts come in two matrix sizes: the fork's two pools get 2/6 of the budget, so the
    ledger's slots hold a third of the budget it shows; device-fit says why (ensure_pool's 1/MAX_POOLS)."""
    import json

    from click.testing import CliRunner

    from moetools.cli import cli

    doc = json.loads(CliRunner().invoke(cli, ["device-fit", "--runtime", "fork", str(preset_model("kimi-k3")), "--vram", "32G", "--ctx",
                                              "32768", "--json"]).stdout)
    cache = doc["fork_cache"]
    assert len(cache["pools"]) == 2 and cache["pooled_bytes"] < 0.5 * cache["budget_bytes"]
    notes = [note for note in doc["notes"] if "possible pools" in note]
    assert len(notes) == 1 and notes[0].endswith(f"2 expert matrix sizes use 1.24 GiB of it: {cache['expert_slots']} slots")


def test_a_budget_the_pools_use_needs_no_note():
    from moetools.devicefit.render import pool_notes

    assert pool_notes({"pools": [{}] * 6, "pooled_bytes": 95, "budget_bytes": 100, "expert_slots": 9}) == []
    assert pool_notes(None) == []
