"""device-fit's speed model: decode (decode.py), prompt processing (prompt.py), the streaming fork
(fork.py) and the figures they rest on (settings.py)."""

from moetools.devicefit.speed.decode import cpu_rate, decode_time, hops, numa_factor
from moetools.devicefit.speed.fork import fork_tok_s
from moetools.devicefit.speed.settings import SpeedSettings, assumptions

__all__ = ["SpeedSettings", "assumptions", "cpu_rate", "decode_time", "fork_tok_s", "hops", "numa_factor"]
