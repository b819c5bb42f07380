#!/usr/bin/env bash
# Builds Tessera's Python runtime into OUT (the server looks in <its checkout>/.cache/python):
#   OUT/runtime.wasm        one component — componentize-py's CPython 3.14, numpy, plugins/python/*.py — that
#                           runs every Python model; it imports each model's model.py when an instance starts;
#   OUT/lib/python3.14/     CPython's standard library, which the server mounts read-only in every Python
#                           model's sandbox, so a model can import any of it, with its bytecode.
#
#   scripts/python_runtime.sh COMPONENTIZE_PY CACHE OUT
#
# COMPONENTIZE_PY is the componentize-py to build with (the test venv's); CACHE keeps its crate, numpy's build
# (scripts/numpy_wasi.sh, about 4 minutes cold) and the toolchain. Each part is rebuilt only when what it is
# made from changed: numpy when its build script did, the component when the WIT, plugins/python or numpy did.
set -euo pipefail
SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$SCRIPTS")"
TOOL="$(realpath "${1:?usage: python_runtime.sh COMPONENTIZE_PY CACHE OUT}")"
CACHE="$(realpath -m "${2:?usage: python_runtime.sh COMPONENTIZE_PY CACHE OUT}")"
OUT="$(realpath -m "${3:?usage: python_runtime.sh COMPONENTIZE_PY CACHE OUT}")"
version="$("$TOOL" --version | awk '{print $2}')"
mkdir -p "$CACHE" "$OUT"
# The crate's files are zstd-compressed.
command -v zstd > /dev/null || apt-get install -y -qq --no-install-recommends zstd > /dev/null \
  || { apt-get update -qq && apt-get install -y -qq --no-install-recommends zstd > /dev/null; }

# The crate of this componentize-py: the libraries numpy links against and the standard library's files.
crate="$CACHE/componentize-py-$version"
if [[ ! -f $crate/python-lib.tar.zst ]]; then
  rm -rf "$crate.partial" && mkdir -p "$crate.partial"
  curl -sSfL "https://static.crates.io/crates/componentize-py/$version/download" \
    | tar xz -C "$crate.partial" --strip-components=1
  rm -rf "$crate" && mv "$crate.partial" "$crate"
fi

# numpy, when its build script changed.
numpy="$CACHE/numpy"
numpy_stamp="$(cat "$SCRIPTS/numpy_wasi.sh" "$SCRIPTS/wasi_pyconfig.py" | sha256sum | cut -c1-16)-$version"
if [[ "$(cat "$numpy/.built-from" 2> /dev/null)" != "$numpy_stamp" ]]; then
  start=$SECONDS
  bash "$SCRIPTS/numpy_wasi.sh" "$crate" "$CACHE/numpy-work" "$numpy"
  echo "$numpy_stamp" > "$numpy/.built-from"
  echo "numpy built in $((SECONDS - start))s"
fi

# The standard library, as the component's CPython expects it.
if [[ "$(cat "$OUT/lib/.built-from" 2> /dev/null)" != "$version" ]]; then
  rm -rf "$OUT/lib" && mkdir -p "$OUT/lib/python3.14"
  zstd -q -d -c "$crate/python-lib.tar.zst" | tar x -C "$OUT/lib/python3.14"
  echo "$version" > "$OUT/lib/.built-from"
fi

# Bytecode that the first pass below writes, when it is missing.
stdlib_bytecode="$OUT/lib/python3.14/__pycache__/os.cpython-314.pyc"
numpy_bytecode="$numpy/numpy/__pycache__/__init__.cpython-314.pyc"
# The component, when its sources changed.
runtime_stamp="$(cat "$ROOT/wit/backend.wit" "$ROOT"/plugins/python/*.py "$numpy/.built-from" | sha256sum | cut -c1-16)-$version"
if [[ -f $OUT/runtime.wasm && "$(cat "$OUT/runtime.built-from" 2> /dev/null)" == "$runtime_stamp" && -f $stdlib_bytecode ]]; then
  echo "python runtime up to date"
  exit 0
fi
start=$SECONDS
# componentize-py also searches the site-packages of the venv it finds (VIRTUAL_ENV, or the python3 on PATH):
# pointed nowhere, it cannot pick up the host's numpy instead of the wasm one.
componentize() {
  local module="$1" && shift
  VIRTUAL_ENV=/nonexistent "$TOOL" -d "$ROOT/wit" -w backend componentize "$module" \
    -p "$ROOT/plugins/python" -p "$numpy" "$@" 2>&1 | grep -v "site-packages directory not found"
}
# The build's interpreter writes bytecode for what it imports. Without numpy's, it compiles every module from
# source and the compiler's garbage stays in the memory image: 22 MiB with free holes throughout instead of 18,
# which instances then fill page by page. And the standard library that sandboxes see has none unless it is
# made here. So a first pass (scripts/python_bytecode) makes both, then the real build runs.
if [[ ! -f $numpy_bytecode || ! -f $stdlib_bytecode ]]; then
  componentize tessera_bytecode -p "$SCRIPTS/python_bytecode" -p "$OUT/lib/python3.14" -o "$OUT/bytecode.wasm" > /dev/null
  rm -f "$OUT/bytecode.wasm"
fi
componentize tessera_runtime -o "$OUT/runtime.wasm.partial"
mv "$OUT/runtime.wasm.partial" "$OUT/runtime.wasm"
echo "$runtime_stamp" > "$OUT/runtime.built-from"
echo "python runtime ($(du -h "$OUT/runtime.wasm" | cut -f1)) built in $((SECONDS - start))s"
