"""`moetools inspect MODEL`: the shared reader's summary of a GGUF model.

    moetools inspect k3-00001-of-00014.gguf
    moetools inspect model.gguf --json --tensors | jq '.tensors[] | select(.type == "q4_K")'
"""

import os

import click

from moetools.gguf import open_model
from moetools.output import Table, render, warn
from moetools.formats.tier_gguf import tier_identity
from moetools.sizes import format_size


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


def describe(model, with_tensors=False):
    """The inspect document for `model` (a moetools.gguf.Model): plain data, bytes as ints."""
    summary = model.summary
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
    }
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
        ["architecture", doc["architecture"]],
        ["name", doc["name"] or "-"],
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
    ])
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
    result.append(Table("Shards", ["#", "file"], [[index + 1, os.path.basename(path)] for index, path in enumerate(doc["shards"])]))
    if "tensors" in doc:
        result.append(Table("Tensors", ["name", "type", "shape", "bytes", "class", "shard", "offset"], [
            [t["name"], t["type"], "x".join(str(d) for d in t["shape"]), t["bytes"], t["class"], t["shard"] + 1, t["offset"]]
            for t in doc["tensors"]
        ], right_align=(3, 5, 6)))
    return result


@click.command("inspect")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--json", "json_flag", is_flag=True, help="Print JSON (the default when stdout is not a terminal).")
@click.option("--tensors", is_flag=True, help="Also list every tensor (name, type, ggml shape, bytes, shard, offset).")
def inspect_command(model_path, json_flag, tensors):
    """Summarise a GGUF model: shape, experts, bytes by class, per-layer expert bytes, types, shards.

    MODEL is a .gguf file or any shard of a split model (NAME-0000k-of-0000N.gguf).
    """
    with open_model(model_path) as model:
        doc = describe(model, with_tensors=tensors)
    for message in doc["warnings"]:
        warn(message)
    render(doc, lambda: tables(doc), json_flag)
