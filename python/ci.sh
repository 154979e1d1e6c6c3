#!/usr/bin/env bash
# CI step of the Python package: installs its Debian dependencies, makes a virtual environment
# that sees them (--system-site-packages), `pip install ./python` into it, and runs the pytest
# suite (python/tests) against the installed package and the library the CI built. Prints
# "python: PASSED" or "python: FAILED ..." last; exits nonzero on any failure.
#
# Environment: CLKIT_LIBRARY (default: build/libclkit.so of this checkout), CLKIT_PY_VENV
# (default: build/python-venv), CLKIT_CACHE_DIR / CLKIT_DEVICE as for the library; extra
# arguments go to pytest. pyopencl is optional: its tests run where python3-pyopencl is
# installed and are skipped otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
start=$SECONDS
fail() {
  echo "python: FAILED: $* ($((SECONDS - start)) s)"
  exit 1
}

lib=${CLKIT_LIBRARY:-$repo/build/libclkit.so}
[ -f "$lib" ] || fail "no library at $lib (meson setup build && meson compile -C build)"
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")

# Debian packages only; no PyPI.
pkgs=(python3-pip python3-venv python3-numpy python3-pytest)
if ! dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null ||
    { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null; } ||
    fail "apt-get install ${pkgs[*]}"
fi

# The distribution's interpreter, whose site-packages hold the Debian modules (not a pyenv or
# other python3 earlier on PATH).
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
venv=${CLKIT_PY_VENV:-$repo/build/python-venv}
rm -rf "$venv"
"$py" -m venv --system-site-packages "$venv" || fail "python3 -m venv $venv"
# --no-build-isolation: build with the Debian setuptools instead of fetching one from PyPI
"$venv/bin/python" -m pip install -q --no-build-isolation --no-cache-dir "$here" ||
  fail "pip install ./python"
rm -rf "$here/build" "$here"/*.egg-info  # setuptools' in-tree leftovers

# From outside the source tree, so that `import clkit` is the installed package.
unset PYTHONPATH
cd "${TMPDIR:-/tmp}" || fail "cd ${TMPDIR:-/tmp}"
installed=$("$venv/bin/python" -c 'import clkit; print(clkit.__file__)') || fail "import clkit"
case $installed in
  "$venv"/*) echo "python: testing $installed with $lib" ;;
  *) fail "import clkit found $installed, not the installed package" ;;
esac
CLKIT_LIBRARY=$lib "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs "$here/tests" "$@"
rc=$?
[ "$rc" = 0 ] || fail "pytest exited with $rc"
echo "python: PASSED ($((SECONDS - start)) s)"
