"""Resident tiers where the serving daemon finds them, checked with the daemon's own rules
(tests/fork_rules.py restates them): CambrianTech/continuum division_actuation.rs
`parse_resident_manifest` / `discover_resident_tiers`, and the model registry's `storage_root`,
`device_fit_cache_dir` (slug) and `resolve_device_fit_override` (`resident-bytes`)."""

import json
import os

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.formats import storage
from tests import fork_rules
from tests.test_quantize import small

MODEL_ID = "moonshotai/Kimi_K2.5  Instruct"  # slash, dot, underscore, two spaces: one '-' each


def invoke(*args, env=None):
    return CliRunner(env=env).invoke(cli, [*map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """quantize --install of two tiers into a fresh storage root: (root, source model, JSON doc)."""
    base = tmp_path_factory.mktemp("install")
    source = small(base)
    root = base / "storage"
    result = invoke("quantize", source, "--pure", "--type", "q8_0,q4_0", "--install", "--storage-root", root,
                    "--model-id", MODEL_ID, "--json")
    assert result.exit_code == 0, result.output
    return root, source, json.loads(result.stdout)


def test_slug_is_the_daemons_one_char_for_one():
    assert storage.device_fit_slug(MODEL_ID) == "moonshotai-kimi-k2-5--instruct" == fork_rules.device_fit_slug(MODEL_ID)
    assert storage.device_fit_slug("Qwen3-235B-A22B é") == fork_rules.device_fit_slug("Qwen3-235B-A22B é") == "qwen3-235b-a22b--"


def test_install_puts_tiers_where_discover_resident_tiers_finds_them(installed):
    root, _, doc = installed
    folder = root / "device-fit" / fork_rules.device_fit_slug(MODEL_ID)
    assert doc["output_dir"] == str(folder) and doc["install"]["slug"] == folder.name
    found = fork_rules.discover_resident_tiers(str(folder))
    by_label = {label: (size, gguf) for label, size, gguf in found}
    assert sorted(by_label) == ["q4_0", "q8_0"]
    for tier in doc["tiers"]:
        assert by_label[tier["tier"]] == (tier["resident_bytes"], tier["gguf"])
        assert os.path.basename(tier["manifest"]) == os.path.basename(tier["gguf"]) + ".resident.json"


def test_install_resident_bytes_prices_the_gguf_the_daemon_loads(installed):
    root, _, doc = installed
    folder = str(root / "device-fit" / fork_rules.device_fit_slug(MODEL_ID))
    smallest = min(doc["tiers"], key=lambda tier: tier["resident_bytes"])
    assert fork_rules.resolve_device_fit_override(folder, 10**15) == (smallest["gguf"], smallest["resident_bytes"])
    assert fork_rules.resolve_device_fit_override(folder, smallest["resident_bytes"] - 1) is None  # does not fit: refused
    assert doc["install"]["override"] == smallest["gguf"]


def test_device_fit_discovers_installed_tiers_in_the_storage_root(installed):
    root, source, doc = installed
    result = invoke("device-fit", "--runtime", "fork", source, "--vram", "8G", "--storage-root", root, "--model-id", MODEL_ID, "--json")
    assert result.exit_code == 0, result.output
    labels = {division["tier"] for division in json.loads(result.stdout)["divisions"]}
    assert {"q8_0", "q4_0"} <= labels
    # without the model id the daemon's folder is another one: the tiers are not there
    result = invoke("device-fit", "--runtime", "fork", source, "--vram", "8G", "--storage-root", root, "--json")
    assert {division["tier"] for division in json.loads(result.stdout)["divisions"]} == {"native"}


def test_storage_root_follows_the_daemons_environment_rules(tmp_path):
    home = tmp_path / "home"
    (home / ".continuum").mkdir(parents=True)
    for env in ({"CONTINUUM_STORAGE_PATH": str(tmp_path / "s")}, {"CONTINUUM_STORAGE_PATH": "  "}, {}):
        env = {**env, "HOME": str(home)}
        assert storage.storage_root(env) == fork_rules.storage_root(env, str(home))
    (home / ".continuum" / "config.env").write_text("HF_HOME=/x\nCONTINUUM_STORAGE_PATH=/mnt/cold\n")
    env = {"HOME": str(home)}
    assert storage.storage_root(env) == fork_rules.storage_root(env, str(home)) == "/mnt/cold"


def test_install_default_root_is_the_environment(tmp_path):
    source = small(tmp_path)
    root = tmp_path / "from-env"
    result = invoke("quantize", source, "--pure", "--type", "q4_0", "--install", "--json", env={"CONTINUUM_STORAGE_PATH": str(root)})
    assert result.exit_code == 0, result.output
    folder = root / "device-fit" / "qwen3moe"
    assert fork_rules.discover_resident_tiers(str(folder))[0][0] == "q4_0"
    assert (folder / "resident-bytes").read_text().strip().isdigit()


def test_unwritable_storage_root_is_exit_2_and_nothing_is_written(tmp_path):
    source = small(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = invoke("quantize", source, "--pure", "--type", "q4_0", "--install", "--storage-root", blocker / "root")
    assert result.exit_code == 2 and "cannot create the output folder" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["a-file", "qwen3moe.gguf"]


def test_install_refuses_full_and_output_dir(tmp_path):
    source = small(tmp_path)
    assert invoke("quantize", source, "--pure", "--type", "q4_0", "--install", "--full").exit_code == 2
    assert invoke("quantize", source, "--pure", "--type", "q4_0", "--install", "-o", tmp_path / "o").exit_code == 2
    assert invoke("quantize", source, "--pure", "--type", "q4_0", "--model-id", "x").exit_code == 2


def test_old_stem_tier_manifests_and_manifests_beside_the_model_are_still_read(installed, tmp_path):
    _, source, doc = installed
    tier = next(t for t in doc["tiers"] if t["tier"] == "q8_0")
    manifest = json.load(open(tier["manifest"]))
    old = tmp_path / "device-fit" / "qwen3moe"
    old.mkdir(parents=True)
    os.link(tier["gguf"], old / "qwen3moe-q8_0.gguf")
    (old / "qwen3moe-q8_0.resident.json").write_text(json.dumps(manifest))  # the old name, GGUF in "gguf"
    os.link(source, tmp_path / "qwen3moe.gguf")
    beside = dict(manifest, tier_label="q4_0-beside")
    beside.pop("gguf")
    os.link(tier["gguf"], tmp_path / "qwen3moe-x.gguf")
    (tmp_path / "qwen3moe-x.gguf.resident.json").write_text(json.dumps(beside))  # GGUF found by dropping the suffix
    result = invoke("device-fit", "--runtime", "fork", tmp_path / "qwen3moe.gguf", "--vram", "8G", "--json")
    labels = {division["tier"] for division in json.loads(result.stdout)["divisions"]}
    assert {"q8_0", "q4_0-beside"} <= labels


def test_a_resident_bytes_file_that_disagrees_is_a_warning(installed, tmp_path):
    root, source, _ = installed
    folder = root / "device-fit" / fork_rules.device_fit_slug(MODEL_ID)
    good = (folder / "resident-bytes").read_text()
    try:
        (folder / "resident-bytes").write_text("12345\n")
        result = invoke("device-fit", "--runtime", "fork", source, "--vram", "8G", "--storage-root", root, "--model-id", MODEL_ID, "--json")
        assert "resident-bytes says 12345" in result.stderr
        (folder / "resident-bytes").write_text("lots")
        result = invoke("device-fit", "--runtime", "fork", source, "--vram", "8G", "--storage-root", root, "--model-id", MODEL_ID, "--json")
        assert "not a whole number" in result.stderr and result.exit_code == 0
    finally:
        (folder / "resident-bytes").write_text(good)
