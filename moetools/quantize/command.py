"""`moetools quantize MODEL --type q8_0,q4_K`: precision tiers of the resident weights, with manifests.

    moetools quantize k3-00001-of-00014.gguf --type q8_0,q6_K,q4_K
    moetools quantize model.gguf --type q4_0 -o tiers/ --json | jq '.tiers[] | {tier, resident_bytes, rmse}'
    moetools quantize model.gguf --full --type q4_K     # a complete model, experts quantized by the mix too
    moetools quantize k3-00001-of-00014.gguf --full --keep-split --type q4_K   # ... in 14 files
    moetools quantize model.gguf --type q6_K,q4_K,q3_K --dry-run   # bytes per tier from the headers only
"""

import contextlib
import functools
import os

import click

from moetools import helptext
from moetools.diskspace import check_room
from moetools.errors import OutputError, UsageError
from moetools.locking import folder_lock, remove_stale_temps
from moetools.output import Table, info, render, warn
from moetools.quantize.rules import MIX_ALIASES, MIXES, TARGETS
from moetools.sizes import format_size
from moetools.quantize.options import mix_options, outputs_options, running_options


def _doc(model, mode, out_dir, results, notes, worst):
    return {
        "model": model.path,
        "mode": mode,
        "output_dir": out_dir,
        "source_fingerprint": model.fingerprint,
        "expert_count": model.expert_count,
        "source_resident_bytes": model.resident_bytes,
        "source_resident_tensor_count": len(model.resident_tensors),
        "tiers": [result.to_doc(worst) for result in results],
        "notes": notes,
    }


def _duration(seconds):
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _figure(value, fmt):
    return "-" if value is None else fmt.format(value)


def block_ranges(numbers):
    """`0-3,7,9-10` for the block numbers {0, 1, 2, 3, 7, 9, 10}."""
    numbers = sorted(set(numbers))
    spans, start = [], None
    for index, number in enumerate(numbers):
        if start is None:
            start = number
        if index + 1 == len(numbers) or numbers[index + 1] != number + 1:
            spans.append(str(start) if start == number else f"{start}-{number}")
            start = None
    return ",".join(spans)


def group_by_block(rows):
    """Rows (tier, tensor name, type, reason) with the same tier, type, reason and name apart from
    the block number, folded into one: `blk.{0-45}.ffn_down_shexp.weight (46)`. A dry run of a
    61-block model printed 93 identical rows."""
    import re

    groups = {}
    for tier, name, written_as, reason in rows:
        match = re.match(r"^blk\.(\d+)\.(.+)$", name)
        key = (tier, match[2] if match else name, written_as, reason, bool(match))
        groups.setdefault(key, []).append(int(match[1]) if match else None)
    out = []
    for (tier, rest, written_as, reason, in_block), blocks in groups.items():
        if not in_block:
            names = rest
        elif len(blocks) == 1:
            names = f"blk.{blocks[0]}.{rest}"
        else:
            names = f"blk.{{{block_ranges(blocks)}}}.{rest} ({len(blocks)})"
        out.append((tier, names, written_as, reason))
    return out


def larger_than_source_notes(results, source_resident_bytes):
    """A tier with more resident bytes than the source's: the source already holds those weights in
    fewer bits, so re-quantizing them into more bits adds bytes and no precision."""
    return [f"{result.tier} is {format_size(result.resident_bytes)}, larger than the source's resident "
            f"{format_size(source_resident_bytes)} ({result.resident_bytes / source_resident_bytes:.2f}x): the source "
            "already stores these weights in fewer bits, so this tier adds bytes, not precision"
            for result in results if source_resident_bytes and result.resident_bytes > source_resident_bytes]


def _tables(doc):
    tiers = Table(
        f"Resident tiers of {os.path.basename(doc['model'])} ({doc['mode']}, source resident {format_size(doc['source_resident_bytes'])})",
        ["tier", "resident", "bits/w", "RMSE", "rel RMSE", "max rel err", "requant", "fallbacks"],
        [[t["tier"], format_size(t["resident_bytes"]), f"{t['bits_per_weight']:.3f}", _figure(t["rmse"], "{:.3g}"),
          _figure(t["rel_rmse"], "{:.3%}"), _figure(t["max_rel_error"], "{:.3%}"), t["quantized"], len(t["fallbacks"])]
         for t in doc["tiers"]],
        right_align=(1, 2, 3, 4, 5, 6, 7),
        # the files go in the caption, where a long name wraps as text instead of folding a column
        caption=(f"{'written' if doc['tiers'][0]['file_bytes'] is not None else 'to write'} in {doc['output_dir']}: "
                 f"{', '.join(os.path.basename(path) for t in doc['tiers'] for path in t['gguf_files'])}; "
                 f"{doc['tiers'][0]['kept']} tensors kept as llama-quantize keeps them "
                 "(1-D, norms, router, non-weights); tensors already in a tier's type copied as they are") if doc["tiers"] else "",
    )
    worst = Table("Worst re-quantized tensors (by relative RMSE)", ["tier", "tensor", "from", "to", "RMSE", "rel RMSE", "max rel err"],
                  [[t["tier"], e["tensor"], e["source_type"], e["type"], f"{e['rmse']:.3g}", f"{e['rel_rmse']:.3%}", f"{e['max_rel_error']:.3%}"]
                   for t in doc["tiers"] for e in t["worst_tensors"]], right_align=(4, 5, 6))
    fallbacks = Table("Fallbacks (rows that do not divide into the tier's blocks)", ["tier", "tensors", "written as", "reason"],
                      [[tier, names, written_as, reason]
                       for tier, names, written_as, reason in group_by_block([(t["tier"], f["tensor"], f["type"], f["reason"])
                                                                              for t in doc["tiers"] for f in t["fallbacks"]])])
    tables = [tiers]
    if worst.rows:
        tables.append(worst)
    if fallbacks.rows:
        tables.append(fallbacks)
    return tables


def _lean(command):
    """Run `command` inside startup.lean_process (OpenBLAS on one thread, the collector paused)."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        from moetools.quantize.startup import lean_process

        with lean_process():
            return command(*args, **kwargs)

    return run


def _install_override(folder, results):
    """Make the smallest tier written the folder's override (the daemon's
    resolve_device_fit_override takes the newest GGUF there) and price it in `resident-bytes`."""
    from moetools.formats import storage

    from moetools.quantize import staged

    staged.fault_point("install")  # tests: killed after the tiers are published, before the override is made
    smallest = min(results, key=lambda result: result.resident_bytes)
    chosen = storage.make_override(folder, smallest.gguf)
    if chosen is None or os.path.abspath(chosen) != os.path.abspath(smallest.gguf):
        raise OutputError(f"{folder}: could not make {os.path.basename(smallest.gguf)} the daemon's override "
                         f"(it picks {chosen})")
    path = storage.write_resident_bytes(folder, smallest.resident_bytes)
    info(f"installed in {folder}; the daemon's override: {os.path.basename(chosen)} ({format_size(smallest.resident_bytes)}, {smallest.resident_bytes} bytes written to {path})")
    return {"override": chosen, "resident_bytes_file": path, "override_resident_bytes": smallest.resident_bytes}


def _tensor_types(mix):
    """--tensor-type's overrides and --tensor-type-file's, in the order llama-quantize appends them
    (first match wins): the files' before --tensor-type's when a file came first on the command line."""
    from moetools.quantize.inputs import parse_tensor_types, read_tensor_type_file

    if sum(path == "-" for path in mix.tensor_type_files) > 1:
        raise UsageError("--tensor-type-file - reads stdin once: give it one time")
    given = parse_tensor_types(mix.tensor_types)
    from_files = tuple(pair for path in mix.tensor_type_files for pair in read_tensor_type_file(path))
    return from_files + given if mix.files_first else given + from_files


def _write_tiers(model, plans, out_dir, outputs, running):
    """Quantize `plans` into `out_dir` (its lock held): the free-space check, then core.run."""
    from moetools.progress import progress
    from moetools.quantize import core, staged

    # before a byte is written: the tiers' planned bytes against what the drive has
    check_room(out_dir, sum(core.planned_bytes(plan) for plan in plans), "the tiers")
    core.prepare_output_dir(out_dir)
    if outputs.force:
        staged.staging.clear(out_dir)  # --force replaces an interrupted run instead of finishing it
    reused = core.stage(model, plans, out_dir)
    if reused:
        info(f"reusing {len(reused)} file{'s' if len(reused) > 1 else ''} an interrupted run of the same plan "
             f"finished (digests checked): {', '.join(reused)}")
    seconds = sum(core.tier_seconds(plan, running.threads) for plan in plans)
    info(f"quantize: about {_duration(seconds)} for {len(plans)} tier{'s' if len(plans) > 1 else ''} "
         "(from the kernels' measured speed on this engine and thread count)")
    compiling = core.kernels_to_compile(plans)
    if compiling:
        info(f"quantize: compiling the kernels for {', '.join(compiling)} (first run; numba caches them for "
             "the next runs)")
    with progress(core.work_bytes(model, plans), desc="quantize") as bar:
        results = core.run(model, plans, out_dir, threads=running.threads, progress=bar)
    from moetools.cli import exit_at_once

    exit_at_once()  # nothing is left to clean up once this command returns
    return results


@click.command("quantize", epilog=helptext.QUANTIZE)
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@mix_options
@outputs_options
@running_options
@_lean
def quantize_command(model_path, mix, outputs, running):
    """Write precision tiers of MODEL's resident (non-expert) weights, one GGUF per --type, each with a
    resident manifest, and report bytes, bits per weight and the error against the source.

    Each tensor gets the type llama-quantize gives it for the named mix (Q4_K_M: attn_v, ffn_down and
    output get more bits by layer position and expert count), or with --pure the one type; tensors
    llama-quantize keeps stay as they are (1-D tensors, norms, the router ffn_gate_inp, exp_probs_b,
    anything not ending in `weight`); a tensor whose rows do not divide into the type's blocks falls
    back to the type llama-quantize picks; a tensor already in the type is copied byte for byte.
    --imatrix weighs the scale searches as llama-quantize does. Quantized bytes are identical to
    llama-quantize's. MODEL is a .gguf file or any shard of a split model.

    Exit codes: 0 written; 2 bad input or options, or an output that cannot be written (nothing is
    left behind).
    """
    model_id = outputs.model_id
    from moetools.gguf import open_model
    from moetools.gguf.locator import refuse_remote
    from moetools.quantize import core, resume, staged

    refuse_remote(model_path, "quantize")

    imatrix = None
    if mix.imatrix_path:
        from moetools.formats.imatrix import read_imatrix

        imatrix = read_imatrix(mix.imatrix_path)
    tiers = core.parse_mixes(
        mix.types, pure=mix.pure,
        output_type=core.parse_ggml_type(mix.output_tensor_type, "--output-tensor-type") if mix.output_tensor_type else None,
        token_embd_type=core.parse_ggml_type(mix.token_embedding_type, "--token-embedding-type") if mix.token_embedding_type else None,
        tensor_types=_tensor_types(mix), has_imatrix=imatrix is not None and bool(imatrix.entries))
    full = not outputs.resident_only
    if running.no_error and not full:
        raise UsageError("--no-error applies to --full (a resident tier's manifest records its error, which device-fit reads)")
    if outputs.keep_split and not full:
        raise UsageError("--keep-split applies to --full (a resident-only tier is always one file)")
    if outputs.install and (full or outputs.output_dir):
        raise UsageError("--install places resident-only tiers in the daemon's folder: not with --full or -o")
    if (outputs.storage_root or model_id) and not outputs.install:
        raise UsageError("--storage-root and --model-id apply to --install")
    from moetools.atomic import check_output_folder

    check_output_folder(outputs.output_dir, "-o")  # the tier folder is created, its parent must be there
    with open_model(model_path) as model, contextlib.ExitStack() as holding:
        from moetools.gguf import validate

        # the metadata every command checks, then what llama.cpp's load_tensors refuses (a missing block
        # tensor, a wrong shape), before anything is written (issue 32)
        validate.check_model(model)
        for message in model.warnings:
            warn(message)
        installed = None
        if outputs.install:
            from moetools.formats import storage
            from moetools.gguf import model_stem

            model_id = model_id or model_stem(model.path)
            installed = {"model_id": model_id, "slug": storage.device_fit_slug(model_id),
                         "storage_root": outputs.storage_root or storage.storage_root()}
            out_dir = storage.device_fit_dir(model_id, installed["storage_root"])
        else:
            out_dir = outputs.output_dir or core.default_output_dir(model.path, full)
        finished = None
        if not outputs.dry_run:  # one run at a time per tier folder; what a killed run left is cleared under the lock
            holding.enter_context(folder_lock(out_dir, tool="quantize", wait=running.wait, on_wait=warn))
            for folder in (out_dir, staged.staging_path(out_dir, "")):
                for name in remove_stale_temps(folder):
                    info(f"removed {os.path.join(folder, name)}: a temporary file of a run that was killed")
            finished = staged.finish_committed(out_dir)
            if finished is not None:
                info(f"finished a run that was killed while publishing its files in {out_dir}: "
                     f"{', '.join(finished['files'])}")
        notes = []
        if not model.expert_tensors:
            notes.append("the model has no routed experts: every tensor is resident" if outputs.resident_only
                         else "the model has no routed experts: the full model is every tensor re-quantized")
        plans = core.plan_tiers(model, tiers, out_dir, full=full, force=True, keep_split=outputs.keep_split, imatrix=imatrix)
        for plan in plans:
            plan.measure = not running.no_error
        command_key = staged.run_key(model, plans)  # recorded in each manifest: a rerun keeps what it wrote
        for plan in plans:
            plan.command_key = command_key
        for note in notes:
            info(f"note: {note}")
        if outputs.dry_run:
            results = core.estimate(model, plans, threads=running.threads)
            notes.append("dry run: nothing written; error figures need a real run")
        elif finished is not None and not outputs.force and finished.get("key") == staged.run_key(model, plans):
            results = core.results_from_journal(finished)  # the killed run was this very run: it is done now
            notes.append("completed the publish of an interrupted run of the same plan; nothing re-quantized")
        else:
            every_plan, kept = plans, []
            if not outputs.force:  # a rerun of the same command keeps the tiers it finished (issue 32)
                plans, kept, redone = resume.resume_finished(model, plans, running.threads)
                if kept:
                    info(f"keeping {len(kept)} tier{'s' if len(kept) > 1 else ''} this command already wrote in {out_dir} "
                         f"(manifest and GGUF digest checked): {', '.join(result.tier for _, result in kept)}")
                for tier in redone:
                    info(f"writing tier {tier} again: its GGUF in {out_dir} does not match its manifest")
            results = _write_tiers(model, plans, out_dir, outputs, running) if plans else []
            for index, result in kept:
                results.insert(index, result)
            plans = every_plan
        for note in larger_than_source_notes(results, model.resident_bytes):
            info(f"note: {note}")
            notes.append(note)
        doc = _doc(model, "full" if full else "resident-only", out_dir, results, notes, running.worst)
        if installed is not None:
            if not outputs.dry_run:
                installed.update(_install_override(out_dir, results))
            doc["install"] = installed
    render(doc, lambda: _tables(doc), running.json_flag, notes=[f"note: {note}" for note in notes if note.startswith("dry run")])
