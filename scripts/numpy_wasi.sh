#!/usr/bin/env bash
# Builds NumPy for Tessera's Python runtime: the PyPI sdist cross-compiled to wasm32 extension modules that
# componentize-py links into the runtime component, next to its own CPython 3.14, libc and libc++.
#
#   scripts/numpy_wasi.sh CRATE WORK OUT
#
# CRATE is the unpacked crate of the componentize-py that will build the component; OUT/numpy is the package
# (pass OUT to componentize-py with -p); WORK keeps the downloads and the toolchain between builds.
#
# What it takes, all from registries this machine reaches (no wasi-sdk, nothing from GitHub):
# - Debian bookworm: clang-19, lld-19, llvm-19 (llvm-ar), compiler-rt builtins for wasm32, and the libc++ 19
#   headers (ABI v2, as componentize-py's libc++.so) — the last two downloaded, not installed;
# - Debian sid, through a private apt state (the system's sources stay as they are): the CPython 3.14 headers
#   and wasi-libc's wasm32-wasip2 headers, downloaded, not installed;
# - the componentize-py crate, for the libraries an extension module links against (libpython3.14.so, libc.so,
#   libc++.so) and its CPython's sysconfig data;
# - PyPI: the numpy sdist (checked against its SHA-256), cython and ninja (in a venv of their own).
#
# An extension module is a PIC `dylink.0` module: libc and libpython stay imports resolved when componentize-py
# links the component; compiler-rt builtins (binary128 `long double`, `__int128`) are linked in. numpy's C++
# (pocketfft, np.unique's hash table) is built with exceptions but componentize-py's libc++abi has none, so
# `throw` is an abort (a trap: that request fails, the instance is re-created); numpy checks arguments before
# it reaches one. Cold: about 4 minutes on 2 cores, most of it numpy's compile.
set -euo pipefail
SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CRATE="$(realpath "${1:?usage: numpy_wasi.sh CRATE WORK OUT}")"
WORK="$(realpath -m "${2:?usage: numpy_wasi.sh CRATE WORK OUT}")"
OUT="$(realpath -m "${3:?usage: numpy_wasi.sh CRATE WORK OUT}")"
NUMPY_VERSION=2.3.5
NUMPY_SHA256=784db1dcdab56bf0517743e746dfb0f885fc68d948aba86eeec2cba234bdf1c0
mkdir -p "$WORK" && cd "$WORK"

# The host toolchain (Debian bookworm).
BUILTINS=/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a
if ! command -v llvm-ar-19 > /dev/null || ! command -v clang-19 > /dev/null || [[ ! -f $BUILTINS ]]; then
  apt-get install -y -qq --no-install-recommends clang-19 lld-19 llvm-19 libclang-rt-19-dev-wasm32 > /dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends clang-19 lld-19 llvm-19 libclang-rt-19-dev-wasm32 > /dev/null; }
fi

# Headers: downloaded .deb files, unpacked into debs/x.
if [[ ! -d debs/x ]]; then
  rm -rf apt debs && mkdir -p apt/lists/partial apt/cache/archives/partial apt/etc/sources.list.d apt/etc/preferences.d debs
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main" \
    > apt/etc/sources.list
  : > apt/status
  sid=(-o Dir::Etc="$WORK/apt/etc" -o Dir::Etc::SourceList="$WORK/apt/etc/sources.list"
       -o Dir::Etc::SourceParts="$WORK/apt/etc/sources.list.d" -o Dir::State::Lists="$WORK/apt/lists"
       -o Dir::Cache="$WORK/apt/cache" -o Dir::State::status="$WORK/apt/status"
       -o APT::Architecture=amd64 -o Acquire::Languages=none -o APT::Sandbox::User=root)
  apt-get "${sid[@]}" update -qq
  (cd debs && apt-get "${sid[@]}" download libpython3.14-dev wasi-libc \
     && apt-get -o APT::Sandbox::User=root download libc++-19-dev-wasm32 libc++abi-19-dev-wasm32) > /dev/null
  mkdir -p debs/x.partial && for deb in debs/*.deb; do dpkg-deb -x "$deb" debs/x.partial; done
  mv debs/x.partial debs/x
fi

# The build's Python tools.
VENV="$WORK/venv"
[[ -x $VENV/bin/cython ]] || { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q cython ninja; }
PY="$VENV/bin/python"

# componentize-py's runtime libraries and sysconfig data, from its crate (unpacked in CRATE).
SDK="$WORK/sdk"
if [[ ! -f $SDK/_sysconfigdata__wasi_wasm32-wasi.py ]]; then
  rm -rf "$SDK" && mkdir -p "$SDK"
  for lib in libpython3.14.so libc.so libc++.so libc++abi.so; do zstd -q -d "$CRATE/$lib.zst" -o "$SDK/$lib"; done
  zstd -q -d -c "$CRATE/python-lib.tar.zst" | tar x -C "$SDK" _sysconfigdata__wasi_wasm32-wasi.py
fi

# A sysroot: wasi-libc (wasm32-wasip2; its static libc serves meson's link checks only), the libc++ headers,
# and the CPython 3.14 headers with a pyconfig.h for componentize-py's CPython, made from its sysconfig data.
ROOT="$WORK/sysroot"
if [[ ! -f $ROOT/include/python3.14/pyconfig.h ]]; then
  rm -rf "$ROOT" && mkdir -p "$ROOT/include/wasm32-wasip2/c++" "$ROOT/lib" "$ROOT/include/python3.14"
  cp -r debs/x/usr/include/wasm32-wasip2/. "$ROOT/include/wasm32-wasip2/"
  cp -r debs/x/usr/lib/llvm-19/include/wasm32-wasi/c++/v1 "$ROOT/include/wasm32-wasip2/c++/"
  cp -r debs/x/usr/lib/wasm32-wasip2 "$ROOT/lib/"
  cp debs/x/usr/lib/llvm-19/lib/wasm32-wasi/libc++{,abi}.a "$ROOT/lib/wasm32-wasip2/"
  cp -r debs/x/usr/include/python3.14/. "$ROOT/include/python3.14/"
  "$PY" "$SCRIPTS/wasi_pyconfig.py" "$SDK/_sysconfigdata__wasi_wasm32-wasi.py" \
    debs/x/usr/include/x86_64-linux-gnu/python3.14/pyconfig.h > "$ROOT/pyconfig.h.partial"
  mv "$ROOT/pyconfig.h.partial" "$ROOT/include/python3.14/pyconfig.h"
fi
# clang-19 looks for the builtins under a per-triple name when the target is wasm32-wasip2.
mkdir -p clang/lib/wasm32-unknown-wasip2
ln -sfn /usr/lib/llvm-19/lib/clang/19/include clang/include
ln -sf "$BUILTINS" clang/lib/wasm32-unknown-wasip2/libclang_rt.builtins.a

# meson's view of the target Python: this Python, reading componentize-py's sysconfig data (the extension
# suffix .cpython-314-wasm32-wasi.so) with the include directory pointed at the sysroot's headers.
mkdir -p bin sysconfig
"$PY" - "$SDK/_sysconfigdata__wasi_wasm32-wasi.py" "$ROOT" > sysconfig/_sysconfigdata__wasi_wasm32-wasi.py <<'PYTHON'
import pprint, runpy, sys
variables, root = runpy.run_path(sys.argv[1])["build_time_vars"], sys.argv[2]
headers = f"{root}/include/python3.14"
variables.update(INCLUDEPY=headers, CONFINCLUDEPY=headers, installed_base=root, installed_platbase=root, base=root,
                 platbase=root, py_version_short="3.14", py_version_nodot="314")
print("build_time_vars = " + pprint.pformat(variables))
PYTHON
cat > bin/target-python <<EOF
#!/bin/bash
export _PYTHON_SYSCONFIGDATA_NAME=_sysconfigdata__wasi_wasm32-wasi PYTHONPATH=$WORK/sysconfig
exec $PY "\$@"
EOF

# `throw` aborts: componentize-py's libc++abi has no exception support.
cat > cxa_stubs.c <<'EOF'
#include <stdlib.h>
__attribute__((visibility("hidden"))) void *__cxa_allocate_exception(size_t size) { return calloc(1, size); }
__attribute__((visibility("hidden"))) void __cxa_free_exception(void *exception) { free(exception); }
__attribute__((visibility("hidden"), noreturn)) void __cxa_throw(void *e, void *type, void (*destroy)(void *)) { abort(); }
EOF
clang-19 -resource-dir "$WORK/clang" --target=wasm32-wasip2 --sysroot="$ROOT" -fPIC -O2 -c cxa_stubs.c -o cxa_stubs.o

# The compilers meson runs. A shared link (an extension module) becomes a PIC dylink module that imports
# from componentize-py's libraries; any other link (meson's configure checks) is a static wasip2 program, so
# that those checks answer for wasi-libc. Flags that mean nothing to wasm-ld are dropped.
cat > bin/cc <<EOF
#!/bin/bash
compiler=\${TARGET_CLANG:-clang-19}
shared=0; link=1; args=()
for arg in "\$@"; do [[ \$arg == -shared ]] && shared=1; done
for arg in "\$@"; do
  case "\$arg" in
    -c|-E|-S|-M|-MM) link=0; args+=("\$arg") ;;
    -lm|-ldl|-lpthread|-lrt) [[ \$shared == 1 ]] || args+=("\$arg") ;;
    -Wl,--as-needed|-Wl,--no-undefined|-Wl,--allow-shlib-undefined|-Wl,-soname,*|-Wl,-rpath,*|-Wl,-rpath-link,*|-Wl,--start-group|-Wl,--end-group) ;;
    *) args+=("\$arg") ;;
  esac
done
if [[ \$shared == 1 ]]; then
  libs=($SDK/libpython3.14.so $SDK/libc.so)
  [[ \$compiler == clang++-19 ]] && libs+=($WORK/cxa_stubs.o $SDK/libc++.so $SDK/libc++abi.so)
  exec \$compiler -resource-dir $WORK/clang --target=wasm32-wasi --sysroot=$ROOT -nostdlib -Wl,--no-entry "\${args[@]}" "\${libs[@]}" $BUILTINS
fi
[[ \$link == 1 ]] && args=(-fuse-ld=lld "\${args[@]}")
exec \$compiler -resource-dir $WORK/clang --target=wasm32-wasip2 --sysroot=$ROOT "\${args[@]}"
EOF
printf '#!/bin/bash\nTARGET_CLANG=clang++-19 exec %s/bin/cc "$@"\n' "$WORK" > bin/c++
chmod +x bin/*
cat > cross.ini <<EOF
[binaries]
c = '$WORK/bin/cc'
cpp = '$WORK/bin/c++'
ar = 'llvm-ar-19'
strip = 'llvm-strip-19'
python = '$WORK/bin/target-python'
cython = '$VENV/bin/cython'

[host_machine]
system = 'wasi'
cpu_family = 'wasm32'
cpu = 'wasm32'
endian = 'little'

[properties]
longdouble_format = 'IEEE_QUAD_LE'
needs_exe_wrapper = true

[built-in options]
c_args = ['-fPIC']
cpp_args = ['-fPIC', '-fexceptions']
EOF

# The sdist, from PyPI's simple index, checked.
SDIST="$WORK/numpy-$NUMPY_VERSION.tar.gz"
if [[ ! -f $SDIST ]] || ! echo "$NUMPY_SHA256  $SDIST" | sha256sum -c --quiet 2> /dev/null; then
  url="$("$PY" -c '
import json, sys, urllib.request
request = urllib.request.Request("https://pypi.org/simple/numpy/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(request))["files"]
print(next(f["url"] for f in files if f["filename"] == sys.argv[1]))' "numpy-$NUMPY_VERSION.tar.gz")"
  curl -sSfL -o "$SDIST.partial" "$url"
  echo "$NUMPY_SHA256  $SDIST.partial" | sha256sum -c --quiet
  mv "$SDIST.partial" "$SDIST"
fi

# Two patches. numpy knows wasm only as Emscripten: one line of npy_cpu.h says so for any wasm target. And
# np.load/np.save hand a real file to C (fromfile/tofile), which dup()s its descriptor; WASI has no dup, so on
# WASI they take the path numpy uses for file-like objects (read()/write() into the array's buffer).
rm -rf src build install && mkdir src && tar xzf "$SDIST" -C src
SRC="$WORK/src/numpy-$NUMPY_VERSION"
sed -i 's/^#elif defined(__EMSCRIPTEN__)$/#elif defined(__EMSCRIPTEN__) || defined(__wasm__)/' \
  "$SRC/numpy/_core/include/numpy/npy_cpu.h"
grep -q 'defined(__wasm__)$' "$SRC/numpy/_core/include/numpy/npy_cpu.h"
sed -i -e 's/^import io$/import io\nimport sys/' \
  -e 's/^def isfileobj(f):$/def isfileobj(f):\n    if sys.platform == "wasi":\n        return False/' \
  "$SRC/numpy/lib/_format_impl.py"
grep -q '^import sys$' "$SRC/numpy/lib/_format_impl.py" && grep -q 'if sys.platform == "wasi":' "$SRC/numpy/lib/_format_impl.py"

# No BLAS, no SIMD dispatch, no threads: plain C for wasm32.
export PATH="$VENV/bin:$PATH"
"$PY" "$SRC/vendored-meson/meson/meson.py" setup --cross-file cross.ini build "$SRC" \
  -Dbuildtype=release -Db_ndebug=if-release -Dblas=none -Dlapack=none -Dallow-noblas=true \
  -Ddisable-optimization=true -Dcpu-baseline=none -Dcpu-dispatch=none -Ddisable-threading=true \
  -Ddisable-svml=true -Ddisable-highway=true -Ddisable-intel-sort=true > meson-setup.log
ninja -C build -j"$(nproc)" > ninja.log
"$PY" "$SRC/vendored-meson/meson/meson.py" install -C build --quiet --destdir "$WORK/install" > /dev/null

# The package without its tests (componentize-py links every extension module it finds).
rm -rf "$OUT" && mkdir -p "$OUT"
cp -r "$(find install -type d -name numpy -path '*site-packages*' | head -1)" "$OUT/"
find "$OUT/numpy" -type d -name tests -prune -exec rm -rf {} +
find "$OUT/numpy" -name '*.pyi' -delete
rm -f "$OUT"/numpy/_core/{_multiarray_tests,_rational_tests,_umath_tests,_struct_ufunc_tests,_operand_flag_tests,_simd}.*.so
rm -rf src build install
echo "numpy $NUMPY_VERSION for wasm32 in $OUT/numpy ($(du -sh "$OUT/numpy" | cut -f1))"
