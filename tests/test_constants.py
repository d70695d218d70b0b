"""The header path's mirror tables must equal gguf's own constants."""

import gguf

from moetools.gguf import constants


def test_ggml_type_table_equals_gguf():
    ours = {type_id: (name.upper(), block, size) for type_id, (name, block, size) in constants.GGML_TYPES.items()}
    theirs = {int(t): (t.name, *gguf.GGML_QUANT_SIZES[t]) for t in gguf.GGMLQuantizationType}
    assert ours == theirs


def test_value_type_table_equals_gguf():
    ours = {type_id: name for type_id, (name, _) in constants.GGUF_VALUE_TYPES.items()}
    assert ours == {int(t): t.name for t in gguf.GGUFValueType}


def test_key_names_equal_gguf():
    for ours, path in constants.GGUF_KEY_MIRROR.items():
        value = gguf.Keys
        for part in path.split("."):
            value = getattr(value, part)
        assert getattr(constants.Keys, ours) == value, ours


def test_every_mirrored_key_is_checked():
    declared = {name for name in vars(constants.Keys) if name.isupper()}
    unchecked = declared - set(constants.GGUF_KEY_MIRROR)
    # keys newer than gguf 0.19.0 on PyPI (written by llama.cpp's own converter)
    assert unchecked == {"EXPERT_LATENT_LENGTH"}


def test_magic_and_alignment_equal_gguf():
    assert int.from_bytes(constants.GGUF_MAGIC, "little") == gguf.GGUF_MAGIC
    assert constants.GGUF_DEFAULT_ALIGNMENT == gguf.GGUF_DEFAULT_ALIGNMENT
