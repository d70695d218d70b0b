"""Long mutation fuzz of the GGUF reader through inspect and device-fit:
`python benchmarks/fuzz_reader.py [MUTANTS]` (default 10,000, spread over five architectures).

`python benchmarks/fuzz_reader.py --models [MUTANTS]` (default 400) fuzzes whole models instead
(issue 32): tests/fuzzing.py's SpecMutator (keys given absurd values or types, keys and tensors
dropped, moved, retyped, reshaped or folded) and header edits, each mutant run through inspect
--strict, device-fit, quantize and container-encode as subprocesses with a timeout. Pass criteria
(exit 1 otherwise): every run exits 0, 1 or 2 with one `error:` line, none over 30 s.

Half the mutants come from the structure-aware mutator (counts, lengths, type ids, offsets,
alignment, split keys, block numbers), half from blind byte mutations. Each mutant runs `inspect`
and `device-fit` in-process. Pass criteria (exit 1 otherwise): 0 tracebacks or internal errors,
no command over 5 s on a mutant, no peak traced allocation over 10x the file size. Prints the load
average, since figures under load are noisy.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests package (its harness)

from moetools import synth  # noqa: E402
from tests.fuzzing import Outcome, fuzz_file, fuzz_models  # noqa: E402

ARCHES = ("qwen3moe", "deepseek2", "gpt-oss", "kimi-k3", "mixtral")
TIME_LIMIT_S = 5.0
MEMORY_LIMIT_RATIO = 10.0


MODEL_BUILDERS = ("qwen3moe", "deepseek2", "gpt-oss", "glm4moe", "mixtral", "kimi-k3", "dense")
MODEL_TIMEOUT_S = 30


def main_models(total):
    per_builder = -(-total // len(MODEL_BUILDERS))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        runs, crashes = fuzz_models(MODEL_BUILDERS, per_builder, folder, seed=32, timeout=MODEL_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    codes = {}
    for run in runs:
        codes[run.code] = codes.get(run.code, 0) + 1
    slowest = max((run.seconds for run in runs), default=0.0)
    print(f"{per_builder * len(MODEL_BUILDERS)} model mutants, {len(runs)} command runs in {elapsed:.0f} s: exit codes "
          f"{dict(sorted(codes.items(), key=str))}, {len(crashes)} unclean; slowest run {slowest:.2f} s (limit "
          f"{MODEL_TIMEOUT_S}); load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg()) if hasattr(os, 'getloadavg') else 'n/a'}")
    for what, run in crashes[:20]:
        print(f"UNCLEAN {run.command} on {what}: {run.problem}: {run.stderr.strip()[-300:]}")
    sys.exit(0 if not crashes else 1)


def main():
    if sys.argv[1:2] == ["--models"]:
        return main_models(int(sys.argv[2]) if len(sys.argv) > 2 else 400)
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    per_arch = -(-total // len(ARCHES))
    outcome = Outcome()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for index, arch in enumerate(ARCHES):
            source = synth.write_model(synth.tiny(arch), Path(folder) / f"{arch}.gguf", sparse=True)[0]
            arch_start = time.perf_counter()
            before = outcome.runs
            fuzz_file(source, Path(folder) / "mutant.gguf", per_arch, seed=index + 1, measure_memory=True,
                      outcome=outcome)
            rate = (outcome.runs - before) / (time.perf_counter() - arch_start)
            print(f"{arch:10s} {per_arch} mutants, {rate:.0f} command runs/s")
    elapsed = time.perf_counter() - start
    print(f"{per_arch * len(ARCHES)} mutants, {outcome.runs} command runs in {elapsed:.0f} s: "
          f"{outcome.clean_errors} clean errors, {outcome.accepted} accepted, {len(outcome.crashes)} crashes; "
          f"slowest run {outcome.slowest:.2f} s (limit {TIME_LIMIT_S}); peak allocation "
          f"{outcome.peak_ratio:.2f}x the file size (limit {MEMORY_LIMIT_RATIO}); load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg()) if hasattr(os, 'getloadavg') else 'n/a'}")
    for command, message in outcome.crashes[:20]:
        print(f"CRASH {command}: {message}")
    ok = not outcome.crashes and outcome.slowest <= TIME_LIMIT_S and outcome.peak_ratio <= MEMORY_LIMIT_RATIO
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
