"""llama-bench results (`llama-bench -o json` or `-o jsonl`) as records, and the placement each run used.

llama-bench (tools/llama-bench/llama-bench.cpp, commit 0c1e57098) prints one object per test:
`json_printer` a JSON list, `jsonl_printer` one object per line, both from `test::get_fields` and
`test::get_values`. The fields read here, as that printer types them (`test::get_field_type`):
model_filename, model_type, model_size (bytes), model_n_params, n_batch, n_ubatch, n_threads,
n_gpu_layers, n_cpu_moe, split_mode (none|layer|row|tensor), main_gpu, flash_attn (an int: -1 auto, 0
off, 1 on; older builds printed a bool), type_k, type_v, tensor_split ("%.2f" weights joined by "/",
"0.00" when none was given), tensor_buft_overrides (one -ot group: "PATTERN=BUFT;PATTERN=BUFT", or
"none"), load_mode (this commit's replacement of use_mmap), n_prompt, n_gen, n_depth, avg_ts,
stddev_ts (tokens/s), samples_ts, gpu_info, cpu_info, backends, build_commit.

`read_runs(path)` returns (runs, refusals): every run it can read, and (index, reason) for each object it
refused (a field of the wrong type, a value it cannot interpret). It raises FormatError (exit 2) only
when nothing usable remains: not JSON, not llama-bench's output, no runs, or every run refused.
"""

import json
import math
import os
from dataclasses import dataclass

from moetools.errors import FormatError
from moetools.formats.jsonio import display_name, read_text

SIGNATURE = ("model_filename", "n_prompt", "avg_ts")  # keys every llama-bench run object holds
SPLIT_MODES = ("none", "layer", "row", "tensor")  # llama-bench.cpp split_mode_str
_FLASH_TEXT = {"on": True, "enabled": True, "true": True, "1": True,
               "off": False, "disabled": False, "false": False, "0": False, "auto": None, "-1": None}


@dataclass(frozen=True)
class BenchRun:
    """One llama-bench test. Sizes in bytes, speeds in tokens/s; flash_attn None = auto;
    tensor_split () = none given; tensor_buft_overrides ((pattern, buffer type), ...) in llama-bench's
    order (its --n-cpu-moe patterns are not among them: n_cpu_moe holds that count); use_mmap None =
    llama.cpp's default (load_mode auto or not printed)."""

    index: int
    model_filename: str
    model_type: str
    model_size: int
    n_params: int
    n_prompt: int
    n_gen: int
    n_depth: int
    n_batch: int
    n_ubatch: int
    n_threads: int
    n_gpu_layers: int
    n_cpu_moe: int
    tensor_buft_overrides: tuple
    flash_attn: object
    type_k: str
    type_v: str
    split_mode: str
    main_gpu: int
    tensor_split: tuple
    load_mode: str
    use_mmap: object
    gpu_info: str
    cpu_info: str
    backends: str
    build_commit: str
    avg_ts: float
    stddev_ts: float
    samples_ts: tuple

    @property
    def kind(self):
        """"tg" (generation only), "pp" (prompt only) or "pg" (both, llama-bench's -pg)."""
        if self.n_gen == 0:
            return "pp"
        return "tg" if self.n_prompt == 0 else "pg"


@dataclass(frozen=True)
class BenchPlacement:
    """The llama.cpp settings of one run, as device-fit takes them: overrides in llama.cpp's order
    [("-ot", "PATTERN=BUFT,...") | ("--n-cpu-moe", N)] (llama-bench applies its -ot group first, then
    --n-cpu-moe's patterns: test::to_llama_mparams), ngl (negative = every layer), ts (() = none),
    split_mode, main_gpu, ubatch, batch, threads, flash_attn (None = auto), ctk, ctv, and the context the
    run needs (n_depth + n_prompt + n_gen tokens) with the depth it was measured at."""

    overrides: tuple
    ngl: int
    ts: tuple
    split_mode: str
    main_gpu: int
    ubatch: int
    batch: int
    threads: int
    flash_attn: object
    ctk: str
    ctv: str
    context: int
    depth: int


class _Refused(Exception):
    pass


def _parse(text, name):
    """The run objects of a -o json list, a -o jsonl stream, or a single object."""
    try:
        doc = json.loads(text)
    except ValueError:
        lines = [line for line in text.splitlines() if line.strip()]
        try:
            doc = [json.loads(line) for line in lines]
        except ValueError as err:
            raise FormatError(name, f"not JSON or JSON lines ({err})") from None
        if not lines:
            raise FormatError(name, "not JSON: the file is empty")
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list) or not any(isinstance(item, dict) and all(k in item for k in SIGNATURE) for item in doc):
        if isinstance(doc, list) and not doc:
            raise FormatError(name, "no runs: llama-bench's list is empty")
        raise FormatError(name, "not llama-bench output (-o json or -o jsonl): no object with "
                          + ", ".join(repr(k) for k in SIGNATURE))
    return doc


def _get(item, key, kind, default=None, minimum=None):
    if key not in item:
        if default is not None:
            return default
        raise _Refused(f"no {key!r}")
    value = item[key]
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise _Refused(f"field {key!r} has the wrong type ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise _Refused(f"field {key!r} is {value}, below {minimum}")
    return float(value) if kind is float else value


def parse_overrides(text):
    """((pattern, buffer type), ...) from llama-bench's printed -ot group ("none" -> ()). Raises ValueError
    for an entry without "=" (llama-bench's parser splits at ";" then at the first "=")."""
    if text in ("none", ""):
        return ()
    pairs = []
    for entry in text.split(";"):
        if entry == "none":
            continue
        pattern, sep, buft = entry.partition("=")
        if not sep or not pattern or not buft:
            raise ValueError(f"{entry!r} is not PATTERN=BUFFER_TYPE")
        pairs.append((pattern, buft))
    return tuple(pairs)


def parse_split(text):
    """Tensor-split weights from llama-bench's "1.00/3.00" (all zero, as llama-bench prints the default -> ())."""
    try:
        weights = tuple(float(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"{text!r} is not weights joined by '/'") from None
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise ValueError(f"{text!r} holds a negative or non-finite weight")
    return weights if any(weights) else ()


def flash_attn_value(value):
    """True, False or None (auto) from llama-bench's int (-1/0/1), an older build's bool, or on/off/auto."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (-1, 0, 1):
        return None if value < 0 else bool(value)
    if isinstance(value, str) and value.lower() in _FLASH_TEXT:
        return _FLASH_TEXT[value.lower()]
    raise ValueError(f"{value!r} is not -1, 0, 1, on, off or auto")


def _mmap(item):
    if "use_mmap" in item:
        return _get(item, "use_mmap", bool)
    mode = item.get("load_mode", "auto")
    if not isinstance(mode, str):
        raise _Refused(f"field 'load_mode' has the wrong type ({type(mode).__name__})")
    return None if mode == "auto" else "mmap" in mode


def _run(index, item):
    if not isinstance(item, dict):
        raise _Refused(f"a {type(item).__name__}, not an object")
    text = lambda key, default=None: _get(item, key, str, default)  # noqa: E731
    count = lambda key, default=None, minimum=0: _get(item, key, int, default, minimum)  # noqa: E731
    split_mode = text("split_mode", "layer")
    if split_mode not in SPLIT_MODES:
        raise _Refused(f"field 'split_mode' is {split_mode!r}, not one of {', '.join(SPLIT_MODES)}")
    fields = {}
    for key, parse in (("tensor_buft_overrides", parse_overrides), ("tensor_split", parse_split)):
        try:
            fields[key] = parse(text(key, "none" if key == "tensor_buft_overrides" else "0.00"))
        except ValueError as err:
            raise _Refused(f"field {key!r}: {err}") from None
    try:
        flash = flash_attn_value(item.get("flash_attn", -1))
    except ValueError as err:
        raise _Refused(f"field 'flash_attn': {err}") from None
    samples = item.get("samples_ts", [])
    if not isinstance(samples, list) or any(isinstance(s, bool) or not isinstance(s, (int, float)) for s in samples):
        raise _Refused("field 'samples_ts' is not a list of numbers")
    run = BenchRun(
        index=index, model_filename=text("model_filename"), model_type=text("model_type", ""),
        model_size=count("model_size", 0), n_params=count("model_n_params", 0),
        n_prompt=count("n_prompt"), n_gen=count("n_gen"), n_depth=count("n_depth", 0),
        n_batch=count("n_batch", minimum=1), n_ubatch=count("n_ubatch", minimum=1),
        n_threads=count("n_threads", minimum=1), n_gpu_layers=count("n_gpu_layers", -1, minimum=None),
        n_cpu_moe=count("n_cpu_moe", 0), flash_attn=flash, type_k=text("type_k", "f16"),
        type_v=text("type_v", "f16"), split_mode=split_mode, main_gpu=count("main_gpu", 0),
        load_mode=text("load_mode", "auto"), use_mmap=_mmap(item), gpu_info=text("gpu_info", ""),
        cpu_info=text("cpu_info", ""), backends=text("backends", ""), build_commit=text("build_commit", ""),
        avg_ts=_get(item, "avg_ts", float, minimum=0), stddev_ts=_get(item, "stddev_ts", float, 0.0, minimum=0),
        samples_ts=tuple(float(s) for s in samples), **fields)
    if run.n_prompt == 0 and run.n_gen == 0:
        raise _Refused("n_prompt and n_gen are both 0")
    return run


def read_runs(path):
    """(runs, refusals) from a llama-bench -o json or -o jsonl file (`-` reads stdin): runs a list of
    BenchRun in file order, refusals [(index, reason)] for the objects refused. Raises FormatError naming
    the file when it is unreadable, not JSON, not llama-bench's output, empty, or every run is refused."""
    name = display_name(path)
    try:
        text = read_text(path, "llama-bench output")
    except OSError as err:
        raise FormatError(name, f"cannot read: {err.strerror or err}") from None
    runs, refusals = [], []
    for index, item in enumerate(_parse(text, name)):
        try:
            runs.append(_run(index, item))
        except _Refused as why:
            refusals.append((index, str(why)))
    if not runs:
        index, reason = refusals[0]
        raise FormatError(name, f"no run could be read; run {index}: {reason}")
    return runs, refusals


def resolve_model(run, search_dirs=()):
    """The model file a run used: its model_filename if that exists here, else a file of the same base
    name in one of search_dirs (in order), else None (the caller warns naming the file and skips it)."""
    if os.path.isfile(run.model_filename):
        return run.model_filename
    base = os.path.basename(run.model_filename.replace("\\", "/"))
    for folder in search_dirs:
        candidate = os.path.join(folder, base)
        if base and os.path.isfile(candidate):
            return candidate
    return None


def placement_of(run):
    """The BenchPlacement a run used (its -ot group joined with "," as llama.cpp's -ot takes it, then
    --n-cpu-moe N when N > 0)."""
    overrides = []
    if run.tensor_buft_overrides:
        overrides.append(("-ot", ",".join(f"{pattern}={buft}" for pattern, buft in run.tensor_buft_overrides)))
    if run.n_cpu_moe > 0:
        overrides.append(("--n-cpu-moe", run.n_cpu_moe))
    return BenchPlacement(
        overrides=tuple(overrides), ngl=run.n_gpu_layers, ts=run.tensor_split, split_mode=run.split_mode,
        main_gpu=run.main_gpu, ubatch=run.n_ubatch, batch=run.n_batch, threads=run.n_threads,
        flash_attn=run.flash_attn, ctk=run.type_k, ctv=run.type_v,
        context=run.n_depth + run.n_prompt + run.n_gen, depth=run.n_depth)


def device_fit_args(placement):
    """The `moetools device-fit --runtime llama` flags that evaluate this placement (a list of strings;
    the devices still come from --vram/--gpu/--rpc/--ram). An ngl below 0 (every layer) becomes 999;
    --depth is the run's n_depth, the context llama-bench measured its tokens after."""
    args = ["-c", str(placement.context), "--depth", str(placement.depth),
            "-ngl", str(placement.ngl if placement.ngl >= 0 else 999)]
    if placement.ts:
        args += ["-ts", ",".join(f"{w:g}" for w in placement.ts)]
    if placement.split_mode == "none":
        args += ["-mg", str(placement.main_gpu)]
    for kind, value in placement.overrides:
        args += [kind, str(value)]
    args += ["-ub", str(placement.ubatch), "-b", str(placement.batch), "-t", str(placement.threads),
             "-ctk", placement.ctk, "-ctv", placement.ctv,
             "-fa", {True: "on", False: "off", None: "auto"}[placement.flash_attn]]
    return args
