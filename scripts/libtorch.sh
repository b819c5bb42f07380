#!/usr/bin/env bash
# Puts a CPU-usable libtorch 2.13.0 (what `tch` 0.26 links) into DEST, from PyPI, once: the torch wheel is a
# CUDA 13 build, so DEST gets its CPU library (libtorch_cpu.so, libc10.so, libgomp.so.1) and headers, the
# two CUDA libraries libtorch_cpu.so itself needs (libcudart and libcupti, from NVIDIA's wheels; no GPU is
# needed to load them), and an empty libtorch.so (the wheel's one only pulls in libtorch_cuda, which tch never
# calls). About 490 MB on disk; the wheels (540 MB) are not kept.
#
# usage: scripts/libtorch.sh PYTHON DEST   (PYTHON: a python with pip, to download the wheels)
set -euo pipefail
python="$1" dest="$2"
version=2.13.0
if [[ -f "$dest/build-version" && "$(cat "$dest/build-version")" == "$version" ]]; then
  echo "$dest: libtorch $version (cached)"
  exit 0
fi
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
"$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" \
  "torch==$version" "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cupti==13.0.85"
rm -rf "$dest" && mkdir -p "$dest/lib"
"$python" - "$wheels" "$dest" <<'PY'
import pathlib, sys, zipfile

wheels, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wanted = {  # member prefix in a wheel -> where it goes under dest
    "torch/include/": "include/",
    "torch/share/": "share/",
    "torch/lib/libtorch_cpu.so": "lib/libtorch_cpu.so",
    "torch/lib/libc10.so": "lib/libc10.so",
    "torch/lib/libgomp.so.1": "lib/libgomp.so.1",
    "nvidia/cu13/lib/libcudart.so.13": "lib/libcudart.so.13",
    "nvidia/cu13/lib/libcupti.so.13": "lib/libcupti.so.13",
}
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for member in z.infolist():
            for prefix, target in wanted.items():
                if member.filename.startswith(prefix) and not member.is_dir():
                    path = dest / (target + member.filename[len(prefix):])
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(member) as source, open(path, "wb") as out:
                        while chunk := source.read(1 << 20):
                            out.write(chunk)
PY
echo "" | cc -shared -x c - -o "$dest/lib/libtorch.so"
echo -n "$version" > "$dest/build-version"
echo "$dest: libtorch $version ($(du -sh "$dest" | cut -f1))"
