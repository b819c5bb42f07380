"""Installs the reference side of the benchmark into .cache/bench, from PyPI and Debian packages only:

- the real Triton 2.51 server from `nvidia-pytriton==0.7.0` (python backend, plus its 3.11 stub),
- `perf_analyzer` from the `tritonclient==2.51.0` wheel, with `libb64.so.0d` (Debian `libb64-0d`) and
  `libcudart.so.12` (PyPI `nvidia-cuda-runtime-cu12`) beside it,
- numpy < 2 for Triton's python backend stub.

Idempotent: each part is skipped when its marker file exists.
"""

import glob
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

CACHE = pathlib.Path(__file__).resolve().parent.parent / ".cache" / "bench"
DOWNLOADS = CACHE / "downloads"
TRITON = CACHE / "triton"
PERF = CACHE / "perf_analyzer"
NUMPY = CACHE / "numpy"

WHEELS = ["nvidia-pytriton==0.7.0", "tritonclient==2.51.0", "nvidia-cuda-runtime-cu12==12.9.79"]


def run(*args, **kw):
    print("  $", " ".join(map(str, args)), flush=True)
    subprocess.run(list(map(str, args)), check=True, **kw)


def wheel(prefix):
    found = glob.glob(str(DOWNLOADS / f"{prefix}-*.whl"))
    if not found:
        raise SystemExit(f"no {prefix} wheel in {DOWNLOADS}")
    return found[0]


def download():
    if (DOWNLOADS / ".done").exists():
        return
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    run(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", DOWNLOADS, *WHEELS)
    try:
        run("apt-get", "download", "libb64-0d", cwd=DOWNLOADS)
    except subprocess.CalledProcessError:
        run("apt-get", "update", "-qq")  # a fresh machine may have no package lists yet
        run("apt-get", "download", "libb64-0d", cwd=DOWNLOADS)
    (DOWNLOADS / ".done").touch()


def install_triton():
    if (TRITON / ".done").exists():
        return
    shutil.rmtree(TRITON, ignore_errors=True)
    with zipfile.ZipFile(wheel("nvidia_pytriton")) as z:
        z.extractall(TRITON)
    server = TRITON / "pytriton" / "tritonserver"
    os.chmod(server / "bin" / "tritonserver", 0o755)
    stub = server / "backends" / "python" / "triton_python_backend_stub"
    shutil.copy(server / "python_backend_stubs" / "3.11" / "triton_python_backend_stub", stub)
    os.chmod(stub, 0o755)
    (TRITON / ".done").touch()


def install_perf_analyzer():
    if (PERF / ".done").exists():
        return
    shutil.rmtree(PERF, ignore_errors=True)
    (PERF / "lib").mkdir(parents=True)
    with zipfile.ZipFile(wheel("tritonclient")) as z:
        data = z.read("tritonclient-2.51.0.data/data/bin/perf_analyzer")
    (PERF / "perf_analyzer").write_bytes(data)
    os.chmod(PERF / "perf_analyzer", 0o755)
    with zipfile.ZipFile(wheel("nvidia_cuda_runtime_cu12")) as z:
        (PERF / "lib" / "libcudart.so.12").write_bytes(z.read("nvidia/cuda_runtime/lib/libcudart.so.12"))
    deb = glob.glob(str(DOWNLOADS / "libb64-0d_*.deb"))[0]
    run("dpkg-deb", "-x", deb, PERF / "deb")
    for lib in glob.glob(str(PERF / "deb" / "usr" / "lib" / "x86_64-linux-gnu" / "libb64.so.0d*")):
        shutil.copy(lib, PERF / "lib")
    (PERF / ".done").touch()


def install_numpy():
    if (NUMPY / ".done").exists():
        return
    shutil.rmtree(NUMPY, ignore_errors=True)
    run(sys.executable, "-m", "pip", "install", "--quiet", "--target", NUMPY, "numpy<2")
    (NUMPY / ".done").touch()


def main():
    download()
    install_triton()
    install_perf_analyzer()
    install_numpy()


if __name__ == "__main__":
    main()
