"""`moetools container-encode`, `container-verify`, `container-read`: the expert container.

    moetools container-encode k3-00001-of-00014.gguf -o /nvme/k3.container
    moetools container-verify /nvme/k3.container --model k3-00001-of-00014.gguf
    moetools container-read /nvme/k3.container --layer 5 --expert 17
    moetools container-read /nvme/k3.container --layer 5 --expert 17 --matrix down -o down.bin
"""

import os
import sys

import click

from moetools import helptext
from moetools.errors import AnswerNo, MoeError, UsageError
from moetools.output import Table, render, warn
from moetools.sizes import format_size, parse_size


def _size_option(value):
    try:
        return parse_size(value)
    except MoeError as err:
        raise click.BadParameter(str(err)) from None


def _open_model(path, command, validate=False):
    from moetools.gguf import open_model
    from moetools.gguf.locator import refuse_remote

    refuse_remote(path, command)
    model = open_model(path)
    if validate:
        from moetools.gguf.validate import check_model

        try:
            check_model(model)  # what llama.cpp refuses, as every command checks it (issue 32)
        except BaseException:
            model.close()
            raise
    for message in model.warnings:
        warn(message)
    return model


# --- encode ------------------------------------------------------------------------------------


def encode_doc(result):
    manifest = result.manifest
    source_bytes = manifest.source.get("expert_bytes", 0)
    return {
        "folder": result.folder,
        "model": manifest.model,
        "fmt": manifest.fmt,
        "matrix_types": manifest.matrix_types,
        "record_bytes": manifest.record_bytes,
        "n_layers": manifest.n_layers,
        "layers": manifest.layers,
        "experts_per_layer": manifest.experts_per_layer,
        "activated_per_token": manifest.activated_per_token,
        "expert_bytes": source_bytes,
        "container_bytes": result.container_bytes,
        "padding_ratio": round(result.container_bytes / source_bytes - 1, 6) if source_bytes else 0,
        "version": manifest.version,
        "tiers": [{"id": t.id, "quant": t.quant, "record_bytes": t.record_bytes} for t in manifest.tiers],
        "banks_written": result.banks_written,
        "banks_skipped": result.banks_skipped,
        "bytes_read": result.bytes_read,
        "bytes_written": result.bytes_written,
        "seconds": round(result.seconds, 3),
        "bytes_per_s": round(result.bytes_written / result.seconds) if result.seconds > 0 else 0,
    }


def _layers_text(layers):
    return ", ".join(str(layer) for layer in layers) if layers else "none"


def encode_tables(doc):
    rows = [
        ["folder", doc["folder"]],
        ["model", doc["model"]],
        ["fmt", doc["fmt"] if not doc["matrix_types"] else f"mixed {doc['matrix_types']}"],
        ["record bytes", f"{doc['record_bytes']:,} ({format_size(doc['record_bytes'])})"],
        *[[f"tier {t['id']}", f"{t['quant']}: records of {t['record_bytes']:,} bytes, banks experts-L{{N}}-T{t['id']}.bin"]
          for t in doc.get("tiers") or []],
        ["banks (MoE layers)", f"{doc['n_layers']}: blocks {_layers_text(doc['layers'])}"],
        ["experts per layer", str(doc["experts_per_layer"])],
        ["activated per token", str(doc["activated_per_token"])],
        ["expert bytes (source)", format_size(doc["expert_bytes"])],
        ["container bytes", f"{format_size(doc['container_bytes'])} (+{doc['padding_ratio']:.1%} padding)"],
        ["banks written", _layers_text(doc["banks_written"])],
        ["banks kept (complete, verified)", _layers_text(doc["banks_skipped"])],
        ["time", f"{doc['seconds']:.1f} s, {format_size(doc['bytes_per_s'])}/s"],
    ]
    return [Table("container-encode", ["item", "value"], rows)]


@click.command("container-encode", epilog=helptext.CONTAINER_ENCODE)
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "folder", required=True, type=click.Path(file_okay=False),
              help="Container folder to write (created if needed; a rerun resumes it).")
@click.option("--force", is_flag=True, help="Replace a container of another model (or an unreadable one) in the folder.")
@click.option("--batch", "batch", default="16MiB", show_default=True, callback=lambda c, p, v: _size_option(v),
              help="Bytes of records built per write (memory used is about this, at least one record).")
@click.option("--banks", "banks_numbering", type=click.Choice(["block", "ordinal"]), default="block", show_default=True,
              help="Number banks (experts-L{N}.bin and each header's layer) by GGUF block, as the fork's server opens "
                   "them, or by MoE-layer ordinal (L0 = first routed layer), as the daemon's reader expects.")
@click.option("--tiers", "tiers_text", metavar="TYPE,TYPE,...",
              help="Write a version-2 tiered container: one tier per ggml type, sharpest first (e.g. Q8_0,Q4_K), "
                   "banks experts-L{N}-T{t}.bin, records re-quantized where the source has another type.")
@click.option("--json", "json_flag", is_flag=True, help="JSON output even on a terminal.")
@click.option("--wait", is_flag=True, help="If another run is writing into the folder, wait for it instead of stopping.")
def encode_command(model, folder, force, batch, banks_numbering, tiers_text, json_flag, wait):
    """Rewrite MODEL's routed experts into the -o folder as the serving fork's expert container:
    manifest.json and one experts-L{N}.bin bank per MoE layer, each expert one 4 KiB-aligned record
    (header, gate | up | down, zero padding), plus xxh3 sidecars.

    Streams with constant memory; each bank is written to a temporary name and renamed when
    complete, so a rerun after an interruption keeps the verified banks and finishes the rest.
    """
    from moetools.atomic import check_output_folder
    from moetools.container import core
    from moetools.diskspace import check_room
    from moetools.locking import folder_lock
    from moetools.progress import progress

    check_output_folder(folder, "-o")  # the container folder is created, its parent must be there
    tiered = None
    if tiers_text is not None:
        from moetools.container import tiered

        ladder = tiered.parse_tiers(tiers_text)
    with _open_model(model, "container-encode", validate=True) as source:
        if tiered is not None:
            plan = tiered.plan_tiered(source, ladder, banks_numbering)
            total, to_write = tiered.total_bytes(plan.manifest), tiered.bytes_to_write(folder, plan)
        else:
            plan = core.plan_container(source, banks_numbering)
            total, to_write = plan.manifest.bank_bytes * plan.manifest.n_layers, None
        # one run at a time per container folder: two runs would mix banks and delete each other's temps
        lock = folder_lock(folder, tool="container-encode", wait=wait, on_wait=warn)
        with lock:
            # before a byte is written: what the banks still to write need against what the drive has
            check_room(folder, core.bytes_to_write(folder, plan) if to_write is None else to_write, "the container's banks")
            with progress(total, desc="container-encode") as bar:
                if tiered is not None:
                    result = tiered.encode_tiered(source, folder, plan, force=force, batch_bytes=batch, bar=bar)
                else:
                    result = core.encode_container(source, folder, force=force, batch_bytes=batch, bar=bar, plan=plan)
    for note in result.notes:
        warn(note)
    doc = encode_doc(result)
    render(doc, lambda: encode_tables(doc), json_flag)


# --- verify ------------------------------------------------------------------------------------


def verify_doc(result, source_missing=None):
    return {
        "folder": result.folder,
        "model": result.manifest.model,
        "ok": result.ok,
        "checked_against": result.model_path or None,
        "source_missing": source_missing,
        "packer": result.manifest.packer,
        "version": result.manifest.version,
        "tiers": [{"id": t.id, "quant": t.quant, "record_bytes": t.record_bytes} for t in result.manifest.tiers],
        "notes": result.notes,
        "banks_checked": result.banks_checked,
        "records_checked": result.records_checked,
        "bytes_checked": result.bytes_checked,
        "problem_count": result.problems.count,
        "problems": [problem.to_doc() for problem in result.problems.items],
        "seconds": round(result.seconds, 3),
    }


def verify_tables(doc):
    tables = []
    if doc["problems"]:
        rows = [["" if p["layer"] is None else p["layer"], "" if p["expert"] is None else p["expert"], p["field"], p["detail"]]
                for p in doc["problems"]]
        tables.append(Table(f"{doc['problem_count']} mismatch(es)", ["layer", "expert", "field", "detail"], rows, right_align=(0, 1)))
    return tables


def verify_notes(doc):
    against = f", slices against {doc['checked_against']}" if doc["checked_against"] else ""
    if doc.get("packer") == "fork":  # no sidecars; padding known only from the model's layout
        checks = "headers, bank sizes" + (f", padding{against}" if against else "")
    else:
        checks = "headers, padding, checksums" + against
    what = f"{doc['banks_checked']} banks, {doc['records_checked']} records, {format_size(doc['bytes_checked'])} ({checks})"
    if doc.get("notes"):
        what += "; " + "; ".join(doc["notes"])
    if doc.get("source_missing"):
        what += f"; source not found at {doc['source_missing']}: the container alone was checked (pass --model)"
    if doc["ok"]:
        return [f"OK: {doc['folder']}: {what}"]
    shown = len(doc["problems"])
    more = f" (first {shown} shown)" if shown < doc["problem_count"] else ""
    return [f"FAILED: {doc['problem_count']} mismatch(es){more} in {doc['folder']}: {what}"]


@click.command("container-verify", epilog=helptext.CONTAINER_VERIFY)
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--model", "model_path", type=click.Path(dir_okay=False),
              help="Source GGUF (any shard): also check every slice byte for byte against it.")
@click.option("--no-source", is_flag=True,
              help="Check the container alone, not against the source the manifest names (used when --model is not given).")
@click.option("--max-problems", default=100, show_default=True, type=click.IntRange(1), help="Mismatches listed (all are counted).")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False),
              help="Also check a plan file: every pin's \"tier\" and its \"default_tier\" must be in this container's ladder.")
@click.option("--json", "json_flag", is_flag=True, help="JSON output even on a terminal.")
def verify_command(folder, model_path, no_source, max_problems, plan_path, json_flag):
    """Check a container: manifest geometry, bank sizes, every record header field, zero padding,
    the xxh3 checksums and that every slice equals the source GGUF's bytes: the --model given, else
    the source where the manifest says it was encoded from, when it is still there (--no-source: not).

    Exit 0 when everything matches, 1 on any mismatch (each named by layer, expert and field),
    2 when the manifest is unreadable.
    """
    from moetools.container import core
    from moetools.progress import progress

    from moetools.container import tiered

    manifest = core.fmt.read_manifest(folder)
    if manifest.tiers:  # before any record is read: a missing bank is a broken container (exit 2)
        tiered.require_tier_banks(manifest, folder)
    plan_tiers = tiered.check_plan_tiers(plan_path, manifest) if plan_path else None
    source_missing = None
    if not model_path and not no_source:
        model_path, source_missing = core.recorded_source(manifest)
    model = _open_model(model_path, "container-verify --model") if model_path else None
    try:
        with progress(tiered.total_bytes(manifest), desc="container-verify") as bar:
            verify = tiered.verify_tiered if manifest.tiers else core.verify_container
            result = verify(folder, model, bar=bar, keep=max_problems, manifest=manifest)
    finally:
        if model is not None:
            model.close()
    doc = verify_doc(result, source_missing)
    if plan_tiers is not None:
        doc["plan"] = {"file": plan_path, "pins_with_tier": plan_tiers[0], "default_tier": plan_tiers[1]}
        doc["notes"] = doc["notes"] + [f"plan {plan_path}: tiers within the ladder"]
    render(doc, lambda: verify_tables(doc), json_flag, notes=verify_notes(doc))
    if not result.ok:
        click.get_current_context().exit(AnswerNo.exit_code)


# --- read --------------------------------------------------------------------------------------


def read_doc(reader, record):
    import xxhash

    from moetools.formats import container as fmt

    header = record.header
    manifest = reader.manifest
    layout = manifest.bank(record.layer)
    checksum_ok = None
    try:
        sums = fmt.read_checksums(os.path.join(reader.folder, manifest.checksum_file(record.layer)))
        if record.expert < len(sums.digests):
            checksum_ok = xxhash.xxh3_64_intdigest(record.record) == sums.digests[record.expert]
    except (OSError, MoeError):  # a missing or bad sidecar is reported as "unknown"; verify names it
        checksum_ok = None
    return {
        "layer": record.layer,
        "expert": record.expert,
        "tier": manifest.tier,
        "bank": reader.bank_path(record.layer),
        "offset": record.expert * manifest.record_bytes,
        "record_bytes": manifest.record_bytes,
        "header": {
            "layer": header.layer, "expert": header.expert, "fmt": header.fmt, "fmt_name": fmt.fork_fmt_name(header.fmt),
            "flags": header.flags, "codebook": header.codebook, "gate_off": header.gate_off, "up_off": header.up_off,
            "down_off": header.down_off, "corr_off": header.corr_off, "record_4k_blocks": header.record_4k_blocks,
        },
        "slices": [{"name": piece.name, "type": piece.type_name, "offset": piece.offset, "bytes": piece.n_bytes,
                    "xxh3": f"{xxhash.xxh3_64_intdigest(record.slices[piece.name]):016x}"} for piece in layout.slices],
        "checksum_ok": checksum_ok,
    }


def read_tables(doc):
    checksum = {True: "matches sidecar", False: "DIFFERS from sidecar", None: "no sidecar"}[doc["checksum_ok"]]
    rows = [["bank", doc["bank"]], ["offset", f"{doc['offset']:,}"], ["record bytes", f"{doc['record_bytes']:,}"],
            ["checksum", checksum]]
    rows += [[key, str(value)] for key, value in doc["header"].items()]
    slice_rows = [[s["name"], s["type"], f"{s['offset']:,}", f"{s['bytes']:,}", s["xxh3"]] for s in doc["slices"]]
    return [
        Table(f"layer {doc['layer']} expert {doc['expert']}", ["field", "value"], rows),
        Table("slices", ["slice", "type", "offset", "bytes", "xxh3"], slice_rows, right_align=(2, 3)),
    ]


@click.command("container-read", epilog=helptext.CONTAINER_READ)
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--layer", required=True, type=click.IntRange(0), help="Bank number N of experts-L{N}.bin: the GGUF block, or the MoE-layer ordinal in a --banks ordinal container.")
@click.option("--expert", required=True, type=click.IntRange(0), help="Expert id within the layer.")
@click.option("--matrix", type=click.Choice(["gate", "up", "down", "corrections", "gate_bias", "up_bias", "down_bias", "record"]),
              help="Write this slice's raw bytes (or the whole record) instead of describing the record. "
                   "corrections: a fork-packed record's FP16 corrections; *_bias: containers written by an earlier moetools kept expert biases.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="File for --matrix bytes (default stdout, never a terminal).")
@click.option("--tier", type=click.IntRange(0), help="Tier of a version-2 container (0 = sharpest, the default).")
@click.option("--direct", is_flag=True, help="Read with O_DIRECT, bypassing the page cache, as the serving fork does.")
@click.option("--json", "json_flag", is_flag=True, help="JSON output even on a terminal.")
def read_command(folder, layer, expert, matrix, output, tier, direct, json_flag):
    """Read one expert's record from a container with one aligned read: its header fields and each
    slice's type, offset, bytes and xxh3, or with --matrix the raw bytes of one slice.
    """
    from moetools import atomic
    from moetools.container.reader import ContainerReader

    atomic.check_output_folder(output, "-o")

    from moetools.container.tiered import require_tier_banks

    with ContainerReader(folder, direct=direct, tier=tier) as reader:
        if reader.manifest.tiers:
            require_tier_banks(reader.manifest, folder)
        record = reader.read_expert(layer, expert)
        if matrix is None:
            doc = read_doc(reader, record)
            render(doc, lambda: read_tables(doc), json_flag)
            if doc["checksum_ok"] is False:  # the record was read, and the answer is "it is not intact"
                click.get_current_context().exit(AnswerNo.exit_code)
            return
        data = record.record if matrix == "record" else record.slices.get(matrix)
        if data is None:
            raise UsageError(f"layer {layer} has no {matrix} slice (slices: {', '.join(record.slices)})")
    if output and output != "-":
        atomic.write_bytes(output, data)
        return
    if sys.stdout.isatty():
        raise UsageError("refusing to write binary bytes to a terminal: redirect stdout or use -o FILE")
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
