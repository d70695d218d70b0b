"""`moetools inspect` as a whole process against gguf.GGUFReader on a Kimi-K2-class split header.

The model: 61 blocks, 384 experts, top-8, a 163,840-token vocabulary with 163,328 merges, 8 shards,
written header-only as sparse files. Targets (issue 2): at least 100x faster than gguf.GGUFReader
over the same shards, and the whole inspect process under 0.5 s.

    .venv/bin/python benchmarks/bench_inspect.py
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MOETOOLS, report, scratch, time_process  # noqa: E402

from moetools import synth  # noqa: E402


def gguf_reader_seconds(shards):
    import gguf

    start = time.perf_counter()
    for shard in shards:
        reader = gguf.GGUFReader(shard)
        assert reader.tensors
    return time.perf_counter() - start


def main():
    with scratch("bench-inspect-") as folder:
        shards = synth.write_model(synth.preset("kimi-k2"), Path(folder) / "kimi-k2.gguf", sparse=True, shards=8)
        inspect_s = time_process([*MOETOOLS, "inspect", shards[3], "--json"], repeat=7)
        import_s = time_process([sys.executable, "-c", "import gguf"], repeat=3)
        reader_s = gguf_reader_seconds(shards)
        print(f"model: Kimi-K2-class, 8 shards, 163,840 tokens + merges; `import gguf` alone: {import_s:.3f} s")
        ratio = report("inspect process vs gguf.GGUFReader", inspect_s, reader_s)
        print(f"inspect process: {inspect_s:.3f} s (target < 0.5 s: {'met' if inspect_s < 0.5 else 'MISSED'}); "
              f"ratio target >= 100x: {'met' if ratio >= 100 else 'MISSED'}")


if __name__ == "__main__":
    main()
