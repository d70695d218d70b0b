"""Progress bars on a terminal only: tqdm on stderr when it is a tty, silence in pipes and CI."""

import sys


class _Silent:
    """Stands in for tqdm where no bar should show; same calls, no output."""

    def __init__(self, total=None, **_kwargs):
        self.total = total
        self.n = 0

    def update(self, amount=1):
        self.n += amount

    def set_postfix_str(self, *_args, **_kwargs):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def progress(total=None, desc="", unit="B", enabled=None):
    """A progress bar for `total` units; bytes are shown scaled (KiB/MiB/GiB) when unit is "B"."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return _Silent(total=total)
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit == "B",
        unit_divisor=1024 if unit == "B" else 1000,
        file=sys.stderr,
        leave=False,
        dynamic_ncols=True,
    )
