#!/bin/sh
# Build the KV probe against llama.cpp's own library (CPU only, unoptimised: it only allocates).
#   tests/llama_probe/build.sh /path/to/llama.cpp [BUILD_DIR]
# then: MOETOOLS_LLAMA_PROBE=BUILD_DIR/probe make test   (runs tests/test_devicefit_llama.py)
set -eu
SRC=$1
OUT=${2:-/tmp/moetools-llama-probe}
mkdir -p "$OUT"
cmake -S "$SRC" -B "$OUT" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O0 -DCMAKE_CXX_FLAGS="-O0 -g0" \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF > "$OUT/cmake.log"
make -C "$OUT" -j"$(nproc)" llama > "$OUT/build.log"
g++ -O0 -std=c++17 "$(dirname "$0")/probe.cpp" -I"$SRC/include" -I"$SRC/ggml/include" \
    "$OUT/src/libllama.a" "$OUT/ggml/src/libggml.a" "$OUT/ggml/src/libggml-cpu.a" "$OUT/ggml/src/libggml-base.a" \
    -lpthread -lgomp -ldl -o "$OUT/probe"
echo "$OUT/probe"
