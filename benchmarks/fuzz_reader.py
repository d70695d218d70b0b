"""Long mutation fuzz of the GGUF header reader: `python benchmarks/fuzz_reader.py [ITERATIONS]`.

Prints how many mutants parsed and how many failed cleanly; any other exception is a bug and
stops the run with its traceback.
"""

import sys
import tempfile
import time
from pathlib import Path

from moetools import synth
from moetools.gguf.fuzz import fuzz_file


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    with tempfile.TemporaryDirectory() as folder:
        for arch in ("qwen3moe", "deepseek2", "gpt-oss", "kimi-k3", "mixtral"):
            source = synth.write_model(synth.tiny(arch), Path(folder) / f"{arch}.gguf", sparse=True)[0]
            start = time.perf_counter()
            parsed, errors = fuzz_file(source, Path(folder) / "mutant.gguf", iterations, seed=1)
            elapsed = time.perf_counter() - start
            print(f"{arch:10s} {iterations} mutants: {parsed} parsed, {errors} clean errors, 0 crashes "
                  f"({iterations / elapsed:.0f} mutants/s)")


if __name__ == "__main__":
    main()
