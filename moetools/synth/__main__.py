"""`python -m moetools.synth PRESET OUT.gguf [--shards N]`."""

from moetools.synth.presets import main

if __name__ == "__main__":
    main()
