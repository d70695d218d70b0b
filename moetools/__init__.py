"""moetools: tools for running Mixture-of-Experts models bigger than the GPU."""

__version__ = "0.2.0"
