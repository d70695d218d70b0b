"""`device-fit --check -- llama-server -m MODEL ARGS...`: read a llama-server / llama-cli command line as
its user runs it and turn it into device-fit's option records, so --runtime llama evaluates it.

The flags are read as common/arg.cpp's common_params_parse_ex reads them (commit 0c1e57098): each
flag takes the number of values its handler does (devicefit/llama_args.py), the next arguments, never
`--flag=value`; `_` in a `--` flag is `-`; a repeated flag's handler runs again (-ot appends each
time, the others keep the last value). Defaults are llama.cpp's where they differ from device-fit's:
llama-server's `-np` is auto (4 sequences and a unified KV cache: tools/server/server.cpp main), `-c`
0 is the training context (common.h n_ctx), `-fa` auto, `--fit` on (common.h fit_params: it adjusts
the placement only when -ngl, -ts and every override are unset: common/fit.cpp).

Three kinds of flags besides the ones modelled (MODELLED): those that change memory or speed but are
not modelled (NOT_MODELLED: a warning), those that change neither (every other flag arg.cpp declares:
listed in the answer, no warning), and flags llama.cpp does not declare (a warning, as llama.cpp
itself would refuse them: "invalid argument").
"""

import os
import shlex

from moetools.devicefit import llama_args
from moetools.errors import UsageError

# device-fit's name for each spelling of a flag it models (common/arg.cpp's spellings)
MODELLED = {}
for _key, _spellings in {
    "model": "-m --model", "hf_repo": "-hf -hfr --hf-repo", "hf_file": "-hff --hf-file", "model_url": "-mu --model-url",
    "ctx": "-c --ctx-size", "ngl": "-ngl --gpu-layers --n-gpu-layers", "ts": "-ts --tensor-split",
    "split_mode": "-sm --split-mode", "main_gpu": "-mg --main-gpu", "ot": "-ot --override-tensor",
    "n_cpu_moe": "-ncmoe --n-cpu-moe", "cpu_moe": "-cmoe --cpu-moe", "ubatch": "-ub --ubatch-size",
    "batch": "-b --batch-size", "parallel": "-np --parallel", "kvu": "-kvu --kv-unified",
    "no_kvu": "-no-kvu --no-kv-unified", "fa": "-fa --flash-attn", "ctk": "-ctk --cache-type-k",
    "ctv": "-ctv --cache-type-v", "threads": "-t --threads", "swa_full": "--swa-full",
    "draft": "-md --model-draft --spec-draft-model", "ngld": "-ngld --gpu-layers-draft --n-gpu-layers-draft --spec-draft-ngl",
    "ctkd": "-ctkd --cache-type-k-draft --spec-draft-type-k", "ctvd": "-ctvd --cache-type-v-draft --spec-draft-type-v",
    "devd": "-devd --device-draft --spec-draft-device", "spec_type": "--spec-type", "n_max": "--spec-draft-n-max",
    "rpc": "--rpc", "fit": "-fit --fit", "load_mode": "-lm --load-mode", "no_mmap": "--no-mmap", "mmap": "--mmap",
    "mlock": "--mlock", "per_slot": "--kv-unified-per-slot", "fit_ctx": "-fitc --fit-ctx",
}.items():
    for _flag in _spellings.split():
        MODELLED[_flag] = _key

# flags that change memory or speed which device-fit does not model (a warning names them)
NOT_MODELLED = set("""
-dev --device -nkvo --no-kv-offload -kvo --kv-offload --no-op-offload --op-offload --no-host -nr --no-repack --repack
-tb --threads-batch --numa --prio --prio-batch --poll --poll-batch -C --cpu-mask -Cr --cpu-range --cpu-strict
-Cb --cpu-mask-batch -Crb --cpu-range-batch --cpu-strict-batch -lzm --lazy-mode -ctxcp --ctx-checkpoints
--swa-checkpoints -cram --cache-ram --lora --lora-scaled --control-vector --control-vector-scaled
--control-vector-layer-range -mm --mmproj -mmu --mmproj-url --mmproj-auto --no-mmproj --no-mmproj-auto
--mmproj-offload --no-mmproj-offload -mmdev --mmproj-device -ncffn --n-cpu-ffn -otd --override-tensor-draft
--spec-draft-override-tensor -cmoed --cpu-moe-draft --spec-draft-cpu-moe -ncmoed --n-cpu-moe-draft
--spec-draft-n-cpu-moe --spec-draft-ncmoe -hfd -hfrd --hf-repo-draft --spec-draft-hf -td --threads-draft
--spec-draft-threads -tbd --threads-batch-draft --spec-draft-threads-batch -fitt --fit-target
--embedding --embeddings --pooling --rerank --reranking --gpt-oss-120b-default --gpt-oss-20b-default
--fim-qwen-1.5b-default --fim-qwen-3b-default --fim-qwen-7b-default --fim-qwen-7b-spec --fim-qwen-14b-spec
--fim-qwen-30b-default --embd-gemma-default --vision-gemma-4b-default --vision-gemma-12b-default --spec-default
--mtp --dflash --eagle3 --cache-reuse --check-tensors -kvo --override-kv --rope-scaling --rope-scale
--rope-freq-base --rope-freq-scale --yarn-orig-ctx --grp-attn-n -gan --grp-attn-w -gaw --mtmd-batch-max-tokens
--image-max-tokens --image-min-tokens --models-max --models-preset --models-dir --sleep-idle-seconds
""".split())

PROGRAMS = ("llama-server", "llama-cli", "llama-completion", "llama-mtmd-cli", "llama-run")


class Line:
    """A parsed command line: `values` {device-fit key: value} of the modelled flags (a repeated -ot
    keeps every value, in order, in `overrides`), the flags in each other kind, notes and warnings."""

    def __init__(self, program, argv):
        self.program = program
        self.argv = argv
        self.values = {}
        self.overrides = []  # [("-ot", TEXT) | ("--cpu-moe", None) | ("--n-cpu-moe", N)] in order
        self.placement_given = []  # spellings of -ngl/-ts/-ot/... as given (what --fit leaves alone)
        self.ignored = []
        self.not_modelled = []
        self.unknown = []
        self.notes = []
        self.warnings = []


def command_tokens(words, read_text):
    """The argv of the checked command: `words` given after --check (the command itself, or one FILE
    or `-` holding it; read_text(path) reads one). A file holds a shell line — continued over lines
    with `\\`, with comments (#) and VAR=value assignments before the program; its first command is
    checked — or `--emit llama --json`'s document ({"command": [...]})."""
    words = list(words)
    if words and words[0].lower().endswith(".gguf"):
        raise UsageError(f"--check reads the model from the command line's -m: give the line after -- "
                         f"(device-fit --vram ... --check -- llama-server -m {words[0]} ...), not MODEL")
    if len(words) == 1 and (words[0] == "-" or (os.path.isfile(words[0]) and not words[0].endswith(".gguf")
                                                 and not os.access(words[0], os.X_OK))):
        words = _file_command(words[0], read_text(words[0]))
    while words and "=" in words[0] and not words[0].startswith("-") and words[0].split("=", 1)[0].isidentifier():
        words.pop(0)  # an environment assignment before the program
    if words and words[0] in ("env", "exec", "nohup"):
        words.pop(0)
    if not words:
        raise UsageError("--check: no command line (give it after --, or a FILE or - holding it)")
    return words


def _file_command(name, text):
    if text.lstrip().startswith("{"):
        import json

        try:
            command = json.loads(text).get("command")
        except (ValueError, AttributeError):
            command = None
        if not isinstance(command, list) or not all(isinstance(word, str) for word in command):
            raise UsageError(f"--check {name}: a JSON document without a \"command\" list of strings")
        return list(command)
    for line in text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError as err:
            raise UsageError(f"--check {name}: cannot split the command line ({err})") from None
        if words:
            return words
    return []


def parse(words):
    """A Line of a llama.cpp command line (the program first, or flags alone). UsageError for a
    flag's missing value."""
    program = ""
    if words and not words[0].startswith("-"):
        program = os.path.basename(words[0])
        words = words[1:]
    line = Line(program or "llama-server", list(words))
    if program and program not in PROGRAMS:
        line.warnings.append(f"--check: {program} is not {', '.join(PROGRAMS[:2])}: its flags are read as theirs")
    index = 0
    while index < len(words):
        word = words[index]
        flag = word.replace("_", "-") if word.startswith("--") else word
        if not flag.startswith("-") or flag == "-":
            line.unknown.append(word)
            index += 1
            continue
        count = llama_args.arity(flag)
        if count is None:
            # llama.cpp would stop here ("invalid argument"); take a following non-flag word as its value
            value_follows = index + 1 < len(words) and not words[index + 1].startswith("-")
            line.unknown.append(word + (" " + words[index + 1] if value_follows else ""))
            index += 2 if value_follows else 1
            continue
        if count and index + count >= len(words):
            raise UsageError(f"--check: {word} needs {count} value(s) (llama.cpp: expected value for argument)")
        values = words[index + 1:index + 1 + count]
        index += 1 + count
        key = MODELLED.get(flag)
        shown = " ".join([word, *values])
        if key is None:
            (line.not_modelled if flag in NOT_MODELLED else line.ignored).append(shown)
            continue
        _take(line, key, flag, values)
    return line


def _take(line, key, flag, values):
    value = values[0] if values else None
    if key == "ot":
        line.overrides.append(("-ot", value))
        line.placement_given.append(flag)
    elif key == "cpu_moe":
        if ("--cpu-moe", None) not in line.overrides:
            line.overrides.append(("--cpu-moe", None))
        line.placement_given.append(flag)
    elif key == "n_cpu_moe":
        line.overrides.append(("--n-cpu-moe", _int(flag, value, minimum=0)))
        line.placement_given.append(flag)
    elif key in ("ngl", "ts"):
        line.values[key] = value
        if not (key == "ngl" and value == "auto"):
            line.placement_given.append(flag)
    elif key in ("ctx", "ubatch", "batch", "parallel", "main_gpu", "threads", "n_max", "per_slot", "fit_ctx"):
        line.values[key] = _int(flag, value)
    elif key in ("kvu", "no_kvu"):
        line.values["kv_unified"] = key == "kvu"
    elif key in ("swa_full", "no_mmap", "mmap", "mlock"):
        line.values[key] = True
    else:
        line.values[key] = value


def _int(flag, value, minimum=None):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"--check: {flag} {value!r}: expected a whole number") from None
    if minimum is not None and number < minimum:
        raise UsageError(f"--check: {flag} {value}: must be {minimum} or more")
    return number


def model_path(line):
    """MODEL as device-fit reads it: -m PATH, -mu URL, or -hf ORG/REPO with -hff FILE (hf://)."""
    values = line.values
    if values.get("model"):
        return values["model"]
    if values.get("model_url"):
        return values["model_url"]
    repo = values.get("hf_repo")
    if repo:
        if values.get("hf_file"):
            return f"hf://{repo.split(':')[0]}/{values['hf_file']}"
        raise UsageError(f"--check: -hf {repo} names no file: device-fit reads one GGUF's header; add -hff FILE "
                         "(the file in the repo) or give -m PATH")
    raise UsageError("--check: the command line loads no model (-m PATH, -mu URL or -hf ORG/REPO -hff FILE)")


def parallel(line):
    """(sequences, unified KV) as the program sets them: llama-server's -np defaults to auto, which is
    4 sequences sharing one unified cache (tools/server/server.cpp); llama-cli's to 1."""
    values = line.values
    if "parallel" in values and values["parallel"] >= 0:
        return values["parallel"], values.get("kv_unified", False)
    if line.program == "llama-server":
        return 4, True
    return 1, values.get("kv_unified", False)


TRUTHY = ("on", "enabled", "true", "1")  # common/arg.cpp common_arg_utils::is_truthy
FALSEY = ("off", "disabled", "false", "0")  # is_falsey; is_autoy: auto, -1


def switch(flag, value):
    """on / off / auto of a llama.cpp [on|off|auto] value."""
    if value in TRUTHY:
        return "on"
    if value in FALSEY:
        return "off"
    if value in ("auto", "-1"):
        return "auto"
    raise UsageError(f"--check: {flag} {value!r}: expected on, off or auto")


def layers_value(flag, value):
    """-ngl / -ngld: None for all layers (all, auto, -1 and below, llama.cpp's defaults when --fit
    leaves it), else the number."""
    if value is None or value in ("all", "auto"):
        return None
    number = _int(flag, value)
    return None if number < 0 else number
