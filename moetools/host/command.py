"""`moetools host`: this machine as a host profile (JSON), for `device-fit --host FILE` anywhere.

    moetools host -o host.json                  # on the server: GPUs, CPU, RAM with a measured read rate
    moetools host --disk /models -o host.json   # and the read rate of the drive holding /models
    moetools device-fit model.gguf --host host.json   # on a laptop: plan for the server
"""

import click

from moetools import helptext


@click.command("host", epilog=helptext.HOST)
@click.option("--disk", "disk_path", metavar="PATH", type=click.Path(exists=True),
              help="Also measure the sequential read rate of the drive holding PATH (a large file there is read; "
                   "for a folder or a small file, a temporary file of up to 1 GiB is written there, read back "
                   "past the page cache and deleted). At most a few seconds.")
@click.option("-o", "--output", "output_path", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the profile to FILE (atomically) instead of stdout.")
@click.option("--calibrate", "bench_paths", multiple=True, metavar="BENCH.json", type=click.Path(exists=True, dir_okay=False),
              help="Fit this host's speed efficiencies to llama-bench runs (`llama-bench -o json`, repeatable) and "
                   "keep them in the profile with the runs: device-fit --host then predicts with them.")
@click.option("--profile", "profile_path", metavar="FILE", type=click.Path(exists=True, dir_okay=False),
              help="With --calibrate: the profile to calibrate (default: this machine, probed now).")
@click.option("--models", "model_dirs", multiple=True, metavar="DIR", type=click.Path(exists=True, file_okay=False),
              help="With --calibrate: folders where the runs' models are, when not at the paths llama-bench wrote.")
def host_command(disk_path, output_path, bench_paths, profile_path, model_dirs):
    """Describe this machine as JSON: each GPU (VRAM, memory bandwidth, PCIe link), the CPU and the
    threads llama.cpp would use, RAM with a measured read bandwidth, and optionally a drive's read
    rate. `device-fit MODEL --host FILE` plans for the machine a profile describes.

    Takes about two seconds (the RAM test reads 1 GiB for about half a second; --disk adds up to
    six). With --calibrate, the profile also holds this host's speed efficiencies fitted to its own
    llama-bench runs. Exit 0, or 2 when the machine cannot be read, FILE cannot be written, or no run
    can be used (each run left out is named).
    """
    from moetools.atomic import check_output_folder
    from moetools.formats import host_profile
    from moetools.host.probe import probe
    from moetools.output import info, warn

    check_output_folder(output_path, "-o")
    if (profile_path or model_dirs) and not bench_paths:
        from moetools.errors import UsageError

        raise UsageError("--profile and --models go with --calibrate BENCH.json")
    if profile_path:
        profile = host_profile.load(profile_path)
    else:
        profile, notes = probe(disk_path)
        for note in notes:
            warn(note)
    if bench_paths:
        from moetools.host.calibrate import calibrate

        profile = calibrate(profile, bench_paths, model_dirs, warn, profile_path or "this machine")
        record = profile["calibration"]
        info(f"calibrated on {len(record['runs'])} llama-bench run(s): "
             + ", ".join(f"{name} {value:.3g}" for name, value in record["efficiencies"].items())
             + "; mean error " + ", ".join(f"{kind} {record['error_default'][kind]['mean_abs']:.0%} -> "
                                          f"{stats['mean_abs']:.0%}" for kind, stats in record["error_calibrated"].items()))
    if output_path and output_path != "-":
        host_profile.dump(profile, output_path)
        gpus = ", ".join(gpu["name"] for gpu in profile["gpus"]) or "no GPU"
        info(f"host profile of {profile['hostname']} written to {output_path}: {gpus}; {profile['cpu']['threads']} "
             f"threads; RAM read {profile['ram']['read_bytes_per_s'] / 1e9:.1f} GB/s")
    else:
        click.echo(host_profile.dumps(profile), nl=False)
