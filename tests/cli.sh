#!/usr/bin/env bash
# The `clkit` command line as a demanding user meets it: a bad command line is refused with one
# line and a hint (exit status 2) before any device is opened, `clkit info --json` is JSON, and
# `clkit tune --budget` ends the whole call within its budget. Usage: cli.sh PATH/TO/clkit
set -u
clkit=${1:?usage: cli.sh PATH/TO/clkit}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A cache of its own: tune writes tuned.json there.
export CLKIT_CACHE_DIR=$work/cache
failed=0

fail() {
  echo "FAIL: $*"
  failed=$((failed + 1))
}

# usage_error ARGS...: exit status 2, nothing on stdout, on stderr one line naming the problem
# and the hint to --help.
usage_error() {
  "$clkit" "$@" >"$work/out" 2>"$work/err"
  local rc=$? lines
  lines=$(wc -l <"$work/err")
  if [ "$rc" != 2 ] || [ -s "$work/out" ] || [ "$lines" != 2 ] ||
     ! grep -q "^Try 'clkit.*--help'\.$" "$work/err"; then
    fail "clkit $* (exit $rc, $lines lines on stderr):"
    head -5 "$work/err"
  else
    echo "ok: clkit $*: $(head -1 "$work/err")"
  fi
}

usage_error bench --reps 3x
usage_error bench --reps 0
usage_error bench --reps 99999999999999999999
usage_error bench --reps ' 3'
usage_error bench --op softmax --shapes 99999999999999999999
usage_error bench --op softmax --shapes 4096x
usage_error bench --op softmax --shapes 4096x0
usage_error bench --op matmul --shapes 2000000000x2000000000x2000000000
usage_error bench --op matmul --shapes 64x64x64,
usage_error bench --op nosuch
usage_error bench --frobnicate
usage_error bench --reps
usage_error bench --csv --json
usage_error bench --op matmul --tf32 --exact-f32
usage_error tune --tf32 --exact-f32 --shapes 64x64x64
usage_error tune --budget 2x --shapes 64x64x64
usage_error tune --budget 0 --shapes 64x64x64
usage_error tune --budget -1 --shapes 64x64x64
usage_error tune --budget nan --shapes 64x64x64
usage_error tune --budget inf --shapes 64x64x64
usage_error tune --shapes 64x64x64x0
usage_error tune --shapes 64x64x64.nt --layout tn
usage_error tune
usage_error check --op nosuch
usage_error info --bogus
usage_error info extra
usage_error nosuch
usage_error

# --help is the full help, on stdout, and a success.
if ! "$clkit" bench --help >"$work/out" 2>"$work/err" || [ -s "$work/err" ] ||
   [ "$(wc -l <"$work/out")" -lt 20 ]; then
  fail "clkit bench --help"
else
  echo "ok: clkit bench --help"
fi

if "$clkit" info --json >"$work/info.json" 2>"$work/err" &&
   python3 -m json.tool "$work/info.json" >/dev/null &&
   python3 - "$work/info.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["device"]["name"] and d["devices"], "no device"
assert any(x["chosen"] for x in d["devices"]), "no chosen device"
for key in ("heuristics", "fast_paths", "routes", "binary_cache", "tuned", "opencl", "diagnosis"):
    assert key in d, key
PY
then
  echo "ok: clkit info --json"
else
  fail "clkit info --json"
  head -5 "$work/err"
fi

# The cache cap info reports is the one the library applies: a size it takes, or its default
# (with a warning) for one it does not.
for cap in 0.5:0.5 -1:512 0:0; do
  got=$(CLKIT_CACHE_MAX_MB=${cap%%:*} "$clkit" info --json 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["binary_cache"]["cap_mb"])')
  [ "$got" = "${cap#*:}" ] || fail "CLKIT_CACHE_MAX_MB=${cap%%:*}: info says cap_mb $got, not ${cap#*:}"
done

# The budget bounds the whole call, kernel builds included: 2 s of tuning, and some for
# opening the device and printing.
start=$(date +%s.%N)
"$clkit" tune --shapes 48x40x32,64x64x64 --budget 2 >"$work/out" 2>"$work/err"
rc=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
if [ "$rc" -gt 1 ] || [ "$(echo "$took > 6" | bc)" = 1 ] || ! grep -q '^48x40x32 ' "$work/out" ||
   ! grep -q '^64x64x64 ' "$work/out"; then
  fail "clkit tune --budget 2 (exit $rc, $took s)"
  cat "$work/out"
  tail -3 "$work/err"
else
  echo "ok: clkit tune --budget 2 took $took s (exit $rc)"
fi

echo "$failed failed"
[ "$failed" = 0 ]
