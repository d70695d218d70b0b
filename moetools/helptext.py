"""The Examples block at the end of each command's --help.

Every line is a command that runs as written in a folder holding the files it names (model.gguf,
run.trace, hot/ and cold/); tests/test_help_examples.py runs each one there, in the order below.
"""

FILES = ("model.gguf: a GGUF (any shard of a split set); run.trace: the fork's GGML_MOE_TRACE_FILE; "
         "hot/, cold/: model folders")


def examples(*lines):
    """A click epilog: `\\b` keeps click from re-wrapping the lines into one paragraph."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


INSPECT = examples(
    "moetools inspect model.gguf",
    "moetools inspect model.gguf --tensors --json",
)
DEVICE_FIT = examples(
    "moetools device-fit model.gguf --vram 24G",
    "moetools device-fit model.gguf --vram 24G --coverage curve.json --ctx 8192",
    "moetools device-fit model.gguf --vram 24G --emit env",
    "moetools device-fit model.gguf --runtime llama --vram 24G,24G --ram 64G",
    "moetools device-fit model.gguf --host host.json",
    "moetools device-fit model.gguf --runtime llama --vram 24G --ram 64G -ot exps=CPU",
    "moetools device-fit --vram 24G --ram 64G --check -- llama-server -m model.gguf -ngl 99 -ot exps=CPU",
)
QUANTIZE = examples(
    "moetools quantize model.gguf --type Q4_K_M,Q8_0 --dry-run",
    "moetools quantize model.gguf --type Q4_K_M -o tiers",
)
CONTAINER_ENCODE = examples(
    "moetools container-encode model.gguf -o container",
)
CONTAINER_VERIFY = examples(
    "moetools container-verify container --model model.gguf",
)
CONTAINER_READ = examples(
    "moetools container-read container --layer 0 --expert 3",
)
COLD_TWIN = examples(
    "moetools cold-twin hot cold",
    "moetools cold-twin hot cold --migrate cold --yes",
)
TRACE_TAIL = examples(
    "moetools trace-tail run.trace --model model.gguf",
    "moetools trace-tail run.trace --model model.gguf --curve -o curve.json",
)
HOST = examples(
    "moetools host -o host.json",
)
BUILD_ENV = examples(
    "moetools build-env --check",
    "moetools build-env --shell json",
)
