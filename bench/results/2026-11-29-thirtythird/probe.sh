#!/bin/bash
# wgmma throughput probe: SS / RS forms at the attention kernels' shapes
cd "$(dirname "$0")/../.."
:
P() { .gpu/scripts/wgprobe cl "$1" "-DWGS=${2} -DN1=$3 -DC1=$4 -DRS1=$5 -DN2=$6 -DC2=$7 -DTMAB=${10:-0}" "$8" $9; }
P ss64x8            2 64 8 0 0 0 2 128
P ss64x8-1pc        2 64 8 0 0 0 1 128
P ss128x8           2 128 8 0 0 0 2 128
P ss256x4           2 256 4 0 0 0 1 168
P rs64x8            2 64 8 1 0 0 2 128
P rs128x8           2 128 8 1 0 0 2 128
P fwd128:ss64x8+rs128x4   2 64 8 0 128 4 2 128
P fwd128:ss128x8+rs128x8  2 128 8 0 128 8 1 168
P fwd128-rs:rs64x8+rs128x4 2 64 8 1 128 4 2 128
P fwd128-4wg:ss64x8+rs128x4 4 64 8 0 128 4 1 128
P fwd64:ss128x4+rs64x8    2 128 4 0 64 8 2 128
P dq64:ss64x8+rs64x4      2 64 8 0 64 4 2 128
P dq64-rs:rs64x8+rs64x4   2 64 8 1 64 4 2 128
P dkdv64:ss128x8+rs64x16  1 128 8 0 64 16 2 255
