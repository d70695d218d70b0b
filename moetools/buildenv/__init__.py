"""`moetools build-env`: find what a CUDA build of llama.cpp needs and print its environment."""
