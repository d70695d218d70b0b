"""A seeded, structure-aware fuzz of whole models through every command, each run a subprocess with a
timeout (issue 32): keys given absurd values or types, keys and tensors dropped, tensors moved to other
blocks, retyped or reshaped (doubled, halved, folded), and header fields edited in place. Every run must
exit 0, 1 or 2, and an exit 2 must be one `error:` line: no traceback, no internal error, no hang.
The long run is `python benchmarks/fuzz_reader.py --models N`."""

import random

from tests.fuzzing import SpecMutator, fuzz_models, judge


def test_mutated_models_fail_cleanly_in_every_command(tmp_path):
    runs, crashes = fuzz_models(("qwen3moe", "deepseek2", "gpt-oss"), mutants_each=3, workdir=tmp_path, seed=32,
                                timeout=60)
    assert [(what, run.command, run.problem, run.stderr[-400:]) for what, run in crashes] == []
    assert len(runs) >= 24
    codes = {run.code for run in runs}
    assert 2 in codes and 0 in codes  # the mutants reach the checks, and some are still models


def test_the_spec_mutator_is_deterministic_and_reaches_keys_and_tensors():
    whats = [SpecMutator("qwen3moe").mutate(random.Random(seed))[1] for seed in range(40)]
    assert whats == [SpecMutator("qwen3moe").mutate(random.Random(seed))[1] for seed in range(40)]
    text = " ".join(whats)
    assert "qwen3moe." in text and "dropped blk." in text and "shape" in text


def test_the_judge():
    assert judge(0, "warning: x\n") is None
    assert judge(2, "warning: x\nerror: m: bad\n") is None
    assert judge(2, "error: a\nerror: b\n") is not None
    assert judge(2, "Traceback (most recent call last):\nerror: x\n") is not None
    assert judge(1, "") is None and judge(-9, "") is not None
