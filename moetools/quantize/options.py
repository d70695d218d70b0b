"""quantize's options in groups: each decorator adds a run of options (in --help's order) and hands the
command one record of them (a namedtuple), so the command takes a few records, not 20 parameters."""

import functools
from collections import namedtuple

import click

from moetools.quantize.rules import MIXES, MIX_ALIASES, TARGETS

MixOptions = namedtuple('MixOptions', ['types', 'pure', 'imatrix_path', 'output_tensor_type', 'token_embedding_type', 'tensor_types',
                                       'tensor_type_files', 'files_first'])
MixOptions.__doc__ = 'What each tensor becomes: the types or mixes, the importance matrix, per-tensor overrides.'

OutputOptions = namedtuple('OutputOptions', ['resident_only', 'output_dir', 'install', 'storage_root', 'model_id', 'keep_split', 'force', 'dry_run'])
OutputOptions.__doc__ = 'What is written, and where.'

RunOptions = namedtuple('RunOptions', ['threads', 'worst', 'json_flag', 'wait', 'no_error'])
RunOptions.__doc__ = 'How the run goes and what it reports.'


_FILES_FIRST = "moetools.quantize.tensor_type_files_first"


def _files_first(ctx, param, value):
    """llama-quantize appends --tensor-type and --tensor-type-file overrides in command-line order (first
    match wins). click hands each option its values separately, processing given options in the order
    each first appears: --tensor-type not yet processed here means the files came first."""
    if value:
        ctx.meta[_FILES_FIRST] = "tensor_types" not in ctx.params
    return value


def mix_options(command):
    """What each tensor becomes: the types or mixes, the importance matrix, per-tensor overrides: the command receives them as `mix`, a MixOptions."""

    @click.option("-t", "--type", "types", required=True, metavar="TYPES",
                  help=f"Comma-separated llama-quantize types, one tier each, meaning llama-quantize's per-tensor mix: "
                       f"{', '.join(MIXES)} (aliases {', '.join(f'{a}={b}' for a, b in MIX_ALIASES.items())}). With --pure: "
                       f"ggml types given to every tensor: {', '.join(TARGETS)}.")
    @click.option("--pure", is_flag=True,
                  help="Quantize every quantizable tensor to the one type (llama-quantize --pure) instead of the mix.")
    @click.option("--imatrix", "imatrix_path", metavar="FILE", type=click.Path(dir_okay=False),
                  help="Importance matrix from llama-imatrix (GGUF or legacy .dat), used as llama-quantize uses it.")
    @click.option("--output-tensor-type", metavar="TYPE", help="ggml type for output.weight (llama-quantize's option).")
    @click.option("--token-embedding-type", metavar="TYPE", help="ggml type for token_embd.weight (llama-quantize's option).")
    @click.option("--tensor-type", "tensor_types", metavar="NAME=TYPE", multiple=True,
                  help="ggml type for tensors whose name matches the regular expression NAME (repeatable; first match wins), "
                       "as llama-quantize's --tensor-type.")
    @click.option("--tensor-type-file", "tensor_type_files", metavar="FILE", multiple=True, callback=_files_first,
                  help="NAME=TYPE overrides read from FILE as llama-quantize's --tensor-type-file reads it: whitespace-separated "
                       "words, one or more a line, no comments (repeatable; - for stdin).")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        kwargs["files_first"] = click.get_current_context().meta.get(_FILES_FIRST, False)
        return command(*args, mix=MixOptions(*(kwargs.pop(name) for name in MixOptions._fields)), **kwargs)

    return wrapper


def outputs_options(command):
    """What is written, and where: the command receives them as `outputs`, a OutputOptions."""

    @click.option("--resident-only/--full", default=True, show_default=True,
                  help="Write only the resident tensors (a tier for LLAMA_RESIDENT_OVERRIDE, with its manifest), or a complete "
                       "model: every tensor, the routed experts included, quantized by the mix as llama-quantize does.")
    @click.option("-o", "--output-dir", "output_dir", type=click.Path(file_okay=False), metavar="DIR",
                  help="Folder for the outputs. Default: device-fit/<stem>/ beside MODEL (the tier catalog device-fit reads); "
                       "with --full, MODEL's folder.")
    @click.option("--install", is_flag=True,
                  help="Write the tiers where the serving daemon finds them: <storage root>/device-fit/<slug of the model id>/, "
                       "with a resident-bytes file for the override it loads (the smallest tier written).")
    @click.option("--storage-root", metavar="DIR", type=click.Path(file_okay=False),
                  help="--install: the daemon's storage root (default: $CONTINUUM_STORAGE_PATH, else ~/.continuum).")
    @click.option("--model-id", metavar="ID",
                  help="--install: the model id the daemon serves this model as (default: MODEL's name without .gguf or split suffix).")
    @click.option("--keep-split", is_flag=True,
                  help="With --full and a split MODEL: write as many files as MODEL has, each with its shard's tensors.")
    @click.option("--force", is_flag=True, help="Replace outputs that already exist (without it, a tier this same command already wrote and that verifies is kept).")
    @click.option("--dry-run", is_flag=True,
                  help="Plan only: report each tier's bytes, bits per weight and fallbacks from the headers, write nothing.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, outputs=OutputOptions(*(kwargs.pop(name) for name in OutputOptions._fields)), **kwargs)

    return wrapper


def running_options(command):
    """How the run goes and what it reports: the command receives them as `running`, a RunOptions."""

    @click.option("--threads", type=click.IntRange(min=1), help="Worker threads (default: every core).")
    @click.option("--worst", type=click.IntRange(min=0), default=5, show_default=True, help="Worst tensors listed per tier.")
    @click.option("--json", "json_flag", is_flag=True, help="Print JSON (the default when stdout is not a terminal).")
    @click.option("--wait", is_flag=True, help="If another run is writing into the output folder, wait for it instead of stopping.")
    @click.option("--no-error", "no_error", is_flag=True,
                  help="With --full: do not measure each tier's error against the source (a dequantize pass per tensor "
                       "llama-quantize does not do); the error figures are then null.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, running=RunOptions(*(kwargs.pop(name) for name in RunOptions._fields)), **kwargs)

    return wrapper
