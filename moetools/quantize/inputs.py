"""What a user names, turned into what a plan reads: llama-quantize's --type mixes, ggml type names for
--output-tensor-type/--token-embedding-type/--tensor-type, the output folder and file names of a tier,
and the model facts that llama-quantize's mix rules read (rules.ModelFacts).

Moved out of core.py unchanged (issue 28); core re-exports these names.
"""

import os
import re

from moetools.errors import UsageError
from moetools.formats import resident_manifest
from moetools.gguf import model_stem, shard_path
from moetools.quantize import rules


def _supported_list():
    return ", ".join(rules.mix_names())


def parse_mixes(text, pure=False, output_type=None, token_embd_type=None, tensor_types=(), has_imatrix=False):
    """`"Q4_K_M,q6_K"` -> [rules.Mix], order kept, duplicate tiers dropped.

    Without `pure` each name is one of llama-quantize's types (any case; Q4_K = Q4_K_M, Q3_K =
    Q3_K_M, Q5_K = Q5_K_M) meaning its per-tensor mix; with `pure` a name is a ggml type (or a mix
    name, meaning its main type) given to every quantizable tensor, as llama-quantize --pure does.
    Raises UsageError naming an unknown type and listing the names."""
    mixes, labels = [], set()
    for part in str(text).split(","):
        if not part.strip():
            continue
        name = rules.canonical_mix(part)
        if pure and name is None and rules.canonical_type(part):
            ggml = rules.canonical_type(part)
            name = next(mix for mix, (ftype, _) in rules.MIXES.items() if ftype == rules.TARGETS[ggml])
        if name is None:
            word = part.strip()
            also = f"; with --pure also the ggml types {', '.join(rules.TARGETS)}" if pure else ""
            if word.upper() in rules.UNSUPPORTED_MIXES:
                raise UsageError(f"unsupported --type {word!r}: llama-quantize's {word.upper()} needs quantizers moetools does "
                                 f"not have; supported: {_supported_list()}{also}")
            raise UsageError(f"unknown --type {word!r}; llama-quantize's names moetools writes: {_supported_list()}{also}")
        mix = rules.Mix(name, pure=pure, output_type=output_type, token_embd_type=token_embd_type,
                        tensor_types=tensor_types, has_imatrix=has_imatrix)
        if mix.label not in labels:
            labels.add(mix.label)
            mixes.append(mix)
    if not mixes:
        raise UsageError(f"--type is empty; llama-quantize's names moetools writes: {_supported_list()}")
    return mixes


def parse_types(text):
    """`"q8_0,q4_K"` -> ["q8_0", "q4_K"]: the --pure tier labels (ggml spelling) of `text`."""
    return [mix.label for mix in parse_mixes(text, pure=True)]


def parse_ggml_type(text, option):
    """A ggml type name for --output-tensor-type/--token-embedding-type/--tensor-type (any case)."""
    name = rules.canonical_type(text)
    if name is None:
        raise UsageError(f"{option}: unsupported type {text.strip()!r}; supported: {', '.join(rules.TARGETS)}")
    return name


def _tensor_type_pair(value):
    """(pattern, ggml type) of one NAME=TYPE, split at the first `=` and the name lower-cased as
    llama-quantize's `parse_tensor_type` (tools/quantize/quantize.cpp) does; ValueError(reason)."""
    import re

    pattern, sep, type_text = value.partition("=")
    if not sep or not pattern:
        raise ValueError("expected NAME=TYPE (e.g. attn_v=q8_0)")
    if not type_text:
        raise ValueError("missing quantization type")
    try:
        re.compile(pattern.lower())
    except re.error as err:
        raise ValueError(f"bad pattern: {err}") from None
    ggml = rules.canonical_type(type_text)
    if ggml is None:
        raise ValueError(f"unsupported type {type_text.strip()!r}; supported: {', '.join(rules.TARGETS)}")
    return pattern.lower(), ggml


def parse_tensor_types(values):
    """--tensor-type NAME=TYPE (repeatable; NAME a regular expression searched in tensor names,
    lower-cased as llama-quantize does) -> ((pattern, ggml type), ...)."""
    pairs = []
    for value in values:
        try:
            pairs.append(_tensor_type_pair(value))
        except ValueError as err:
            option = "--tensor-type" if str(err).startswith("unsupported") else f"--tensor-type {value!r}"
            raise UsageError(f"{option}: {err}") from None
    return tuple(pairs)


# isspace() in the C locale: what `std::ifstream >> std::string` splits words at
_WORD_SPACE = re.compile(rb"[ \t\v\f\r]+")


def read_tensor_type_file(path):
    """--tensor-type-file FILE (`-` for stdin) -> ((pattern, ggml type), ...), read as llama-quantize's
    `parse_tensor_type_file` (tools/quantize/quantize.cpp, the fork's and upstream's alike) reads it:
    `while (file >> arg)`, so every whitespace-separated word -- several on a line, or one a line --
    is one NAME=TYPE, blank lines are whitespace, and there is no comment syntax (a `#` word is a
    malformed NAME=TYPE there too). A word that does not parse is an InputError naming the line."""
    import sys

    from moetools.errors import InputError
    from moetools.formats.jsonio import display_name

    name = display_name(path)
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as handle:
                data = handle.read()
    except OSError as err:
        raise InputError(name, f"cannot read the --tensor-type-file: {err.strerror or err}") from None
    pairs = []
    for number, line in enumerate(data.split(b"\n"), 1):
        for word in _WORD_SPACE.split(line):
            if not word:
                continue
            try:
                text = word.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(name, f"line {number}: not UTF-8 text") from None
            try:
                pairs.append(_tensor_type_pair(text))
            except ValueError as err:
                raise InputError(name, f"line {number}: {text!r}: {err} (llama-quantize reads whitespace-separated "
                                       f"NAME=TYPE words, with no comments)") from None
    return tuple(pairs)


def model_facts(model):
    """What llama-quantize's mix rules read from a model (rules.ModelFacts)."""
    from moetools.gguf.constants import Keys

    heads = model.layer_values(Keys.HEAD_COUNT, 0) or [0]
    kv_heads = model.layer_values(Keys.HEAD_COUNT_KV, None) or [None]
    n_head = heads[0] or 0
    n_head_kv = n_head if kv_heads[0] is None else kv_heads[0]
    return rules.ModelFacts(model.architecture, model.expert_count or 0, model.block_count or 0, n_head, n_head_kv)


def default_output_dir(model_path, full=False):
    """`device-fit/<stem>/` beside the model (the tier catalog device-fit reads); for --full, the
    model's own folder."""
    folder = os.path.dirname(os.path.abspath(model_path))
    return folder if full else os.path.join(folder, "device-fit", model_stem(model_path))


def output_names(model_path, tier, full=False, shards=1):
    """([GGUF file names], manifest file name or None) of one tier; several GGUF names (split as
    NAME-0000k-of-0000N.gguf) only for a --full tier kept split in `shards` files."""
    stem = model_stem(model_path)
    if full:
        if shards > 1:
            return [os.path.basename(shard_path(f"{stem}-{tier}-full", k, shards)) for k in range(1, shards + 1)], None
        return [f"{stem}-{tier}-full.gguf"], None
    # The manifest is named after its GGUF (`X.gguf.resident.json`): the daemon's
    # discover_resident_tiers finds the GGUF by dropping the suffix.
    return [f"{stem}-{tier}.gguf"], resident_manifest.manifest_name(f"{stem}-{tier}.gguf")
