"""llama.cpp's tensor buffer overrides (`-ot PATTERN=DEVICE,...`, `--cpu-moe`, `--n-cpu-moe N`) as
--runtime llama evaluates them: which device each tensor of the model lands on.

llama.cpp's rules (commit 0c1e57098), followed here:

- common/arg.cpp parse_tensor_buffer_overrides: the value is split at every `,` (string_split: a comma
  always separates entries, even inside a regex such as `{1,2}`), each entry at its first `=`
  (no `=`: "invalid value"); the right side must be a buffer type name of a device llama.cpp found
  (ggml_backend_buft_name of ggml_backend_dev_buffer_type: `CPU`, `CUDA0`, ...; an RPC server's
  `RPC0[host:port]`, ggml-rpc.cpp ggml_backend_rpc_buffer_type), else it prints the available ones
  and fails with "unknown buffer type".
- The overrides are one list, appended in command-line order: `-ot` entries as given, `--cpu-moe`
  one entry `\\.ffn_(up|down|gate|gate_up)_(ch|)exps` (common.h llm_ffn_exps_cpu_override),
  `--n-cpu-moe N` N entries `blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps` for i < N
  (common.h llm_add_n_cpu_ffn_overrides), all to the CPU.
- src/llama-model-loader.cpp llama_model_loader::create_tensor (its buft_for_tensor lambda): for
  every tensor the model creates (input, repeating and output layers alike) the overrides are tried
  in order with `std::regex_search(name, std::regex(pattern))`; the first that matches sets its buffer
  type, and the rest are not looked at.
- src/llama-model.cpp llama_model::llama_model: any override (even one matching nothing) sets
  has_tensor_overrides, which turns pipeline parallelism off (src/llama-context.cpp).

std::regex's default grammar is ECMAScript; Python's `re` agrees on what llama.cpp users write
(literals, `\\.`, `\\d`, classes, groups, alternation, `*+?{n,m}`, anchors). `to_python` maps the
POSIX classes ECMAScript accepts inside brackets (`[[:digit:]]`) and refuses the constructs only
Python has (named groups `(?P`, look-behind, inline flags, `\\A`, `\\Z`, `{,n}`), which std::regex
rejects.
"""

import re

from moetools.devicefit.placement import CPU
from moetools.errors import UsageError

EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # common.h LLM_FFN_EXPS_REGEX

_POSIX = {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
          "space": r"\s", "xdigit": "0-9A-Fa-f", "punct": r"!-/:-@\[-`{-~", "w": r"\w", "d": r"\d", "s": r"\s"}
_PYTHON_ONLY = [(re.compile(r"\(\?P"), "a named group (?P...)"), (re.compile(r"\(\?<[=!]"), "a look-behind (?<=...)"),
                (re.compile(r"\(\?[aiLmsux-]+[:)]"), "an inline flag (?i)"), (re.compile(r"(?<!\\)\\[AZ]"), r"\A or \Z"),
                (re.compile(r"(?<!\\)\{,"), "a {,n} repeat")]


class Override:
    """One entry of llama.cpp's override list: pattern, compiled regex, target (device index or CPU),
    and where it came from (`-ot`, `--cpu-moe`, `--n-cpu-moe`)."""

    __slots__ = ("pattern", "regex", "target", "source")

    def __init__(self, pattern, regex, target, source):
        self.pattern, self.regex, self.target, self.source = pattern, regex, target, source


def to_python(pattern):
    """The Python regex that matches what std::regex (ECMAScript) matches for `pattern`. Raises
    UsageError for a pattern std::regex or Python refuses."""
    for check, what in _PYTHON_ONLY:
        if check.search(pattern):
            raise UsageError(f"-ot {pattern!r}: {what} is Python syntax that llama.cpp's std::regex (ECMAScript) refuses")
    text = re.sub(r"\[:(\w+):\]", lambda m: _POSIX.get(m[1], m[0]), pattern)
    try:
        return re.compile(text)
    except re.error as err:
        raise UsageError(f"-ot {pattern!r}: not a valid regular expression ({err})") from None


def parse_sources(sources):
    """[(pattern, device name, source)] from the ordered sources: ("-ot", TEXT), ("--cpu-moe", None),
    ("--n-cpu-moe", N). Raises UsageError for an entry with no `=`."""
    entries = []
    for kind, value in sources:
        if kind == "-ot":
            for item in value.split(","):
                if "=" not in item:
                    raise UsageError(f"-ot {value!r}: {item!r} is not PATTERN=DEVICE (llama.cpp: invalid value)")
                pattern, target = item.split("=", 1)
                entries.append((pattern, target, f"-ot {item}"))
        elif kind == "--cpu-moe":
            entries.append((EXPS_REGEX, "CPU", "--cpu-moe"))
        elif kind == "--n-cpu-moe":
            entries += [(f"blk\\.{i}{EXPS_REGEX}", "CPU", f"--n-cpu-moe {value}") for i in range(value)]
    return entries


def buffer_names(devices):
    """{name llama.cpp's -ot takes: device key}: CPU, each offload device's buffer type name (CUDA0,
    RPC0[host:port])."""
    return {"CPU": CPU, **{device.name: index for index, device in enumerate(devices)}}


def aliases(devices):
    """{other name of an RPC server: device key}: its device name RPC<n> (numbered across servers, as
    --list-devices prints it) and its registry's RPC[host:port] (ggml-rpc.cpp). llama.cpp's -ot refuses
    both; device-fit takes them and writes the buffer name."""
    names = {}
    rpc = [index for index, device in enumerate(devices) if device.kind == "rpc"]
    for number, index in enumerate(rpc):
        names[f"RPC{number}"] = index
        names[f"RPC[{devices[index].endpoint}]"] = index
    return {name: index for name, index in names.items() if name not in buffer_names(devices)}


def canonical(sources, devices):
    """(the sources with every -ot device alias written as its buffer name, [warnings])."""
    alias = aliases(devices)
    if not alias:
        return list(sources), []
    result, warnings = [], []
    for kind, value in sources:
        if kind != "-ot":
            result.append((kind, value))
            continue
        items = []
        for item in value.split(","):
            pattern, _, target = item.partition("=")
            if target in alias:
                name = devices[alias[target]].name
                warnings.append(f"-ot {item}: llama.cpp's -ot takes the buffer name {name} (it stops on {target} with "
                                f"'unknown buffer type'); planned, and written in the launch line, as {name}")
                item = f"{pattern}={name}"
            items.append(item)
        result.append((kind, ",".join(items)))
    return result, warnings


def resolve(sources, devices):
    """[Override] of the ordered sources on these devices. Raises UsageError for a bad regex or a
    device the plan does not have (listing the ones it has)."""
    names = buffer_names(devices)
    result = []
    for pattern, target, source in parse_sources(sources):
        regex = to_python(pattern)
        if target not in names:
            listed = ", ".join(names)
            raise UsageError(f"{source}: no device {target!r} in this plan (llama.cpp: unknown buffer type); "
                             f"its devices: {listed} (from --vram/--gpu/--rpc)")
        result.append(Override(pattern, regex, names[target], source))
    return result


def tensor_homes(overrides, tensors):
    """({tensor name: device key} of the tensors an override matches, the first match winning;
    [per override: (tensors it matches, tensors it wins)]; [(tensor name, winner, loser)] where an
    override of another flag with another target matches a tensor after the winner). `tensors`:
    LayerBytes.tensors entries (the name first)."""
    names = tuple(entry[0] for entry in tensors)
    matched = [_matching(override.pattern, override.regex, names) for override in overrides]
    homes = {}
    counts = [[len(hits), 0] for hits in matched]
    contests = []
    winners = {}  # position in `names` -> the override that took it
    for position, (override, hits) in enumerate(zip(overrides, matched)):
        for index in hits:
            winner = winners.get(index)
            if winner is None:
                winners[index] = override
                homes[names[index]] = override.target
                counts[position][1] += 1
            elif override.target != winner.target and _flag(override) != _flag(winner):
                contests.append((index, names[index], winner, override))
    contests.sort(key=lambda contest: contest[0])  # in tensor order, as llama.cpp meets them
    return homes, counts, [contest[1:] for contest in contests]


_MATCHES = {}  # (pattern, names) -> the positions it matches: a placement search asks again and again
_MATCHES_MAX = 4096


def _matching(pattern, regex, names):
    """Positions in `names` that `regex` (the override's `pattern`) regex_searches, ascending; cached:
    llama.cpp's --fit emulation evaluates dozens of -ot lists that share most of their patterns."""
    key = (pattern, regex.flags, names)
    hits = _MATCHES.get(key)
    if hits is None:
        if len(_MATCHES) >= _MATCHES_MAX:
            _MATCHES.clear()
        search = regex.search
        hits = _MATCHES[key] = tuple(index for index, name in enumerate(names) if search(name))
    return hits


def _flag(override):
    return override.source.split()[0]


def report(overrides, counts, contests, device_names):
    """(notes, warnings) of an evaluated override list: `-ot` entries that match no tensor or only
    tensors an earlier override took (warnings), and which of two conflicting flags wins (a note:
    llama.cpp's order). device_names: {device key: name}."""
    warnings = []
    for override, (matched, won) in zip(overrides, counts):
        if _flag(override) != "-ot":
            continue
        if not matched:
            warnings.append(f"{override.source}: the pattern matches no tensor of this model (llama.cpp "
                            "regex_searches every tensor name): it moves nothing")
        elif not won:
            warnings.append(f"{override.source}: every tensor it matches ({matched}) is taken by an earlier "
                            "override (the first match wins): it moves nothing")
    notes = []
    pairs = {}
    for name, winner, loser in contests:
        key = (winner.source, loser.source, winner.target, loser.target)
        pairs.setdefault(key, []).append(name)
    for (win, lose, win_target, lose_target), names in pairs.items():
        sample = ", ".join(names[:2]) + (", ..." if len(names) > 2 else "")
        notes.append(f"{win} and {lose} both match {len(names)} tensor(s) ({sample}): llama.cpp appends the "
                     f"overrides in command-line order (common/arg.cpp) and the first match wins "
                     f"(llama_model_loader::create_tensor), so the {device_names[win_target]} of {win} is "
                     f"planned, not the {device_names[lose_target]} of {lose}")
    return notes, warnings
