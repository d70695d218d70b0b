"""write_model: a ModelSpec to GGUF files with gguf.GGUFWriter (tiny with random data, or header-only sparse)."""

import os

from moetools.synth.spec import F16, F32


def _vocab_arrays(n_tokens, n_merges):
    """Token strings, token types and merges shaped like a BPE vocabulary of that size."""
    tokens = [f"tok{index}" for index in range(n_tokens)]
    merges = [f"t{index % 97} k{index}" for index in range(n_merges)]
    return tokens, [1] * n_tokens, merges


def _random_tensor(rng, spec_tensor):
    """Real data for one tensor: normal floats quantized by gguf, or raw bytes for types gguf cannot make."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

    qtype = GGMLQuantizationType(spec_tensor.type_id)
    numpy_shape = tuple(reversed(spec_tensor.shape))
    values = (rng.standard_normal(numpy_shape, dtype=np.float32) * 0.02).astype(np.float32)
    if qtype == GGMLQuantizationType.F32:
        return values
    if qtype == GGMLQuantizationType.F16:
        return values.astype(np.float16)
    try:
        return quants.quantize(values, qtype)
    except NotImplementedError:
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        byte_shape = (*numpy_shape[:-1], numpy_shape[-1] // block * block_bytes)
        return rng.integers(0, 256, size=byte_shape, dtype=np.uint8)


def write_model(spec, path, *, sparse=False, shards=1, seed=0, alignment=None):
    """Write `spec` to `path` (split into `shards` files when > 1) and return the file paths.

    sparse=True writes the header only and extends each file to its full size as a hole. The files
    are written in a temporary folder beside `path` and moved into place when complete, the first
    shard last, so an interrupted run never leaves a model that looks whole.
    """
    import shutil
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    scratch = tempfile.mkdtemp(prefix=".synth-", dir=folder)
    try:
        written = _write_model(spec, os.path.join(scratch, os.path.basename(path)), sparse, shards, seed, alignment)
        final = [os.path.join(folder, os.path.basename(item)) for item in written]
        for source, target in reversed(list(zip(written, final))):
            os.replace(source, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def _write_model(spec, path, sparse, shards, seed, alignment):
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

    from moetools.gguf.constants import tensor_nbytes

    kinds = {"u32": GGUFValueType.UINT32, "u64": GGUFValueType.UINT64, "i32": GGUFValueType.INT32, "f32": GGUFValueType.FLOAT32,
             "bool": GGUFValueType.BOOL, "str": GGUFValueType.STRING}
    sizes = [tensor_nbytes(tensor.type_id, tensor.shape) for tensor in spec.tensors]
    split_max_tensors = 0
    if shards > 1:
        split_max_tensors = -(-len(spec.tensors) // shards)
    writer = GGUFWriter(os.fspath(path), spec.architecture, split_max_tensors=split_max_tensors)
    if alignment:
        writer.add_custom_alignment(alignment)
    for key, value, kind in spec.metadata:
        if kind == "u64[]":  # (add_array would infer i32)
            writer.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT64)
        elif kind.endswith("[]"):
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kinds[kind])
    if spec.vocab_size:
        tokens, token_types, merges = _vocab_arrays(spec.vocab_size, spec.merges)
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_types(token_types)
        if merges:
            writer.add_token_merges(merges)
    rng = np.random.default_rng(seed)
    for tensor, n_bytes in zip(spec.tensors, sizes):
        if sparse:
            writer.add_tensor_info(tensor.name, tuple(reversed(tensor.shape)), np.dtype(np.float32), n_bytes,
                                   raw_dtype=GGMLQuantizationType(tensor.type_id))
        else:
            data = _random_tensor(rng, tensor)
            raw_dtype = None if tensor.type_id in (F32, F16) else GGMLQuantizationType(tensor.type_id)
            writer.add_tensor(tensor.name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file(path=None)
    writer.write_kv_data_to_file()
    if sparse:
        writer.write_ti_data_to_file()
        align = writer.data_alignment
        for handle, shard_tensors in zip(writer.fout, writer.tensors):
            data_start = -(-handle.tell() // align) * align
            data_bytes = sum(-(-info.nbytes // align) * align for info in shard_tensors.values())
            handle.truncate(data_start + data_bytes)
    else:
        writer.write_tensors_to_file()
    paths = [os.fspath(handle.name) for handle in writer.fout]
    writer.close()
    return paths
