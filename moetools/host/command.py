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
def host_command(disk_path, output_path):
    """Describe this machine as JSON: each GPU (VRAM, memory bandwidth, PCIe link), the CPU and the
    threads llama.cpp would use, RAM with a measured read bandwidth, and optionally a drive's read
    rate. `device-fit MODEL --host FILE` plans for the machine a profile describes.

    Takes about two seconds (the RAM test reads 1 GiB for about half a second; --disk adds up to
    six). Exit 0, or 2 when the machine cannot be read or FILE cannot be written.
    """
    from moetools.atomic import check_output_folder
    from moetools.formats import host_profile
    from moetools.host.probe import probe
    from moetools.output import info, warn

    check_output_folder(output_path, "-o")
    profile, notes = probe(disk_path)
    for note in notes:
        warn(note)
    if output_path and output_path != "-":
        host_profile.dump(profile, output_path)
        gpus = ", ".join(gpu["name"] for gpu in profile["gpus"]) or "no GPU"
        info(f"host profile of {profile['hostname']} written to {output_path}: {gpus}; {profile['cpu']['threads']} "
             f"threads; RAM read {profile['ram']['read_bytes_per_s'] / 1e9:.1f} GB/s")
    else:
        click.echo(host_profile.dumps(profile), nl=False)
