"""device-fit's two runtimes side by side (--runtime auto): whether the streaming fork applies beside
upstream llama.cpp and why, one row per runtime, and the flags of one runtime that the other refuses or
warns about."""

from moetools.devicefit import core
from moetools.devicefit import devices as devicesmod
from moetools.devicefit.render import fork_line
from moetools.errors import GGUFError, UsageError
from moetools.output import ShellLine
from moetools.sizes import format_size


def fork_screen_lines(launch):
    """The fork's launch on the screen: a label, then the runnable `env ... llama-server ...` line as a
    ShellLine (broken between arguments with ` \\` at the terminal's width)."""
    line = fork_line(launch)
    return ["fork launch:", ShellLine(line[len("fork launch: "):])] if line else []


def runtime_rows(llama_doc, fork_doc):
    """One row per runtime for the same model and card (auto): what each fits, its speed, and why."""
    placement = llama_doc.get("placement") or {}
    cpu = next((device for device in llama_doc["devices"] if device["kind"] == "cpu"), None)
    if llama_doc["verdict"] == "unfittable":
        llama_why = "does not fit these devices"
    elif not placement["cpu_expert_layers"]:
        llama_why = f"-ngl {placement['ngl']}, every expert in VRAM"
    else:
        where = "read from RAM"
        if cpu is not None and not cpu["capacity_bytes"]:
            where = "assumed in RAM (no --ram)"
        elif cpu is not None and cpu["free_bytes"] < 0:
            where = "partly read from the drive (they exceed RAM)"
        llama_why = f"-ngl {placement['ngl']}, experts of {len(placement['cpu_expert_layers'])} layers on the CPU, {where}"
    if fork_doc["verdict"] == "unfittable":
        fork_why = "no division of " + fork_doc["devices"][0]["name"] + " holds it"
    elif fork_doc["experts_per_token"]:
        fork_why = (f"{fork_doc['resident_source']} resident, {fork_doc['slots']} of {fork_doc['total_slots']} experts "
                    f"cached in VRAM (coverage {fork_doc['coverage']:.2f}), misses streamed over PCIe")
    else:
        fork_why = "dense model: no experts to stream"
    rows = [{"runtime": "llama", "fits": llama_doc["verdict"] != "unfittable", "context": llama_doc["context"],
             "tok_s": llama_doc["tok_s"], "why": llama_why},
            {"runtime": "fork", "fits": fork_doc["verdict"] != "unfittable", "context": fork_doc["context"],
             "tok_s": fork_doc["tok_s"] if fork_doc["verdict"] != "unfittable" else 0.0, "why": fork_why}]
    fitting = [row for row in rows if row["fits"]]
    best = max(fitting, key=lambda row: row["tok_s"]) if fitting else None
    for row in rows:
        row["best"] = row is best
    return rows


def copy_settings(settings):
    """An independent KVSettings: a plan may set fields of its own (rs_seq) on the one it is given."""
    return settings.replace()


# the flags of one runtime that the other has no use for: (record field, flag as the user types it)
LLAMA_ONLY = (("ngl", "-ngl"), ("ts_text", "-ts"), ("n_cpu_moe", "--n-cpu-moe"), ("main_gpu", "-mg"), ("depth", "--depth"))


LLAMA_ONLY_SPEED = (("ram_bw", "--ram-bw"), ("threads", "--threads"))


LLAMA_ONLY_CHOICES = (("prefer", "--prefer"), ("spill", "--spill"))  # what the llama planner maximises, where it spills


FORK_ONLY = (("tiers_dir", "--tiers"), ("coverage_path", "--coverage"), ("coverage_policy", "--coverage-policy"),
             ("pin_tier", "--pin-tier"), ("default_tier", "--default-tier"), ("port", "--port"),
             ("observations_path", "--observations"), ("capture_path", "--capture"), ("trace_path", "--trace"),
             ("model_id", "--model-id"),
             ("storage_root", "--storage-root"))


FORK_ONLY_OUTPUTS = (("container", "--container"), ("plan_path", "--plan"))


def other_runtime_flags(runtime, placement, fork, outputs, machine):
    """Flags of the runtime not planned: upstream placement flags under the fork are refused (the fork
    would silently run its own division), the fork's inputs under llama and llama's speed inputs under
    the fork change nothing and get a warning each. Returns the warnings."""
    if runtime == "fork":
        for field, flag in LLAMA_ONLY:
            if getattr(placement, field) is not None:
                raise UsageError(f"{flag} is upstream llama.cpp's placement (--runtime llama): the fork chooses its own "
                                 f"division of one GPU and streams the experts; drop {flag} or use --runtime llama or auto")
        warnings = [f"{flag} is upstream llama.cpp's (its CPU experts' speed) and changes nothing under --runtime fork"
                    for field, flag in LLAMA_ONLY_SPEED if getattr(machine, field) is not None]
        return warnings + [f"{flag} chooses upstream llama.cpp's placement and changes nothing under --runtime fork"
                           for field, flag in LLAMA_ONLY_CHOICES if getattr(placement, field, None) is not None]
    if runtime == "llama":
        given = [flag for field, flag in FORK_ONLY if getattr(fork, field) is not None]
        given += [flag for field, flag in FORK_ONLY_OUTPUTS if getattr(outputs, field)]
        return [f"{flag} is the streaming fork's and changes nothing under --runtime llama (use --runtime fork or auto)"
                for flag in given]
    return []


def fork_reason(facts, model_path, fork, outputs, gpus, rpcs, ram_bytes, os_reserve, speculative=False):
    """Why the streaming fork applies to this model beside upstream llama.cpp (auto), or "" when it does
    not: its inputs are given, resident tiers are found, or the experts do not fit in RAM (upstream
    would then read them from the drive on every token). The fork streams into one local GPU: none with
    RPC devices, a draft, or a dense model."""
    if facts.dense or not gpus or rpcs or speculative:
        return ""
    given = [flag for field, flag in FORK_ONLY if getattr(fork, field) is not None]
    given += [flag for field, flag in FORK_ONLY_OUTPUTS if getattr(outputs, field)]
    if outputs.emit == "env":
        given.append("--emit env")
    if given:
        return "the fork's inputs are given (" + ", ".join(given) + ")"
    from moetools.devicefit.discovery import discover_tiers
    from moetools.formats.storage import device_fit_dir

    try:
        tiers, _ = discover_tiers(model_path, facts, None, device_fit_dir(core.model_stem(model_path), None))
    except (UsageError, GGUFError, OSError):
        tiers = []
    if tiers:
        return "resident tiers were found (" + ", ".join(tier.label for tier in tiers) + ")"
    experts = sum(facts.layer_expert_bytes.values())
    ram, source = (ram_bytes, "--ram") if ram_bytes else (devicesmod.host_ram_bytes(), "this machine's RAM")
    if ram and experts > ram - (os_reserve or 0):
        return (f"its experts ({format_size(experts)}) do not fit in {source} ({format_size(ram)} less the OS reserve): "
                "upstream llama.cpp would read them from the drive")
    return ""
