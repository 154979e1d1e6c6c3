#!/bin/sh
# The shared library's dynamic symbols are exactly the functions include/clkit.h declares:
# nothing internal leaks into the ABI, and nothing public is missing.
# usage: public_symbols.sh LIBCLKIT.so CLKIT.H
set -eu
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWi]$/ {print $3}' | sort -u)
# A typedef of a function pointer returning clkit_status names no function: its line is skipped.
declared=$(grep -v '^typedef' "$header" | grep -o '\bclkit_[a-z0-9_]*[[:space:]]*(' | tr -d '( \t' | sort -u)
extra=$(printf '%s\n' "$exported" | grep -vxF "$declared" || true)
missing=$(printf '%s\n' "$declared" | grep -vxF "$exported" || true)
[ -z "$extra" ] || echo "exported but not in clkit.h:" $extra
[ -z "$missing" ] || echo "declared in clkit.h but not exported:" $missing
echo "public_symbols: $(printf '%s\n' "$exported" | wc -l) exported, $(printf '%s\n' "$declared" | wc -l) declared"
[ -z "$extra" ] && [ -z "$missing" ]
