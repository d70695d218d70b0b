"""Remote MODEL sources: http(s) URLs read with range requests and hf:// names through huggingface_hub,
against a real threaded HTTP server on loopback (tests/httpfixture.py) that also emulates the Hub's
routes. Remote and local answers must be identical apart from paths; bytes served stay within the
header plus one chunk per shard; every bad input is one line, exit 2, with nothing cached."""

import json
import shlex
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.gguf import open_model
from moetools.gguf.header import HeaderIncomplete, parse_header_bytes, read_header
from moetools.gguf.remote import LATER_SHARD_CHUNK, next_read_end, sibling_urls
from moetools.gguf.locator import DEFAULT_CHUNK, FetchSettings, parse_hf
from tests import factory
from tests.httpfixture import Repo, Server
from tests.llama_tools import llama_tool

ROOT = Path(__file__).resolve().parent.parent
FETCH_KEYS = ("fetched_bytes", "requests", "cached_shards")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own header cache and no Hub token or offline switch from the environment."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MOETOOLS_CACHE_DIR", str(cache))
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "MOETOOLS_FETCH_CHUNK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no login cache of the machine's user
    return cache


def cache_files(cache):
    folder = cache / "headers"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def invoke(*args, code=0):
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    assert result.exit_code == code, (result.exit_code, result.output, result.stderr)
    return result


def run_json(*args, code=0):
    return json.loads(invoke(*args, "--json", code=code).stdout)


def one_error_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def fail(*args):
    """Run a command that must fail with one line and exit 2; returns that line."""
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    assert result.exit_code == 2, (result.exit_code, result.output)
    return one_error_line(result)


def normalised(doc, *prefixes):
    """A document with every path prefix replaced by <dir>/ and the fetch counters dropped."""
    if isinstance(doc, dict):
        doc = {key: value for key, value in doc.items() if key not in FETCH_KEYS}
    text = json.dumps(doc, sort_keys=True)
    for prefix in prefixes:
        text = text.replace(prefix, "<dir>/")
    return json.loads(text)


def header_ends(first_shard):
    """Each shard's header length (its data offset) of a local split model."""
    with open_model(first_shard) as model:
        return [header.data_offset for header in model.headers], [os.path.basename(p) for p in model.shards]


# --- the byte source under the parser -------------------------------------------------------------

def test_prefix_parse_asks_for_more_without_passing_the_header_end(tiny_models):
    """Any prefix of a header either parses to the same header or raises HeaderIncomplete naming more
    bytes than it holds and no more than the header's real end: the floor the fetch loop trusts."""
    for arch in ("deepseek2", "kimi-k3", "gpt-oss"):
        path = tiny_models[arch]
        full = read_header(path)
        with open(path, "rb") as handle:
            data = handle.read(full.data_offset)
        header_end = full.data_offset
        for length in list(range(0, min(header_end, 4096), 13)) + list(range(4096, header_end + 1, 997)) + [header_end]:
            try:
                parsed = parse_header_bytes(str(path), data[:length], full.file_size)
            except HeaderIncomplete as more:
                assert length < more.needed <= header_end, (arch, length, more.needed, header_end)
                continue
            assert length >= full.data_offset - full.alignment
            assert parsed.tensors == full.tensors and parsed.metadata.keys() == full.metadata.keys()


def test_lazy_arrays_of_a_fetched_header_read_from_the_fetched_bytes(preset_model):
    path = preset_model("kimi-k2", shards=3)
    local = read_header(path)
    with open(path, "rb") as handle:
        data = handle.read(local.data_offset)
    remote = parse_header_bytes("http://example/k2.gguf", data, local.file_size)
    tokens = remote.metadata["tokenizer.ggml.tokens"]
    every = local.metadata["tokenizer.ggml.tokens"].load()
    assert tokens.load() == every and tokens.head(5) == every[:5]
    assert remote.metadata["tokenizer.ggml.token_type"].head(3) == local.metadata["tokenizer.ggml.token_type"].load()[:3]


def test_next_read_end_doubles_but_stays_within_a_chunk_of_the_floor():
    chunk = 2 << 20
    assert next_read_end(chunk, chunk + 100, 10**12, chunk) == 2 * chunk  # geometric
    assert next_read_end(8 * chunk, 8 * chunk + 10, 10**12, chunk) == 9 * chunk + 10  # capped at floor + chunk
    assert next_read_end(chunk, 50 * chunk, 10**12, chunk) == 50 * chunk  # the floor itself is past the doubling
    assert next_read_end(chunk, 3 * chunk, 2 * chunk + 5, chunk) == 2 * chunk + 5  # never past the file


def test_sibling_urls_and_hf_names():
    urls = sibling_urls("https://h/x/m-00002-of-00003.gguf?sig=1")
    assert urls == [f"https://h/x/m-0000{i}-of-00003.gguf?sig=1" for i in (1, 2, 3)]
    assert sibling_urls("https://h/m.gguf") == ["https://h/m.gguf"]
    assert parse_hf("hf://org/repo@v1/sub/m.gguf") == ("org/repo", "v1", "sub/m.gguf")
    assert parse_hf("hf://org/repo") == ("org/repo", None, None)


# --- URLs -------------------------------------------------------------------------------------

@pytest.fixture
def k3_server(preset_model):
    first = preset_model("kimi-k3", shards=14)
    with Server(first.parent) as server:
        yield server, first


def test_inspect_url_matches_local_within_header_plus_one_chunk(k3_server, isolated_cache):
    server, first = k3_server
    local = run_json("inspect", first)
    remote = run_json("inspect", server.url("kimi-k3-00007-of-00014.gguf"))
    assert normalised(remote, server.url("")) == normalised(local, str(first.parent) + "/")
    # the counters are the server's, and no shard cost more than its header plus one chunk
    assert remote["requests"] == server.requests and remote["fetched_bytes"] == server.bytes_served
    ends, names = header_ends(first)
    for index, (end, name) in enumerate(zip(ends, names)):
        # the first shard starts with a whole chunk (vocabulary), the others with a small first read
        assert end <= server.served_by_path[f"/files/{name}"] <= end + (DEFAULT_CHUNK if index == 0 else LATER_SHARD_CHUNK)
    assert remote["requests"] <= len(names) + 2  # one read per shard, two more for the 6 MiB first header
    entries = cache_files(isolated_cache)
    assert len(entries) == 14
    # the cache keeps each header and nothing past it (one JSON line of metadata ahead of the bytes)
    sizes = sorted(os.path.getsize(isolated_cache / "headers" / entry) for entry in entries)
    assert all(size - end < 1024 for size, end in zip(sizes, sorted(ends))), (sizes, sorted(ends))


def test_device_fit_url_matches_local(k3_server):
    server, first = k3_server
    local = run_json("device-fit", first, "--vram", "32G", "--ram", "128G")
    remote = run_json("device-fit", server.url(first.name), "--vram", "32G", "--ram", "128G")
    # identical but for the launch lines' model flag: llama.cpp takes a URL as -mu, a path as -m
    text = json.dumps(remote)
    assert '"-mu"' in text and '"-m"' not in text
    remote = json.loads(text.replace('"-mu"', '"-m"'))
    assert normalised(remote, server.url("")) == normalised(local, str(first.parent) + "/")
    assert remote["fetched_bytes"] > 0 and remote["cached_shards"] == 0


def test_second_plan_is_served_from_the_cache_and_offline_works(k3_server):
    server, first = k3_server
    url = server.url(first.name)
    cold = run_json("inspect", url)
    server.reset_counters()
    warm = run_json("inspect", url)
    assert warm["fetched_bytes"] == 0 and warm["cached_shards"] == 14 and server.bytes_served == 0
    assert normalised(warm) == normalised(cold)
    server.reset_counters()
    offline = run_json("inspect", url, "--offline")
    assert server.requests == 0 and offline["requests"] == 0 and normalised(offline) == normalised(cold)


def test_a_corrupt_cache_entry_is_a_miss(k3_server, isolated_cache):
    server, first = k3_server
    url = server.url(first.name)
    run_json("inspect", url)
    for name in cache_files(isolated_cache):
        path = isolated_cache / "headers" / name
        blob = bytearray(path.read_bytes())
        blob[-1] ^= 0xFF
        path.write_bytes(bytes(blob))
    server.reset_counters()
    again = run_json("inspect", url)
    assert again["cached_shards"] == 0 and server.bytes_served > 0
    assert "offline" in fail("inspect", url + "x.gguf", "--offline")


def test_offline_without_a_cache_entry_is_one_line(k3_server):
    server, first = k3_server
    line = fail("inspect", server.url(first.name), "--offline")
    assert "offline" in line and "header cache" in line and server.requests == 0


@pytest.mark.parametrize("setup,words", [
    (lambda b: setattr(b, "ignore_range", True), "ignored the Range request"),
    (lambda b: setattr(b, "status", 401), "HF_TOKEN"),
    (lambda b: setattr(b, "status", 403), "HF_TOKEN"),
    (lambda b: setattr(b, "status", 404), "not found (HTTP 404)"),
    (lambda b: setattr(b, "redirect_loop", True), "redirect loop"),
    (lambda b: setattr(b, "short_by", 100), "short response"),
    (lambda b: setattr(b, "long_by", 100), "the server sent more than asked"),
    (lambda b: setattr(b, "flip_etag_after", 3), "changed while its header was read"),
    (lambda b: setattr(b, "delay", 3.0), "no answer within 0.3 s"),
])
def test_bad_servers_are_one_line_and_cache_nothing(preset_model, isolated_cache, setup, words):
    first = preset_model("kimi-k2", shards=3)
    with Server(first.parent) as server:
        setup(server.behaviour)
        line = fail("inspect", server.url(first.name), "--timeout", "0.3")
        assert words in line and first.name in line or "kimi-k2-0000" in line, line
        assert server.bytes_served < 3 * DEFAULT_CHUNK + 2 * DEFAULT_CHUNK  # never the whole file
    assert cache_files(isolated_cache) == []


def test_a_body_longer_than_the_range_is_its_own_error(preset_model, isolated_cache):
    """A 206 body with more bytes than the range asked for is not a "short response" (issue 32)."""
    first = preset_model("kimi-k2", shards=3)
    with Server(first.parent) as server:
        server.behaviour.long_by = 7
        line = fail("inspect", server.url(first.name))
        assert server.file_requests >= 1
    assert "the server sent more than asked" in line and "short response" not in line, line
    assert "bytes for the" in line and first.name in line, line
    assert cache_files(isolated_cache) == []


def test_a_missing_sibling_shard_is_one_line(preset_model, tmp_path, isolated_cache):
    first = preset_model("kimi-k2", shards=3)
    folder = tmp_path / "served"
    folder.mkdir()
    for index in (1, 2):
        os.link(first.parent / f"kimi-k2-0000{index}-of-00003.gguf", folder / f"kimi-k2-0000{index}-of-00003.gguf")
    with Server(folder) as server:
        line = fail("device-fit", server.url(first.name), "--vram", "32G")
    assert "kimi-k2-00003-of-00003.gguf" in line and "HTTP 404" in line
    assert cache_files(isolated_cache) == []


def test_timeout_must_be_positive(k3_server):
    server, first = k3_server
    assert "--timeout" in fail("inspect", server.url(first.name), "--timeout", "0")


def test_commands_that_need_tensor_data_refuse_remote_sources(tmp_path):
    url = "http://127.0.0.1:9/m-00001-of-00002.gguf"
    assert "quantize reads tensor data" in fail("quantize", url, "--type", "q8_0")
    assert "container-encode reads tensor data" in fail("container-encode", url, "-o", tmp_path / "c")
    assert "hf://org/repo/m.gguf: quantize" in fail("quantize", "hf://org/repo/m.gguf", "--type", "q8_0")


def test_trace_tail_layer_map_reads_a_remote_header(k3_server):
    from moetools.tracetail.reader import LayerMap

    server, first = k3_server
    local = LayerMap.from_model(str(first))
    remote = LayerMap.from_model(server.url(first.name))
    assert (remote.table, remote.moe_layers, remote.n_expert, remote.top_k) == (local.table, local.moe_layers, local.n_expert, local.top_k)


def test_trace_tail_takes_the_remote_source_options(k3_server, tmp_path):
    """trace-tail --model URL honours --offline and --timeout like inspect and device-fit."""
    server, first = k3_server
    trace = tmp_path / "empty.trace"
    trace.write_bytes(b"")
    line = fail("trace-tail", trace, "--model", server.url(first.name), "--once", "--offline")
    assert "offline" in line and "header cache" in line and server.requests == 0
    server.behaviour.delay = 3.0
    assert "no answer within 0.3 s" in fail("trace-tail", trace, "--model", server.url(first.name), "--once", "--timeout", "0.3")


def test_a_remote_model_refuses_tensor_reads(k3_server):
    server, first = k3_server
    with open_model(server.url(first.name), FetchSettings()) as model:
        with pytest.raises(Exception, match="not downloaded"):
            model.read_tensor_bytes(model.tensors[0], 0, 16)


# --- the Hub ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def hub_files(preset_model, tmp_path_factory):
    """The files of the emulated repos, written once per session."""
    k2 = preset_model("kimi-k2", shards=3)
    quants = tmp_path_factory.mktemp("quants")
    q8 = factory.write_tiny(quants, "qwen3moe", name="tiny-Q8_0")
    q4 = factory.write_tiny(quants, "qwen3moe", name="tiny-Q4_0", types=factory.synth.Types(expert=factory.synth.Q4_0))
    readme = quants / "README.md"
    readme.write_text("# a model\n")
    return k2, q8, q4, readme



def _damaged_gguf(folder):
    """A GGUF whose header lies: its tensor count is past what the file holds."""
    path = folder / "broken-Q2_K.gguf"
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (10**6).to_bytes(8, "little") + (0).to_bytes(8, "little"))
    return path

@pytest.fixture
def hub(hub_files, monkeypatch):
    """A Hub emulation with repo org/kimi: a 3-shard K2-class set in a folder, two single-file quants
    of a tiny model, and a README; plus an empty repo and a gated one. huggingface_hub's endpoint is
    pointed at it (constants.ENDPOINT, what HF_ENDPOINT sets at import)."""
    from huggingface_hub import constants

    k2, q8, q4, readme = hub_files
    files = {f"UD-Q2/kimi-k2-0000{i}-of-00003.gguf": k2.parent / f"kimi-k2-0000{i}-of-00003.gguf" for i in (1, 2, 3)}
    files.update({"tiny-Q8_0.gguf": q8, "tiny-Q4_0.gguf": q4, "README.md": readme})
    repos = {"org/kimi": Repo({k: str(v) for k, v in files.items()}, commit=COMMIT),
             "org/empty": Repo({"README.md": str(readme)}),
             "org/gated": Repo({"tiny-Q8_0.gguf": str(q8)}, gated=True),
             "org/damaged": Repo({"tiny-Q8_0.gguf": str(q8), "broken-Q2_K.gguf": str(_damaged_gguf(q8.parent))})}
    with Server(repos=repos) as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.hub_endpoint)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        server.k2, server.q8, server.q4 = k2, q8, q4
        yield server


def test_hf_file_inspect_matches_local_through_hf_endpoint(hub, isolated_cache):
    """A whole process with HF_ENDPOINT in its environment, as a user runs it."""
    env = dict(os.environ, HF_ENDPOINT=hub.hub_endpoint)
    proc = subprocess.run([sys.executable, "-m", "moetools", "inspect", "hf://org/kimi/UD-Q2/kimi-k2-00002-of-00003.gguf", "--json"],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    remote = json.loads(proc.stdout)
    local = run_json("inspect", hub.k2)
    assert normalised(remote, "hf://org/kimi/UD-Q2/") == normalised(local, str(hub.k2.parent) + "/")
    # one model_info call, then per shard the resolve redirect and the CDN read (plus growth of shard 1)
    assert any(path.startswith("/api/models/org/kimi") for path in hub.log)
    assert remote["requests"] == sum(1 for path in hub.log if not path.startswith("/api/"))


def test_hf_repo_inspect_lists_every_set(hub):
    doc = run_json("inspect", "hf://org/kimi")
    assert doc["commit"] == COMMIT
    sets = {entry["name"]: entry for entry in doc["sets"]}
    assert sorted(sets) == ["UD-Q2/kimi-k2", "tiny-Q4_0", "tiny-Q8_0"]
    assert sets["UD-Q2/kimi-k2"]["shards"] == 3
    assert sets["UD-Q2/kimi-k2"]["bytes"] == sum(os.path.getsize(hub.k2.parent / f"kimi-k2-0000{i}-of-00003.gguf") for i in (1, 2, 3))
    assert sets["UD-Q2/kimi-k2"]["file_type"] == run_json("inspect", hub.k2)["file_type"]
    assert sets["tiny-Q8_0"]["file_type"] == run_json("inspect", hub.q8)["file_type"]
    narrowed = run_json("inspect", "hf://org/kimi", "--include", "tiny-*")
    assert [entry["name"] for entry in narrowed["sets"]] == ["tiny-Q4_0", "tiny-Q8_0"]


def test_hf_repo_device_fit_is_one_row_per_set_equal_to_single_plans(hub):
    rows = run_json("device-fit", "hf://org/kimi@main", "--vram", "32G", "--runtime", "fork")
    assert isinstance(rows, list) and [row["set"] for row in rows] == ["UD-Q2/kimi-k2", "tiny-Q4_0", "tiny-Q8_0"]
    for row, local_path in zip(rows, (hub.k2, hub.q4, hub.q8)):
        local = run_json("device-fit", local_path, "--vram", "32G", "--runtime", "fork")
        assert (row["verdict"], row["context"], row["slots"], row["tok_s"]) == (
            local["verdict"], local["context"], local["slots"], local["tok_s"])
        inspected = run_json("inspect", local_path)
        assert (row["resident_bytes"], row["expert_bytes"], row["file_type"]) == (
            inspected["resident_bytes"], inspected["expert_bytes"], inspected["file_type"])
    table = invoke("device-fit", "hf://org/kimi", "--vram", "32G", "--runtime", "fork").stdout
    assert "UD-Q2/kimi-k2" in table and "tiny-Q4_0" in table


@pytest.mark.parametrize("runtime", [[], ["--runtime", "llama"]])
def test_hf_repo_with_upstream_llama_is_one_row_per_quant_fastest_first(hub, runtime):
    """Which quant of a repo fits, for upstream llama.cpp (the default runtime too): every GGUF set
    planned on the devices given, equal to its single plan, sorted by speed among those that fit, each
    with its launch arguments; the table's launch line is the fastest set's."""
    devices = ["--vram", "4G", "--ram", "64G"]
    rows = run_json("device-fit", "hf://org/kimi@main", *devices, *runtime)
    assert sorted(row["set"] for row in rows) == ["UD-Q2/kimi-k2", "tiny-Q4_0", "tiny-Q8_0"]
    for row in rows:
        path = {"UD-Q2/kimi-k2": hub.k2, "tiny-Q4_0": hub.q4, "tiny-Q8_0": hub.q8}[row["set"]]
        local = run_json("device-fit", path, *devices, "--runtime", "llama")
        assert (row["verdict"], row["context"], row["tok_s"]) == (local["verdict"], local["context"], local["tok_s"])
        placement = local["placement"] or {}
        assert (row["ngl"], row["n_cpu_moe"]) == (placement.get("ngl"), placement.get("n_cpu_moe"))
        if row["verdict"] == "fits":
            assert row["args"][0] == "-hf" and "-ngl" in row["args"]
    fitting = [row for row in rows if row["verdict"] == "fits"]
    assert fitting and rows[:len(fitting)] == fitting
    assert [row["tok_s"] for row in fitting] == sorted((row["tok_s"] for row in fitting), reverse=True)
    assert fitting[0].get("chosen") and not any(row.get("chosen") for row in rows[1:])
    if sys.platform != "win32":  # the table view, on a terminal (a pty: POSIX only)
        screen = _on_a_terminal(["device-fit", "hf://org/kimi", *devices, *runtime], HF_ENDPOINT=hub.hub_endpoint)
        assert "UD-Q2/kimi-k2" in screen and "tiny-Q8_0" in screen, screen
        lines = screen[screen.index("llama-server"):].splitlines()
        end = next(index for index, line in enumerate(lines) if not line.endswith(" \\"))
        command = " ".join(line.removesuffix(" \\") for line in lines[:end + 1])
        assert shlex.split(command)[1:] == fitting[0]["args"], screen


def _on_a_terminal(args, **env):
    """What `moetools ARGS` prints on an 200-column terminal (stdout and stderr on one pty)."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "moetools", *map(str, args)], cwd=ROOT, stdout=follower,
                               stderr=follower, stdin=subprocess.DEVNULL, env=dict(os.environ, COLUMNS="200", **env))
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    process.wait(timeout=120)
    os.close(leader)
    return seen.decode("utf-8", "replace").replace("\r\n", "\n")


def test_hf_repo_llama_listing_with_a_damaged_set_still_plans_the_others(hub):
    """A set whose header does not parse is a row saying why; the others are planned (exit 0)."""
    result = invoke("device-fit", "hf://org/damaged", "--vram", "4G", "--ram", "64G", "--runtime", "llama", "--json")
    rows = {row["set"]: row for row in json.loads(result.stdout)}
    assert rows["tiny-Q8_0"]["verdict"] == "fits"
    assert rows["broken-Q2_K"]["verdict"] == "unreadable" and rows["broken-Q2_K"]["error"]
    assert "broken-Q2_K" in result.stderr


def test_hf_repo_without_a_gguf_set_is_exit_2_for_upstream_too(hub):
    result = invoke("device-fit", "hf://org/empty", "--vram", "4G", "--runtime", "llama", code=2)
    assert len(result.stderr.strip().splitlines()) == 1, result.output


def test_hf_second_plan_needs_only_the_listing_and_offline_needs_nothing(hub):
    run_json("device-fit", "hf://org/kimi", "--vram", "32G")
    hub.reset_counters()
    rows = run_json("device-fit", "hf://org/kimi", "--vram", "32G")
    assert hub.log == ["/api/models/org/kimi?blobs=True"] or [p.split("?")[0] for p in hub.log] == ["/api/models/org/kimi"]
    assert all(row["fetched_bytes"] == 0 for row in rows)
    hub.reset_counters()
    offline = run_json("device-fit", "hf://org/kimi", "--vram", "32G", "--offline")
    assert hub.requests == 0 and normalised(offline) == normalised(rows)


@pytest.mark.parametrize("name,words", [
    ("hf://org/kimi@nope", "unknown revision 'nope'"),
    ("hf://org/missing", "repository not found"),
    ("hf://org/gated", "HF_TOKEN"),
    ("hf://org/empty", "no GGUF files"),
    ("hf://org/kimi/absent.gguf", "no such file in the repo"),
])
def test_hub_bad_input_is_one_line(hub, isolated_cache, name, words):
    assert words in fail("inspect", name)
    assert words in fail("device-fit", name, "--vram", "32G")
    assert not [entry for entry in cache_files(isolated_cache)]


def test_a_gated_repo_works_with_hf_token(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    doc = run_json("inspect", "hf://org/gated/tiny-Q8_0.gguf")
    assert doc["architecture"] == "qwen3moe"


def test_a_shard_from_another_commit_is_refused_and_not_cached(hub, isolated_cache):
    hub.behaviour.commit_override = "f" * 40
    line = fail("inspect", "hf://org/kimi/UD-Q2/kimi-k2-00001-of-00003.gguf")
    assert "the repo changed while it was read" in line
    assert cache_files(isolated_cache) == []


def test_local_sources_import_no_network_modules(tiny_models):
    code = ("import sys\nsys.argv = ['moetools', %r, %r, %s]\nfrom moetools.cli import cli\n"
            "try:\n    cli()\nexcept SystemExit:\n    pass\n"
            "loaded = [m for m in ('huggingface_hub', 'http.client', 'moetools.gguf.remote', 'concurrent.futures') if m in sys.modules]\n"
            "sys.stderr.write('LOADED=' + ','.join(loaded))")
    for command, extra in (("inspect", "'--json'"), ("device-fit", "'--vram', '8G', '--json'")):
        proc = subprocess.run([sys.executable, "-c", code % (command, str(tiny_models["kimi-k3"]), extra)],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.stderr.endswith("LOADED="), proc.stderr


# --- launch lines llama.cpp accepts -------------------------------------------------------------

def test_launch_lines_name_a_remote_model_the_way_llama_cpp_takes_it(monkeypatch):
    """llama.cpp's -m takes a local path only (common/arg.cpp): a URL is -mu, an hf:// file on the
    default branch is -hf REPO -hff PATH, one at another revision a -mu resolve URL."""
    from moetools.errors import UsageError
    from moetools.gguf.locator import llama_model_args

    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert llama_model_args("/models/m-00001-of-00002.gguf") == ["-m", "/models/m-00001-of-00002.gguf"]
    assert llama_model_args("https://h/x/m-00002-of-00003.gguf") == ["-mu", "https://h/x/m-00002-of-00003.gguf"]
    assert llama_model_args("hf://org/kimi/UD-Q2/k-00001-of-00003.gguf") == ["-hf", "org/kimi", "-hff", "UD-Q2/k-00001-of-00003.gguf"]
    assert llama_model_args("hf://org/kimi@main/k.gguf") == ["-hf", "org/kimi", "-hff", "k.gguf"]
    assert llama_model_args(f"hf://org/kimi@{COMMIT}/UD-Q2/k.gguf") == [
        "-mu", f"https://huggingface.co/org/kimi/resolve/{COMMIT}/UD-Q2/k.gguf"]
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror:8080/")
    assert llama_model_args("hf://org/kimi@v1.0/k.gguf") == ["-mu", "http://mirror:8080/org/kimi/resolve/v1.0/k.gguf"]
    with pytest.raises(UsageError):
        llama_model_args("hf://org/kimi")


def emitted_command(model):
    doc = run_json("device-fit", model, "--vram", "32G", "--emit", "llama")
    assert doc["command"][0] == "llama-server"
    return doc["command"][1:]


def test_device_fit_launch_lines_never_pass_a_url_to_dash_m(k3_server, hub):
    server, first = k3_server
    url = server.url(first.name)
    args = emitted_command(url)
    assert args[:2] == ["-mu", url] and "-m" not in args
    env_doc = run_json("device-fit", url, "--vram", "32G", "--emit", "env")
    assert env_doc["command"][1:3] == ["-mu", url]
    assert emitted_command("hf://org/kimi/UD-Q2/kimi-k2-00002-of-00003.gguf")[:4] == [
        "-hf", "org/kimi", "-hff", "UD-Q2/kimi-k2-00001-of-00003.gguf"]
    pinned = emitted_command(f"hf://org/kimi@{COMMIT}/tiny-Q8_0.gguf")
    assert pinned[0] == "-mu" and pinned[1].endswith(f"/org/kimi/resolve/{COMMIT}/tiny-Q8_0.gguf")


def test_llama_cpp_loads_a_remote_model_from_the_emitted_launch_line(tmp_path, monkeypatch):
    """The emitted model arguments run through llama.cpp's own loader (llama-fit-params downloads the
    model, every shard, and fits it): -mu from a URL, -hf/-hff through the Hub emulation."""
    fit_params = llama_tool("llama-fit-params")
    first = factory.write_tiny(tmp_path / "model", "qwen3moe", shards=2)
    quant = factory.write_tiny(tmp_path / "quant", "qwen3moe", name="tiny-Q8_0")
    repos = {"org/tiny": Repo({"tiny-Q8_0.gguf": str(quant)}, commit=COMMIT)}
    with Server(first.parent, repos=repos) as server:
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "ENDPOINT", server.hub_endpoint)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        for model, served in ((server.url(first.name), sorted(first.parent.iterdir())),
                              ("hf://org/tiny/tiny-Q8_0.gguf", [quant])):
            args = emitted_command(model)
            model_args = args[:4] if args[0] == "-hf" else args[:2]
            cache = tmp_path / f"llama-cache-{model_args[0]}"
            env = dict(os.environ, LLAMA_CACHE=str(cache), HF_HOME=str(cache / "hf"), HF_ENDPOINT=server.hub_endpoint)
            env.pop("HF_TOKEN", None)
            proc = subprocess.run([fit_params, *model_args, "-nr", "-c", "512"], capture_output=True, text=True, env=env, timeout=120)
            assert proc.returncode == 0, (model_args, proc.stderr[-2000:])
            downloaded = sorted(p for p in cache.rglob("*.gguf") if p.is_file())
            assert sorted(p.name for p in downloaded) == sorted(p.name for p in served), (model_args, downloaded)
            assert all(p.read_bytes() == next(s for s in served if s.name == p.name).read_bytes() for p in downloaded)
