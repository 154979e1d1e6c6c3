#!/usr/bin/env bash
# Every row of bench/TARGETS.md in one run, for a GPU machine whose time is short: clkit
# bench on the target shapes only (`--shapes`), then bench/torch_peer.py on the same shapes
# beside each CSV. Files go to DIR: NAME.csv (clkit) and NAME.log (its stderr), NAME-peer.csv
# (merged with the peers) and NAME-peer.log (their tables and errors). Prints the tables.
# Usage, from the project root (on the GPU machine after `source .gpu/env.sh`, with
# CLKIT_DEVICE naming the GPU): bench/targets.sh DIR [NAME...]   (default: every row)
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: bench/targets.sh DIR [NAME...]" >&2; exit 2; }
out=$1
shift
clkit=${CLKIT:-build/tools/clkit}
mkdir -p "$out" || exit 1

# NAME OP DTYPE SHAPES: one row of TARGETS.md (grayscale runs u8 beside f32, as clkit bench does)
rows="add add f32 67108864
softmax softmax f32 4096x256,4096x1024,4096x4096,4096x12672,4096x32768
dropout dropout f32 67108864
grayscale grayscale f32 1066x1600
matmul-f32 matmul f32 1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192
matmul-f16 matmul f16 4096x4096x4096
layernorm-f16 layernorm f16 4096x8192
layernorm-f32 layernorm f32 4096x8192
attention-f32 attention f32 32x4x1024x128.causal
attention-f16 attention f16 8x16x4096x64.causal
attention-bf16-d128 attention bf16 4x16x4096x128.causal
attention-f16-d128 attention f16 4x16x4096x128
attention-sweep-d64 attention f16 16x16x1024x64,8x16x2048x64,4x16x4096x64,2x16x8192x64,1x16x16384x64
attention-sweep-d128 attention f16 16x16x1024x128,8x16x2048x128,4x16x4096x128,2x16x8192x128,1x16x16384x128
decode-f16 attention f16 8x32x32768x128.q1.kv8
matmul-shapes-f16 matmul f16 1x4096x4096,16x4096x4096,128x4096x4096,1024x1024x1024,2048x2048x2048,4096x4096x4096
matmul-shapes-bf16 matmul bf16 1x4096x4096,16x4096x4096,128x4096x4096,1024x1024x1024,2048x2048x2048,4096x4096x4096
matmul-skinny-f32 matmul f32 1x4096x4096,16x4096x4096,128x4096x4096
matmul-llm-f16 matmul f16 8192x8192x28672,8192x28672x8192
lce-f16 linear_cross_entropy f16 32768x384x32768,8192x4096x128256"

status=0
while read -r name op dtype shapes; do
  [ $# -eq 0 ] || [[ " $* " == *" $name "* ]] || continue
  if ! "$clkit" bench --op "$op" --dtype "$dtype" --shapes "$shapes" --csv > "$out/$name.csv" 2> "$out/$name.log"; then
    echo "$name: clkit bench failed (see $out/$name.log)"
    status=1
    continue
  fi
  python3 bench/torch_peer.py --op "$op" --dtype "$dtype" --shapes "$shapes" --clkit "$out/$name.csv" \
    --out "$out/$name-peer.csv" 2>&1 | tee "$out/$name-peer.log" || status=1
done <<< "$rows"
exit $status
