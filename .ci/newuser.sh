#!/bin/sh
# A new user's path through the installed package, as .ci/run's last step runs it on the CI
# machine (bare Debian, root): install clkit to a fresh prefix, build every program of
# examples/ against that prefix with pkg-config and with CMake (find_package(clkit CONFIG)),
# run them and the installed `clkit` on the default device (PoCL there) without
# LD_LIBRARY_PATH, and, where python/pyproject.toml exists, pip-install the Python package into
# a venv and run its tests against the installed library. Also checks that the README's
# example is examples/softmax.c.
# The programs share the kernel caches the README run filled (~/.cache/clkit, ~/.cache/pocl):
# their kernels load instead of compiling, and the whole script takes a minute or two.
# Prints "newuser: PASSED" or "newuser: FAILED: ..." last; exits nonzero on failure.
set -eu
cd "$(dirname "$0")/.."
repo=$PWD
start=$(date +%s)
fail() {
  echo "newuser: FAILED: $* ($(($(date +%s) - start)) s)"
  exit 1
}
say() { echo "newuser: $*"; }
# A user's environment: the default device, the embedded kernels, no CI build log.
unset CLKIT_DEVICE CLKIT_KERNEL_DIR CLKIT_BUILD_LOG CLKIT_LIBRARY
examples=$(cd examples && for f in *.c; do printf '%s ' "${f%.c}"; done)

[ -n "$(command -v cmake)" ] ||
  DEBIAN_FRONTEND=noninteractive $(command -v sudo) apt-get install -y -q --no-install-recommends cmake >/dev/null ||
  fail "apt-get install cmake"

work=$(mktemp -d "${TMPDIR:-/tmp}/clkit-newuser.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

# The README shows examples/softmax.c from its first #include on.
awk '/^## Using the library/ {f = 1} f && /^```c$/ {b = 1; next} b && /^```$/ {exit} b' README.md >"$work/readme.c"
sed -n '/^#include/,$p' examples/softmax.c | cmp -s - "$work/readme.c" ||
  fail "README's \"Using the library\" block is not examples/softmax.c from its first #include"

say "meson setup --prefix $prefix; meson install"
{ meson setup "$work/build" --prefix "$prefix" -Dtests=false -Dexamples=false -Dwerror=true &&
  meson install -C "$work/build"; } >"$work/install.log" 2>&1 || { tail -30 "$work/install.log"; fail "meson install"; }
pc=$(find "$prefix" -name clkit.pc)
[ -n "$pc" ] || fail "no clkit.pc under $prefix"
export PKG_CONFIG_PATH="${pc%/*}"
libdir=$(pkg-config --variable=libdir clkit)
case " $(pkg-config --cflags clkit) " in
  *json-c* | *xxhash*) fail "pkg-config --cflags clkit leaks a private dependency: $(pkg-config --cflags clkit)" ;;
esac

# The tool and the shared library run from the prefix as they are.
"$prefix/bin/clkit" info >"$work/info.log" 2>&1 || { tail -20 "$work/info.log"; fail "$prefix/bin/clkit info"; }
say "$prefix/bin/clkit info: ok"

# Every example twice: with pkg-config (an rpath to the prefix, which is not the linker's
# search path) and with CMake (whose build tree carries the imported library's directory).
mkdir -p "$work/pc"
flags="$(pkg-config --cflags --libs clkit) -lm -Wl,-rpath,$libdir"
for e in $examples; do
  # shellcheck disable=SC2086 # $flags: several words, as a user's shell splits them
  cc -Wall -Wextra -Werror "examples/$e.c" -o "$work/pc/$e" $flags || fail "cc examples/$e.c with pkg-config"
done
say "built with pkg-config: $examples"

version=$(sed -n 's/^#define CLKIT_VERSION_STRING "\(.*\)"$/\1/p' include/clkit.h)
mkdir -p "$work/cmake"
cat >"$work/cmake/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(clkit_examples C)
find_package(clkit $version EXACT CONFIG REQUIRED)
foreach(e $examples)
  add_executable(\${e} "$repo/examples/\${e}.c")
  target_compile_options(\${e} PRIVATE -Wall -Wextra -Werror)
  target_link_libraries(\${e} PRIVATE clkit::clkit m)
endforeach()
EOF
{ cmake -G Ninja -S "$work/cmake" -B "$work/cmake/build" -DCMAKE_PREFIX_PATH="$prefix" &&
  cmake --build "$work/cmake/build"; } >"$work/cmake.log" 2>&1 || { tail -30 "$work/cmake.log"; fail "CMake build"; }
say "built with CMake (find_package(clkit $version EXACT CONFIG)): $examples"

# The request the README shows must be one this version's package takes.
readme=$(sed -n 's/^find_package(clkit \([0-9.]*\) CONFIG REQUIRED).*/\1/p' README.md)
[ -n "$readme" ] || fail "README shows no find_package(clkit X.Y CONFIG REQUIRED) line"
mkdir -p "$work/readme-cmake"
printf 'cmake_minimum_required(VERSION 3.16)\nproject(readme C)\nfind_package(clkit %s CONFIG REQUIRED)\n' "$readme" \
  >"$work/readme-cmake/CMakeLists.txt"
cmake -G Ninja -S "$work/readme-cmake" -B "$work/readme-cmake/build" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/readme-cmake.log" 2>&1 || { tail -20 "$work/readme-cmake.log"; fail "README's find_package(clkit $readme)"; }
say "README's find_package(clkit $readme CONFIG REQUIRED) finds clkit $version"

for dir in pc cmake/build; do
  for e in $examples; do
    # tune_matmul tunes into a cache of its own, as the meson test does.
    [ "$e" = tune_matmul ] && arg=$work/tune-cache-${dir%%/*} || arg=
    t=$(date +%s)
    "$work/$dir/$e" ${arg:+"$arg"} >"$work/run.log" 2>&1 || { cat "$work/run.log"; fail "$dir/$e"; }
    say "$dir/$e: ok ($(($(date +%s) - t)) s)"
  done
done

if [ -f python/pyproject.toml ]; then
  CLKIT_LIBRARY=$libdir/libclkit.so CLKIT_PY_VENV=$work/venv python/ci.sh || fail "python/ci.sh"
fi
echo "newuser: PASSED ($(($(date +%s) - start)) s)"
