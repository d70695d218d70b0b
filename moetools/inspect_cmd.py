"""`moetools inspect MODEL`: the shared reader's summary of a GGUF model, local or remote.

    moetools inspect k3-00001-of-00014.gguf
    moetools inspect model.gguf --json --tensors | jq '.tensors[] | select(.type == "q4_K")'
    moetools inspect https://host/models/k3-00001-of-00014.gguf --json | jq .fetched_bytes
    moetools inspect hf://ORG/REPO                 # every GGUF set in the repo: sizes, file types
    moetools inspect hf://ORG/REPO@main/Q4_K_M/m-00001-of-00009.gguf --metadata
"""

import os

import click

from moetools import helptext
from moetools.gguf import open_model
from moetools.gguf.constants import GGUF_VALUE_TYPES, VALUE_ARRAY, file_type_name
from moetools.gguf.header import LazyArray
from moetools.errors import printable_line
from moetools.gguf.locator import is_repo
from moetools.output import Table, render, warn
from moetools.formats.tier_gguf import tier_identity
from moetools.sizes import format_size
from moetools.sourceopts import source_options

# how many leading items of a metadata array `--metadata` shows
ARRAY_HEAD = 8
# the most characters a text cell read from the file shows on a terminal (a megabyte general.name would
# otherwise fill the screen for minutes); the JSON holds the whole text
CELL_CHARS = 120


def bounded_cell(text):
    """`text` (from the file) as a table shows it: control characters escaped, and past CELL_CHARS cut
    with an ellipsis that says how long the whole is."""
    whole = len(str(text))
    text = printable_line(str(text))
    if len(text) <= CELL_CHARS:
        return text
    return f"{text[:CELL_CHARS]}… ({whole:,} characters; --json has them all)"


def _compact(values):
    """A per-layer list as one number when every layer agrees."""
    return values[0] if values and all(value == values[0] for value in values) else list(values)


def describe_per_layer(value):
    """A per-layer value for a table cell: `8`, or `0 on 70 layers, 1 on 23` for an array."""
    if not isinstance(value, list):
        return str(value)
    counts = {}
    for item in value:
        counts[item] = counts.get(item, 0) + 1
    return ", ".join(f"{item} on {count} layers" for item, count in sorted(counts.items()))


def layer_runs(per_layer):
    """Group {layer: bytes} into runs of consecutive layers with equal bytes: [(first, last, bytes)]."""
    runs = []
    for layer, value in per_layer.items():
        if runs and runs[-1][2] == value and runs[-1][1] == layer - 1:
            runs[-1] = (runs[-1][0], layer, value)
        else:
            runs.append((layer, layer, value))
    return runs


def parameter_counts(model):
    """(total, active per token) weights. Active counts every non-expert tensor and the routed
    experts' share top-k / expert_count (shared experts are resident tensors, always active)."""
    total = expert = 0
    for tensor in model.tensors:
        total += tensor.n_elements
        if model.is_expert(tensor):
            expert += tensor.n_elements
    summary = model.summary
    active = total - expert
    if expert and summary.expert_count:
        active += expert * min(summary.expert_used_count, summary.expert_count) // summary.expert_count
    return total, active


def _value_type_name(type_id):
    return GGUF_VALUE_TYPES[type_id][0].lower() if type_id in GGUF_VALUE_TYPES else str(type_id)


def metadata_entries(model):
    """The first shard's raw key/value pairs, in file order: `{"key", "type", "value"}`; arrays as
    `{"key", "type": "array", "element_type", "length", "first": [up to ARRAY_HEAD items]}`."""
    header = model.headers[0]
    entries = []
    for key, value in header.metadata.items():
        value_type = header.value_types.get(key)
        if isinstance(value_type, tuple) and value_type[0] == VALUE_ARRAY:
            first = value.head(ARRAY_HEAD) if isinstance(value, LazyArray) else list(value[:ARRAY_HEAD])
            entries.append({"key": key, "type": "array", "element_type": _value_type_name(value_type[1]),
                            "length": len(value), "first": first})
        else:
            entries.append({"key": key, "type": _value_type_name(value_type), "value": value})
    return entries


def _metadata_cell(entry):
    if entry["type"] != "array":
        return bounded_cell(repr(entry["value"]) if isinstance(entry["value"], str) else str(entry["value"]))
    shown = ", ".join(repr(item) if isinstance(item, str) else str(item) for item in entry["first"])
    more = ", ..." if entry["length"] > len(entry["first"]) else ""
    return bounded_cell(f"[{entry['element_type']} x {entry['length']}] [{shown}{more}]")


def describe(model, with_tensors=False, with_metadata=False):
    """The inspect document for `model` (a moetools.gguf.Model): plain data, bytes as ints."""
    from moetools.gguf import validate

    summary = validate.check_metadata(model)  # the metadata every command checks (issue 32)
    types = {}
    for tensor in model.tensors:
        entry = types.setdefault(tensor.type_name, {"type": tensor.type_name, "count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += tensor.n_bytes
    doc = {
        "path": model.path,
        "architecture": summary.architecture,
        "name": summary.name,
        "shards": list(model.shards),
        "file_bytes": sum(header.file_size for header in model.headers),
        "tensor_count": len(model.tensors),
        "block_count": summary.block_count,
        "context_length": summary.context_length,
        "embedding_length": summary.embedding_length,
        "vocab_size": summary.vocab_size,
        "expert_count": summary.expert_count,
        "expert_used_count": summary.expert_used_count,
        "expert_shared_count": summary.expert_shared_count,
        "leading_dense_block_count": summary.leading_dense_block_count,
        "moe_layer_count": len(summary.moe_layers),
        "experts_per_token": summary.expert_used_count * len(summary.moe_layers),
        "head_count": _compact(summary.head_count),
        "head_count_kv": _compact(summary.head_count_kv),
        "key_length": summary.key_length,
        "value_length": summary.value_length,
        "kv_lora_rank": summary.kv_lora_rank,
        "q_lora_rank": summary.q_lora_rank,
        "rope_dimension_count": summary.rope_dimension_count,
        "sliding_window": summary.sliding_window,
        "sliding_window_pattern": summary.sliding_window_pattern,
        "expert_feed_forward_length": summary.expert_feed_forward_length,
        "expert_latent_length": summary.expert_latent_length,
        "alignment": model.headers[0].alignment,
        "resident_bytes": model.resident_bytes,
        "expert_bytes": model.expert_bytes,
        "total_bytes": model.total_bytes,
        "resident_tensor_count": len(model.resident_tensors),
        "expert_tensor_count": len(model.expert_tensors),
        "expert_bytes_per_layer": [{"layer": layer, "bytes": value} for layer, value in model.expert_bytes_by_layer.items()],
        "types": sorted(types.values(), key=lambda entry: -entry["bytes"]),
        "resident_tier": tier_identity(model.metadata),
        "warnings": list(model.warnings),
        # what llama.cpp's load_tensors will refuse (a missing block tensor, a wrong shape): the file is
        # still described; `--strict` exits 2 on it
        "llama_refuses": [{"tensor": name, "reason": reason} for name, reason in validate.load_refusals(model)],
    }
    total_params, active_params = parameter_counts(model)
    doc.update(
        file_type=file_type_name(summary.file_type),
        file_type_id=summary.file_type,
        parameters=total_params,
        active_parameters=active_params,
        bits_per_weight=round(8 * model.total_bytes / total_params, 4) if total_params else 0.0,
    )
    if model.fetch_stats is not None:
        doc.update(model.fetch_stats)
    if with_metadata:
        doc["metadata"] = metadata_entries(model)
    if with_tensors:
        doc["tensors"] = [
            {
                "name": tensor.name,
                "type": tensor.type_name,
                "shape": list(tensor.shape),
                "bytes": tensor.n_bytes,
                "class": "expert" if model.is_expert(tensor) else "resident",
                "shard": tensor.shard,
                "offset": tensor.offset,
            }
            for tensor in model.tensors
        ]
    return doc


def _experts_cell(doc):
    tier = doc.get("resident_tier")
    if tier:
        return (f"none here: resident-only tier {tier['tier']} of {tier['source_model']} (moetools quantize); "
                f"its {doc['expert_count']} routed experts per layer stay in the source model")
    if not doc["expert_count"]:
        return "dense (no routed experts)"
    return f"{doc['expert_count']} routed, top-{doc['expert_used_count']}, {doc['expert_shared_count']} shared"


def _sliding_window_cell(doc):
    if not doc["sliding_window"]:
        return "-"
    pattern = doc["sliding_window_pattern"]
    if pattern is None:
        return f"{doc['sliding_window']} on every layer"
    return f"{doc['sliding_window']} (pattern {describe_per_layer(pattern) if isinstance(pattern, list) else pattern})"


def tables(doc):
    """The terminal view of an inspect document."""
    overview = Table("Model", ["field", "value"], [
        ["architecture", bounded_cell(doc["architecture"]) if isinstance(doc["architecture"], str) else doc["architecture"]],
        ["name", bounded_cell(doc["name"]) if doc["name"] else "-"],
        ["blocks", doc["block_count"]],
        ["experts", _experts_cell(doc)],
        ["MoE layers", f"{doc['moe_layer_count']} ({doc['leading_dense_block_count']} leading dense); "
         f"{doc['experts_per_token']} experts per token"],
        ["heads", describe_per_layer(doc["head_count"])],
        ["KV heads", describe_per_layer(doc["head_count_kv"])],
        ["K / V width", f"{doc['key_length']} / {doc['value_length']}"
         + (f"  (MLA kv_lora_rank {doc['kv_lora_rank']}, rope {doc['rope_dimension_count']})" if doc["kv_lora_rank"] else "")],
        ["sliding window", _sliding_window_cell(doc)],
        ["training context", doc["context_length"]],
        ["vocabulary", doc["vocab_size"]],
        ["tensors", doc["tensor_count"]],
        ["file type", doc["file_type"] or "-"],
        ["parameters", f"{_count(doc['parameters'])} total, {_count(doc['active_parameters'])} active per token"],
        ["bits per weight", f"{doc['bits_per_weight']:.2f}"],
    ])
    if doc.get("llama_refuses"):
        first = doc["llama_refuses"][0]["tensor"]
        overview.rows.append(["llama.cpp loads it", f"no: {len(doc['llama_refuses'])} tensor problem(s), first {first}"])
    if "requests" in doc:
        overview.caption = (f"header read remotely: {format_size(doc['fetched_bytes'])} in {doc['requests']} requests"
                            f" ({doc['cached_shards']} of {len(doc['shards'])} shards from the header cache)")
    classes = Table("Bytes by class", ["class", "tensors", "bytes"], [
        ["resident", doc["resident_tensor_count"], format_size(doc["resident_bytes"])],
        ["expert", doc["expert_tensor_count"], format_size(doc["expert_bytes"])],
        ["total", doc["tensor_count"], format_size(doc["total_bytes"])],
    ], right_align=(1, 2))
    result = [overview, classes]
    per_layer = {entry["layer"]: entry["bytes"] for entry in doc["expert_bytes_per_layer"]}
    if per_layer:
        rows = [[f"{first}" if first == last else f"{first}-{last}", last - first + 1, format_size(value), value]
                for first, last, value in layer_runs(per_layer)]
        result.append(Table("Bytes of one expert, per layer", ["layers", "count", "per expert", "bytes"], rows, right_align=(1, 2, 3)))
    result.append(Table("Tensor types", ["type", "tensors", "bytes"],
                        [[entry["type"], entry["count"], format_size(entry["bytes"])] for entry in doc["types"]], right_align=(1, 2)))
    result.append(Table("Shards", ["#", "file"], [[index + 1, _base(path)] for index, path in enumerate(doc["shards"])]))
    if "metadata" in doc:
        result.append(Table("Metadata (first shard)", ["key", "type", "value"],
                            [[entry["key"], entry["type"], _metadata_cell(entry)] for entry in doc["metadata"]]))
    if "tensors" in doc:
        result.append(Table("Tensors", ["name", "type", "shape", "bytes", "class", "shard", "offset"], [
            [bounded_cell(t["name"]), t["type"], "x".join(str(d) for d in t["shape"]), t["bytes"], t["class"], t["shard"] + 1, t["offset"]]
            for t in doc["tensors"]
        ], right_align=(3, 5, 6)))
    return result


def _count(value):
    """`1026408232448` -> `1.03T`: a parameter count the way model cards write it."""
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return str(value)


def _base(path):
    """The file name of a local path, URL or hf:// name."""
    return path.rstrip("/").rsplit("/", 1)[-1] if "://" in path else os.path.basename(path)


def describe_repo(text, listing, sets, headers, stats):
    """The inspect document of a whole repo: one entry per GGUF set (sizes from the Hub listing,
    file type from the set's first header)."""
    return {
        "repo": text,
        "repo_id": listing.repo_id,
        "revision": listing.revision,
        "commit": listing.commit,
        "sets": [
            {
                "name": gguf_set.name,
                "shards": len(gguf_set.paths),
                "files": list(gguf_set.paths),
                "bytes": gguf_set.total_bytes,
                "file_type": file_type_name(header.get("general.file_type")),
                "architecture": header.get("general.architecture"),
            }
            for gguf_set, header in zip(sets, headers)
        ],
        **stats,
    }


def repo_tables(doc):
    table = Table(f"GGUF sets in {doc['repo']} (commit {doc['commit'][:12]})", ["set", "shards", "size", "file type", "architecture"],
                  [[entry["name"], entry["shards"], format_size(entry["bytes"]), entry["file_type"] or "-", entry["architecture"] or "-"]
                   for entry in doc["sets"]], right_align=(1, 2))
    table.caption = f"headers read: {format_size(doc['fetched_bytes'])} in {doc['requests']} requests"
    return [table]


def _inspect_repo(text, fetch, json_flag):
    from moetools.gguf import hub

    listing, sets = hub.repo_sets(text, fetch)
    headers, client = hub.first_headers(listing, sets, fetch)
    doc = describe_repo(text, listing, sets, headers, {"fetched_bytes": client.fetched_bytes, "requests": client.requests})
    render(doc, lambda: repo_tables(doc), json_flag)


@click.command("inspect", epilog=helptext.INSPECT)
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--json", "json_flag", is_flag=True, help="Print JSON (the default when stdout is not a terminal).")
@click.option("--tensors", is_flag=True, help="Also list every tensor (name, type, ggml shape, bytes, shard, offset).")
@click.option("--metadata", is_flag=True, help="Also list the raw metadata key/value pairs (arrays: type, length, first items).")
@click.option("--include", metavar="GLOB", help="With hf://ORG/REPO: only the files whose repo path matches GLOB.")
@click.option("--strict", is_flag=True,
              help="Exit 2 (one line) when llama.cpp would refuse to load the model (a missing or misshapen tensor), "
                   "after describing it: for CI pipelines.")
@source_options
def inspect_command(model_path, json_flag, tensors, metadata, strict, fetch):
    """Summarise a GGUF model: shape, experts, parameters, bits per weight, file type, bytes by class,
    per-layer expert bytes, types, shards.

    MODEL is a .gguf file or any shard of a split model (NAME-0000k-of-0000N.gguf), an http(s) URL of
    one (its siblings are found from the name; only the headers are read, with range requests), or
    hf://ORG/REPO[@REVISION]/PATH.gguf. hf://ORG/REPO[@REVISION] alone lists the repo's GGUF sets.
    """
    if is_repo(model_path):
        return _inspect_repo(model_path, fetch, json_flag)
    with open_model(model_path, fetch) as model:
        doc = describe(model, with_tensors=tensors, with_metadata=metadata)
    for message in doc["warnings"]:
        warn(message)
    refusals = doc["llama_refuses"]
    for entry in [] if strict else refusals[:5]:  # with --strict the error line says it
        warn(f"llama.cpp will refuse this model: {entry['reason']}")
    if len(refusals) > 5 and not strict:
        warn(f"llama.cpp will refuse this model: and {len(refusals) - 5} more tensors (see llama_refuses in --json)")
    render(doc, lambda: tables(doc), json_flag)
    if strict and refusals:
        from moetools.errors import GGUFError

        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        raise GGUFError(doc["path"], f"--strict: {refusals[0]['reason']}{more}")
