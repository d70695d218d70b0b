#!/bin/sh
# The device-fit pipeline, ready to copy:
#   1. resident tiers      moetools quantize MODEL --resident-only --type q4_0,q8_0
#                          (writes device-fit/<stem>/*.resident.json beside the model)
#   2. a coverage curve    moetools trace-tail TRACE --curve --json > curve.json
#   3. the division        moetools device-fit MODEL --vram 32G --tiers DIR --coverage curve.json --plan PLAN
#   4. launch settings     moetools device-fit ... --emit env   (the fork)   /   --emit llama   (upstream)
#
# Usage: examples/pipeline.sh [MODEL] [TRACE]
#   MODEL  any shard of a GGUF model (default: the built-in K3-class example, `make example`)
#   TRACE  an expert trace written by the fork (GGML_MOE_TRACE_FILE, 12-byte records; its keys are
#          mapped to layers with MODEL) or a route_trace CSV of the same model; without one,
#          device-fit uses the uniform coverage floor.
# Environment: VRAM (default 32G), CTX (default: the model's training context), RAM (optional host RAM),
#              MOETOOLS (default: moetools), OUT (default: the model's folder),
#              TIER_TYPES (default q4_0,q8_0; `none` plans the native resident weights only, skipping step 1).
#
# Rerunnable: tiers already in device-fit/<stem>/ are reused (delete the folder to rebuild them).
# Note: on the built-in example, which is a header-only sparse file, quantize reads holes and writes
# real resident GGUFs (several GiB per tier, minutes of work); try a real model or one of
# ../shared/models first.
set -eu

MODEL=${1:-examples/out/kimi-k3/kimi-k3-00001-of-00014.gguf}
TRACE=${2:-}
VRAM=${VRAM:-32G}
TIER_TYPES=${TIER_TYPES:-q4_0,q8_0}
MOETOOLS=${MOETOOLS:-moetools}
DIR=$(dirname "$MODEL")
OUT=${OUT:-$DIR}
STEM=$(basename "$MODEL" .gguf | sed 's/-[0-9]\{5\}-of-[0-9]\{5\}$//')
TIERS="$DIR/device-fit/$STEM"
PLAN="$OUT/$STEM.plan.json"
CURVE="$OUT/$STEM.curve.json"

has() { $MOETOOLS "$1" --help >/dev/null 2>&1; }
say() { printf '== %s\n' "$*" >&2; }

if [ ! -e "$MODEL" ]; then
    echo "no model at $MODEL (run 'make example' for the built-in one)" >&2
    exit 2
fi

set -- --vram "$VRAM"
[ -n "${CTX:-}" ] && set -- "$@" --ctx "$CTX"
[ -n "${RAM:-}" ] && set -- "$@" --ram "$RAM"

if [ "$TIER_TYPES" = none ]; then
    say "skipped resident tiers (TIER_TYPES=none): native resident weights only"
elif ls "$TIERS"/*.resident.json >/dev/null 2>&1; then
    say "resident tiers: reusing $TIERS"
elif has quantize; then
    say "resident tiers: $MOETOOLS quantize $MODEL --resident-only --type $TIER_TYPES"
    $MOETOOLS quantize "$MODEL" --resident-only --type "$TIER_TYPES" --json > /dev/null
else
    say "skipped resident tiers: '$MOETOOLS quantize' is not installed"
fi
if [ "$TIER_TYPES" != none ] && [ -d "$TIERS" ]; then
    set -- "$@" --tiers "$TIERS"
fi

if [ -n "$TRACE" ]; then
    if has trace-tail; then
        # --model maps the fork's tensor keys to layers (and checks a CSV is of this model); -o writes
        # the curve atomically, so a failed step leaves no empty or partial curve file behind.
        say "coverage curve: $MOETOOLS trace-tail $TRACE --model $MODEL --curve -o $CURVE"
        $MOETOOLS trace-tail "$TRACE" --model "$MODEL" --curve --json -o "$CURVE" > /dev/null
        set -- "$@" --coverage "$CURVE"
    else
        say "skipped the coverage curve: '$MOETOOLS trace-tail' is not installed (uniform floor instead)"
    fi
else
    say "no trace given: device-fit predicts with the uniform coverage floor"
fi

say "division: $MOETOOLS device-fit $MODEL $* --plan $PLAN"
status=0
$MOETOOLS device-fit "$MODEL" "$@" --plan "$PLAN" || status=$?
if [ "$status" -ne 0 ]; then
    say "device-fit answered no (exit $status): the model does not fit this card"
    exit "$status"
fi

say "launch settings for the expert-streaming fork"
$MOETOOLS device-fit "$MODEL" "$@" --plan "$PLAN" --emit env 2>/dev/null
say "launch settings for upstream llama.cpp"
$MOETOOLS device-fit "$MODEL" "$@" --emit llama 2>/dev/null
