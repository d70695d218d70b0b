"""Every family's BUILDERS and PRESETS merged, `tiny(arch)`, `preset(name)` and `python -m moetools.synth`."""

import os

from moetools.synth.spec import Types
from moetools.synth.writer import write_model
from moetools.synth.families import llama as _llama
from moetools.synth.families import qwen as _qwen
from moetools.synth.families import deepseek as _deepseek
from moetools.synth.families import kimi as _kimi
from moetools.synth.families import glm as _glm
from moetools.synth.families import minimax as _minimax
from moetools.synth.families import gemma as _gemma
from moetools.synth.families import ssm as _ssm
from moetools.synth.families import rwkv as _rwkv
from moetools.synth.families import other as _other


# every family's tiny builders, by architecture name (and the tests' aliases: mixtral, dense, lfm2-swa),
# and its full-size presets (header-only, sparse), by preset name
BUILDERS, PRESETS = {}, {}
for _family in (_llama, _qwen, _deepseek, _kimi, _glm, _minimax, _gemma, _ssm, _rwkv, _other):
    BUILDERS.update(_family.BUILDERS)
    PRESETS.update(_family.PRESETS)


def preset(name):
    """The full-size spec of a preset (`kimi-k3`, `kimi-k2`, `qwen3-235b`, ...)."""
    return PRESETS[name]()


def tiny(name, types=Types(), **params):
    """A tiny spec of an architecture (a key of BUILDERS: `mixtral`, `qwen3moe`, `deepseek2`, ...)."""
    return BUILDERS[name](types, **params)


def main(argv=None):
    """`python -m moetools.synth PRESET OUT.gguf [--shards N]`: write a header-only sparse model."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m moetools.synth", description=main.__doc__)
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("output", help="output path (NAME.gguf; shards become NAME-0000k-of-0000N.gguf)")
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(folder, exist_ok=True)
    for path in write_model(preset(args.preset), args.output, sparse=True, shards=args.shards):
        print(path)
