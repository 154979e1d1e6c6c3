#!/usr/bin/env bash
# Assembles the NVIDIA tensor-core kernels offline, as the recipe of shared/gpu/NVIDIA-PTX.md
# does: clang-19 (OpenCL C with inline PTX -> PTX, libclc-19's builtins linked in), then
# ptxas for sm_80 and sm_90. Catches a broken fast path without a GPU: PTX syntax, operand
# constraints, registers and spills (printed per kernel). The configurations are the
# tensor-core tiles of host/ops/matmul.c (its mma_shapes table in both 16-bit dtypes, its
# tf32_shapes table with f32 operands, TF32 and 3xTF32) in every operand layout, linear +
# cross-entropy's fused tiles (host/ops/cross_entropy.c) with their epilogues, and those of host/ops/attention.c
# (mma_fwd, mma_dkdv, mma_dq in both 16-bit dtypes; their _f32 tables in f32) for each head dim
# they serve whose tiles fit the architecture's local memory, and its wgmma_fwd tiles for sm_90a (loaded by cp.async and by the TMA);
# and softmax's and layer norm's
# warp-shuffle builds. Prints "nvptx-compile: N passed, M failed"; exits nonzero on any failure.
# Usage: tests/compile_nvptx.sh [CLANG=clang-19] [SHARD/SHARDS=0/1]: with a shard, only every
# SHARDS-th build from the SHARD-th (0-based) runs, so that that many processes share the
# builds (.ci/run runs two, one a core); their counts add up.
set -u
clang=${1:-clang-19}
IFS=/ read -r shard shards <<<"${2:-0/1}"
[[ "$shard" =~ ^[0-9]+$ && "$shards" =~ ^[1-9][0-9]*$ && "$shard" -lt "$shards" ]] ||
  { echo "bad shard '${2:-}' (SHARD/SHARDS, SHARD < SHARDS)"; exit 2; }
builds=0
root=$(cd "$(dirname "$0")/.." && pwd)
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
libclc=/usr/lib/clc/nvptx64--nvidiacl.bc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
[ -x "$ptxas" ] || { echo "ptxas not found (CUDA toolkit)"; fail=1; }
[ -f "$libclc" ] || { echo "$libclc not found (Debian package libclc-19)"; fail=1; }


# table FILE NAME: the rows of the array NAME ("NAME[..] = {{1, 2}, ..};", over one line or
# more) in FILE, one a line
table() {
  awk -v start="$2\\[" 'index($0, "};") && f {print; exit} $0 ~ start && /= \{/ {f = 1} f {print; if (index($0, "};")) exit}' "$1" |
    grep -o '{[0-9, ]*}' | tr -d '{} '
}

# local_limit SM: bytes of static __local a kernel may declare (host/context.c:
# local_mem_static): 226 KiB on sm_90, 48 KiB before
local_limit() { [ "${1%a}" -ge 90 ] && echo $((226 * 1024)) || echo 49152; }

# only_static_local SM: whether ptxas's only complaint in $out is static __local beyond its
# own 48 KiB (0xc000) where the sm_90 driver accepts up to local_limit: it has assembled the
# kernel and counted its registers by then.
only_static_local() {
  local errors shared
  errors=$(echo "$out" | grep -c "ptxas error")
  shared=$(echo "$out" | grep -o "too much shared data (0x[0-9a-f]*" | grep -o "0x[0-9a-f]*$" |
    while read -r n; do [ "$((n))" -le "$(local_limit "$1")" ] && echo ok; done | grep -c ok)
  [ "${1%a}" -ge 90 ] && [ "$errors" -gt 0 ] && [ "$errors" = "$shared" ]
}

# register_caps PTX: ".maxnreg N" on each entry whose body holds a "//@maxnreg N" mark, as the
# host's rebuild places it (host/program.c: clkit_ptx_register_caps)
register_caps() {
  awk 'NR == FNR { if (/\.entry/) e++; if (match($0, /\/\/@maxnreg [0-9]+/)) cap[e] = substr($0, RSTART + 11, RLENGTH - 11); next }
       /\.entry/ { f++ } /^\{/ && (f in cap) && !(f in done) { print ".maxnreg " cap[f]; done[f] = 1 } { print }' "$1" "$1" > "$1.capped" &&
    mv "$1.capped" "$1"
}

# build NAME SM FILE OPTIONS...: one clang + ptxas run, each kernel's resources on success.
# SM 90a: built for sm_90 as the driver builds it, then the PTX retargeted as the host does
# (host/program.c: the "//@90a " marks of cl/nv/mma.h removed, .target sm_90a, register caps) and
# assembled for sm_90a, where ptxas also reports wgmma it had to serialise.
build() {
  local name=$1 sm=$2 file=$3
  shift 3
  builds=$((builds + 1))
  [ $(((builds - 1) % shards)) -eq "$shard" ] || return 0
  if out=$("$clang" -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -O2 -Wno-linker-warnings \
        -Xclang -target-cpu -Xclang "sm_${sm%a}" -Xclang -target-feature -Xclang +ptx80 \
        -Xclang -finclude-default-header -Xclang -mlink-builtin-bitcode -Xclang "$libclc" \
        -I "$root/cl" -D CLKIT_WARP=32 -D CLKIT_NV_SM="${sm%a}" "$@" -S "$root/cl/$file" \
        -o "$tmp/k.ptx" 2>&1) &&
     { [ "$sm" != 90a ] || { sed -i -e 's#//@90a ##' -e 's/^\.target sm_90\([^0-9a-z]\|$\)/.target sm_90a\1/' "$tmp/k.ptx" &&
                               register_caps "$tmp/k.ptx"; }; } &&
     { out=$("$ptxas" -arch="sm_$sm" -v "$tmp/k.ptx" -o "$tmp/k.cubin" 2>&1) || only_static_local "$sm"; }; then
    pass=$((pass + 1))
    built="$(echo "$out" | grep -A3 "entry function '\(matmul_skinny\|[a-z_]*mma\|softmax_[a-z]*\|layernorm_[a-z_]*\)'" |
      grep -o "function '[a-z_]*'\|[0-9]* bytes spill stores\|Used [0-9]* registers\|wgmma[a-z._]* instructions are serialized" |
      sed "s/function '\(.*\)'/\1:/" | paste -sd ' ')"
    echo "sm_$sm $name: $built"
  else
    fail=$((fail + 1))
    echo "FAIL sm_$sm $name $*"
    echo "$out" | head -20
  fi
}

# matmul TABLE DTYPE: each tile of host/ops/matmul.c's TABLE with DTYPE operands (F16, or F32
# through TF32 and through 3xTF32) in every operand layout into f32, for sm_80 and sm_90; F16 tiles also bf16 -> bf16
matmul() {
  local tiles tile splits
  tiles=$(table "$root/host/ops/matmul.c" "$1")
  [ -n "$tiles" ] || { echo "no $1 table in host/ops/matmul.c"; fail=$((fail + 1)); }
  for s in $tiles; do
    IFS=, read -r bm bn bk wm wn st <<<"$s"
    tile="-D KERNEL=4 -D BLOCK_M=$bm -D BLOCK_N=$bn -D BLOCK_K=$bk -D WARPS_M=$wm -D WARPS_N=$wn -D STAGES=$st -D GROUP_M=8"
    for sm in 80 90; do
      [ "$((st * (bm + bn) * bk * $([ "$2" = F32 ] && echo 4 || echo 2)))" -le "$(local_limit "$sm")" ] || continue
      for layout in "1 0" "1 1" "0 0" "0 1"; do
        read -r ak bn_ <<<"$layout"
        # split-K in the first layout only (the epilogue is all it changes)
        splits=("")
        [ "$layout" = "1 0" ] && splits+=("-D SPLIT_K=1")
        for math in $([ "$2" = F32 ] && echo "TF32 TF32X3" || echo "$2"); do
          for split in "${splits[@]}"; do
            # shellcheck disable=SC2086,SC2046 # $tile is a list of flags; the TF32 flags too
            build "${bm}x${bn}x${bk} w${wm}x${wn} s$st $math A_KMAJOR=$ak B_NMAJOR=$bn_ $split" "$sm" nv/matmul_mma.cl \
              $tile -D A_DTYPE="$2" -D B_DTYPE="$2" -D C_DTYPE=F32 -D A_KMAJOR="$ak" -D B_NMAJOR="$bn_" \
              $([ "$2" = F32 ] && echo -D MMA_TF32) $([ "$math" = TF32X3 ] && echo -D TF32X3) $split
          done
        done
      done
      [ "$2" = F16 ] || continue
      # shellcheck disable=SC2086
      build "${bm}x${bn}x${bk} w${wm}x${wn} s$st bf16>bf16" "$sm" nv/matmul_mma.cl $tile -D A_DTYPE=BF16 \
        -D B_DTYPE=BF16 -D C_DTYPE=BF16 -D A_KMAJOR=1 -D B_NMAJOR=1 -D MMA_BF16
    done
  done
}
matmul mma_shapes F16
matmul tf32_shapes F32
# Each wgmma tile of host/ops/matmul.c (BLOCK_M, BLOCK_N, STAGES, speed; BLOCK_K 64, a
# warpgroup per 64 rows) in every operand layout, f16 into f32 and bf16 into bf16, loaded by
# cp.async, by the TMA and by cp.async with K split, for sm_90a; each 6-stage tile also on the
# deepest ring host/ops/matmul.c's deepen gives it (up to 12 stages within 226 KiB)
for s in $(table "$root/host/ops/matmul.c" wgmma_shapes); do
  IFS=, read -r bm bn st0 _ <<<"$s"
  deep=12
  while [ $((deep * (bm + bn) * 128 + 1024)) -gt $((226 * 1024)) ]; do deep=$((deep - 1)); done
  for st in $st0 $([ "$st0" = 6 ] && echo $deep); do
  for layout in "1 0" "1 1" "0 0" "0 1"; do
    read -r ak bn_ <<<"$layout"
    for dt in F16 BF16; do
      for tma in "" "-D TMA=1" "-D SPLIT_K=1"; do
        # shellcheck disable=SC2046,SC2086 # one flag or none
        build "wgmma ${bm}x${bn}x64 s$st $dt A_KMAJOR=$ak B_NMAJOR=$bn_ $tma" 90a nv/matmul_mma.cl -D KERNEL=4 -D WGMMA=1 \
          -D BLOCK_M="$bm" -D BLOCK_N="$bn" -D BLOCK_K=64 -D WARPS_M=$((bm / 16)) -D WARPS_N=1 -D STAGES="$st" \
          -D GROUP_M=8 -D A_DTYPE="$dt" -D B_DTYPE="$dt" -D C_DTYPE=$([ "$dt" = F16 ] && echo F32 || echo BF16) \
          -D A_KMAJOR="$ak" -D B_NMAJOR="$bn_" $([ "$dt" = BF16 ] && echo -D MMA_BF16) $tma
      done
    done
  done
  done
done
# The skinny kernel (portable, with NVIDIA's streaming loads of B): both ways of reading B,
# each operand dtype, 1, 8 and 16 rows, the wide shapes and the narrow one (4 x 128 lanes), the
# vector loads and the element-wise ones.
for sm in 80 90; do
  for dt in F32 F16 BF16; do
    for shape in "32 8 1 0" "8 16 16 1" "4 128 8 0" "4 128 1 1"; do
      read -r cols lanes rows kmajor <<<"$shape"
      for vec in 2 0; do
        build "skinny ${cols}x${lanes} m$rows $dt SK_KMAJOR=$kmajor VEC_B=$vec" "$sm" matmul.cl -D KERNEL=3 \
          -D SK_COLS="$cols" -D SK_K="$lanes" -D SK_M="$rows" -D SK_LOADS=8 -D A_DTYPE="$dt" -D B_DTYPE="$dt" \
          -D C_DTYPE="$dt" -D SK_KMAJOR="$kmajor" -D VEC_B="$vec" -D A_UNIT="$vec"
      done
    done
  done
done
# The fused GEMMs of linear + cross-entropy: each tile of host/ops/cross_entropy.c's
# fused_tiles and its token_tiles (each tile once) with each CE epilogue (x k-contiguous times W^T, k-contiguous), f16 and bf16,
# plain and with bias and soft-capping, the statistics epilogue also storing the logits (token
# chunks); wgmma tiles for sm_90a only, loaded by cp.async and by the TMA
for epi in EPI_CE_STATS EPI_CE_GRAD "EPI_CE_STATS -D CE_STORE"; do
  for s in $({ table "$root/host/ops/cross_entropy.c" fused_tiles; table "$root/host/ops/cross_entropy.c" token_tiles; } | sort -u); do
    IFS=, read -r bm bn bk wm wn st wg <<<"$s"
    for sm in $([ "$wg" = 1 ] && echo 90a || echo 80 90); do
      [ "$((st * (bm + bn) * bk * 2))" -le "$(local_limit "$sm")" ] || continue
      for dt in F16 BF16; do
        for opts in "" "-D CE_BIAS -D CE_CAP"; do
          for tma in "" "-D TMA=1"; do
            [ "$wg" = 1 ] || [ -z "$tma" ] || continue
            # shellcheck disable=SC2046,SC2086 # one flag or none; epi, opts and tma are lists of flags
            build "lce ${bm}x${bn}x${bk} w${wm}x${wn} s$st $dt $epi $opts $tma" "$sm" nv/matmul_mma.cl -D KERNEL=4 \
              -D BLOCK_M="$bm" -D BLOCK_N="$bn" -D BLOCK_K="$bk" -D WARPS_M="$wm" -D WARPS_N="$wn" \
              -D STAGES="$st" -D GROUP_M=8 -D A_DTYPE="$dt" -D B_DTYPE="$dt" -D C_DTYPE="$dt" \
              -D A_KMAJOR=1 -D B_NMAJOR=0 -D $epi $opts $([ "$dt" = BF16 ] && echo -D MMA_BF16) \
              $([ "$wg" = 1 ] && echo -D WGMMA=1) $tma
          done
        done
      done
    done
  done
done
# attention TABLE DTYPES...: each tile (BLOCK_M, BLOCK_N, WARPS, largest head dim or 0, held
# rows in local memory) of host/ops/attention.c's table mma_TABLE for every head dim it serves
# whose program's local memory (cl/nv/attention_mma.cl: the held tiles, or the streamed stages with
# dK/dV's lse and delta, or both with HELD_LOCAL) fits the architecture's local_limit, in each
# dtype, for sm_80 and sm_90
attention() {
  local table=$1 kind=${1%_f32} tiles bytes es kernel
  shift
  kernel=$([ "$kind" = fwd ] && echo fwd || echo "bwd_$kind")
  tiles=$(table "$root/host/ops/attention.c" "mma_$table")
  [ -n "$tiles" ] || { echo "no mma_$table table in host/ops/attention.c"; fail=$((fail + 1)); }
  for t in $tiles; do
    IFS=, read -r bm bn w maxd held_local <<<"$t"
    for d in 16 32 64 128; do
      [ "$maxd" = 0 ] || [ "$d" -le "$maxd" ] || continue
      for dt in "$@"; do
        es=$([ "$dt" = F32 ] && echo 4 || echo 2)
        if [ "$kind" = fwd ]; then held=$((bm * d * es)) streamed=$((2 * bn * d * es))
        else held=$((2 * bm * d * es)) streamed=$((4 * bn * d * es + 16 * bn)); fi
        if [ "$held_local" = 1 ]; then bytes=$((held + streamed))
        else bytes=$((held > streamed ? held : streamed)); fi
        for sm in 80 90; do
          [ "$bytes" -le "$(local_limit "$sm")" ] || continue
          built=""
          # shellcheck disable=SC2046 # one flag or none
          build "attention $kind ${bm}x${bn} w$w d$d $dt$([ "$held_local" = 1 ] && echo " held-local")" "$sm" \
            nv/attention_mma.cl -D "DTYPE_$dt" -D "ATTN_$([ "$kind" = fwd ] && echo FWD || echo BWD)" \
            -D HEAD_DIM="$d" -D BLOCK_M="$bm" -D BLOCK_N="$bn" -D WARPS="$w" \
            $([ "$held_local" = 1 ] && echo -D HELD_LOCAL)
          # The f32 tables promise tiles that spill at most MMA_F32_SPILL bytes on sm_90, where
          # they were timed (host/ops/attention.c); sm_80's counts are shown.
          spill=$(echo "$built" | sed -n "s/.*attn_${kernel}_mma: \([0-9]*\) bytes spill.*/\1/p")
          if [ "$sm" = 90 ] && [ "$table" != "$kind" ] && [ -n "$built" ] && [ "${spill:-0}" -gt "$f32_spill" ]; then
            echo "FAIL: attention $kind ${bm}x${bn} d$d $dt spills $spill bytes, but mma_$table lists it"
            pass=$((pass - 1)) fail=$((fail + 1))
          fi
        done
      done
    done
  done
}
# attention_wgmma TABLE PASS VARIANTS KERNELS [HEAD_DIMS]: each tile (BLOCK_M, BLOCK_N, WARPS,
# largest head dim, -) of host/ops/attention.c's TABLE for the head dims it serves (those above
# the previous tile's, or the previous tile's own where both end at the same head dim: a
# fallback; of HEAD_DIMS only, default 64 128 256), in each 16-bit dtype, for sm_90a, once a
# variant ("-" for none, else macros joined by "+"), the forward up to head
# dim 128 with the stagger of an H100's or H200's 132 units, as the host builds it. A build whose
# wgmma ptxas serialises (it does so where it cannot prove that no other instruction touches an
# in-flight wgmma's registers) fails: it would run, slowly. So does one where a kernel the table
# serves (KERNELS) takes more registers than a compute unit's 64 K hold for its work-group: it
# would not launch (the host would fall back to a smaller tile).
attention_wgmma() {
  local tiles lo=32 hi=32 d
  tiles=$(table "$root/host/ops/attention.c" "$1")
  [ -n "$tiles" ] || { echo "no $1 table in host/ops/attention.c"; fail=$((fail + 1)); }
  for t in $tiles; do
    IFS=, read -r bm bn w maxd _ <<<"$t"
    [ "$maxd" -gt "$hi" ] && lo=$hi hi=$maxd
    for d in ${5:-64 128 256}; do
      [ "$d" -gt "$lo" ] && [ "$d" -le "$maxd" ] || continue
      for dt in F16 BF16; do
        for variant in $3; do
          built=""
          # shellcheck disable=SC2046 # one flag or none
          build "attention $2 wgmma ${bm}x${bn} w$w d$d $dt $variant" 90a nv/attention_mma.cl -D "DTYPE_$dt" \
            -D "ATTN_$2" -D WGMMA -D HEAD_DIM="$d" -D BLOCK_M="$bm" -D BLOCK_N="$bn" -D WARPS="$w" \
            $([ "$variant" = - ] || echo "$variant" | tr '+' '\n' | sed 's/^/-D /') \
            $([ "$2" = FWD ] && [ "$d" -le 128 ] && echo -D STAGGER_FROM=132 -D STAGGER_TO=264)
          if [[ "$built" == *serialized* ]]; then
            echo "FAIL: attention $2 wgmma ${bm}x${bn} d$d $dt $variant: ptxas serialised its wgmma"
            pass=$((pass - 1)) fail=$((fail + 1))
          fi
          for k in $4; do
            regs=$(echo "$built" | grep -o "$k: [a-z0-9 ]*Used [0-9]* registers" | grep -o "Used [0-9]*" | grep -o "[0-9]*")
            if [ -n "$regs" ] && [ $((regs * w * 32)) -gt 65536 ]; then
              echo "FAIL: attention $2 wgmma ${bm}x${bn} d$d $dt $variant: $k takes $regs registers x $((w * 32)) work-items"
              pass=$((pass - 1)) fail=$((fail + 1))
            fi
          done
        done
      done
    done
  done
}
# the forward, loaded by cp.async and by the TMA; the backward (dK/dV and dQ) in the tiles of
# each loader
attention_wgmma wgmma_fwd FWD "- TMA" attn_fwd_wgmma
attention_wgmma wgmma_dkdv BWD TMA attn_bwd_dkdv_wgmma
attention_wgmma wgmma_dq BWD TMA attn_bwd_dq_wgmma
attention_wgmma wgmma_bwd_copy BWD - "attn_bwd_dkdv_wgmma attn_bwd_dq_wgmma"
# head dim 128's backward with dS through memory (ds_suits): dK/dV writes the tiles, dQ reads them
attention_wgmma wgmma_dkdv BWD TMA+DS_TILES attn_bwd_dkdv_wgmma 128
attention_wgmma wgmma_dq BWD TMA+DS_TILES attn_bwd_dq_ds_wgmma 128

# Decoding on the tensor cores (attn_decode_mma), as host/ops/attention.c's plan_decode_mma
# builds it (sm_90 only), in each 16-bit dtype and head dim: register-loaded blocks up to 128,
# a cp.async ring at 256; a build that spills fails (its registers hold q, the scores, the
# output and, with DEC_REGS, the next block).
for d in 64 128 256; do
  w=$([ "$d" = 256 ] && echo 2 || echo 4)
  bn=$([ "$d" = 64 ] && echo 32 || echo 16)
  for dt in F16 BF16; do
    built=""
    # shellcheck disable=SC2046 # its flags
    build "attention decode w$w n$bn d$d $dt" 90 nv/attention_mma.cl -D "DTYPE_$dt" -D ATTN_DECODE \
      -D HEAD_DIM="$d" -D ROWS=16 -D WARPS="$w" -D BLOCK_M=$((16 * w)) -D BLOCK_N="$bn" \
      $([ "$d" = 256 ] && echo -D HELD_LOCAL -D DEC_STAGES=3 || echo -D DEC_REGS)
    if [[ "$built" =~ ([1-9][0-9]*)\ bytes\ spill ]]; then
      echo "FAIL: attention decode d$d $dt spills ${BASH_REMATCH[1]} bytes"
      pass=$((pass - 1)) fail=$((fail + 1))
    fi
  done
done

# The warp-shuffle reductions of softmax and layer norm (cl/nv/shuffle.h, which the host
# enables on NVIDIA unless SOFTMAX_PORTABLE / LN_PORTABLE): a team within one warp and one of
# many warps, the row kernels and the long-row ones, in each dtype (16-byte vectors), for sm_80
# and sm_90.
for dt in F32 F16 BF16; do
  vec=$([ "$dt" = F32 ] && echo 4 || echo 8)
  for plan in "softmax.cl -D TEAM=32 -D ROWS=4 -D ITEMS=8 -D ONLINE=0" \
              "softmax.cl -D TEAM=1024 -D ROWS=1 -D ITEMS=16 -D ONLINE=1" \
              "layernorm.cl -D TEAM=1024 -D ROWS=1 -D ITEMS=8 -D LOOP=0 -D BACKWARD=0" \
              "layernorm.cl -D TEAM=256 -D ROWS=1 -D ITEMS=8 -D LOOP=1 -D BACKWARD=1"; do
    read -r file flags <<<"$plan"
    for sm in 80 90; do
      # shellcheck disable=SC2086 # flags is a list of flags
      build "${file%.cl} $dt ${flags//-D /}" "$sm" "$file" -D "DTYPE_$dt" -D VEC="$vec" $flags
    done
  done
done
f32_spill=$(sed -n 's/^#define MMA_F32_SPILL \([0-9]*\).*/\1/p' "$root/host/ops/attention.c")
[ -n "$f32_spill" ] || { echo "no MMA_F32_SPILL in host/ops/attention.c"; fail=$((fail + 1)); f32_spill=0; }
attention fwd F16 BF16
attention dkdv F16 BF16
attention dq F16 BF16
attention fwd_f32 F32
attention dkdv_f32 F32
attention dq_f32 F32
echo "nvptx-compile: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
