"""Every synthetic model moetools.synth writes, fingerprinted: each tiny builder (with its random data) and
each full-size preset (header-only; a preset's fingerprint is its size and the sha256 of its first 64 MiB,
since the rest is a hole). Run it with two trees' PYTHONPATH and diff the outputs: a change to synth that
should move nothing must print the same lines (the synth package split of 0.2.0 was checked this way:
89 files, identical).

    PYTHONPATH=. .venv/bin/python benchmarks/check_synth_identical.py /tmp/after > after.txt
    PYTHONPATH=/path/to/old/tree .venv/bin/python benchmarks/check_synth_identical.py /tmp/before > before.txt
    diff before.txt after.txt
"""
import hashlib, sys, tempfile
from pathlib import Path
from moetools import synth
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
rows = []
for name in sorted(synth.BUILDERS):
    p = synth.write_model(synth.tiny(name), out / f"tiny-{name}.gguf")
    rows += p
for name in sorted(synth.PRESETS):
    rows += synth.write_model(synth.preset(name), out / f"preset-{name}.gguf", sparse=True, shards=2 if name in ("kimi-k2",) else 1)
for p in sorted(rows):
    h = hashlib.sha256()
    import os
    size = os.path.getsize(p)
    with open(p, "rb") as f:
        h.update(f.read(64 << 20))  # the header (presets are sparse: their data is holes)
    print(Path(p).name, size, h.hexdigest())
