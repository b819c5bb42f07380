#!/usr/bin/env bash
# Builds Tessera's container image without a Docker daemon and without pulling a base image (`scripts/dev
# image`): a minimal Debian bookworm root from `mmdebstrap --variant=extract` (glibc, libgcc, libstdc++ and
# netbase: what the server and ONNX Runtime's library link against), Tessera's files on top, built by
# `buildah bud --isolation chroot`, written as an OCI layout (.cache/image/oci) and a docker-archive tarball
# (.cache/image/tessera-<version>.tar, for `docker load` / `podman load`).
#
# Inside: /opt/tessera/bin/tessera (stripped) with ONNX Runtime's library and the Python runtime in
# /opt/tessera/.cache, where the server looks beside its executable, so ONNX and Python models need nothing
# else; CA certificates; user 65532 (tessera); /models as the default repository; the three ports; the
# entrypoint is the server, taking tritonserver's flags. PyTorch and TensorFlow are left out (libtorch and
# libtensorflow are ~1.3 GB); their models fail to load saying the library was not found.
#
# Needs root (buildah's chroot isolation) and installs mmdebstrap, buildah, skopeo, umoci and runc from Debian
# when missing. Expects `scripts/dev setup` to have run (the binary, .cache/onnxruntime, .cache/python).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.cache/image"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -1)"
IMAGE="localhost/tessera:$VERSION"
# buildah keeps its images here, apart from any system store; vfs works in any container.
export CONTAINERS_STORAGE_CONF="$OUT/storage.conf"

tools() {
  local missing=()
  for tool in mmdebstrap buildah skopeo umoci runc; do
    command -v "$tool" > /dev/null || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null; }
  fi
}

# The base root filesystem, built once (its package list is the cache key).
BASE_PACKAGES="libc6,libgcc-s1,libstdc++6,netbase"
base() {
  if [[ ! -f "$OUT/base.tar" || "$(cat "$OUT/base.packages" 2> /dev/null)" != "$BASE_PACKAGES" ]]; then
    mmdebstrap --quiet --variant=extract --include="$BASE_PACKAGES" bookworm "$OUT/base.tar"
    echo "$BASE_PACKAGES" > "$OUT/base.packages"
  fi
}

# Tessera's files, laid out as they will be in the image.
files() {
  local rootfs="$OUT/context/rootfs"
  rm -rf "$OUT/context"
  mkdir -p "$rootfs"/{opt/tessera/bin,opt/tessera/.cache/onnxruntime,opt/tessera/.cache/python,usr/local/bin,etc/ssl/certs,models,var/cache/tessera,tmp}
  objcopy --strip-debug "$ROOT/target/release/tessera" "$rootfs/opt/tessera/bin/tessera"
  cp -L "$ROOT/.cache/onnxruntime/libonnxruntime.so" "$rootfs/opt/tessera/.cache/onnxruntime/libonnxruntime.so"
  cp "$ROOT/.cache/python/runtime.wasm" "$rootfs/opt/tessera/.cache/python/"
  # With their times: the standard library's bytecode is used only while its sources keep the recorded mtime.
  cp -r --preserve=timestamps "$ROOT/.cache/python/lib" "$rootfs/opt/tessera/.cache/python/"
  ln -s /opt/tessera/bin/tessera "$rootfs/usr/local/bin/tessera"
  # Runtimes written for Triton's image run `tritonserver`.
  ln -s /opt/tessera/bin/tessera "$rootfs/usr/local/bin/tritonserver"
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ntessera:x:65532:65532:tessera:/nonexistent:/usr/sbin/nologin\n' > "$rootfs/etc/passwd"
  printf 'root:x:0:\ntessera:x:65532:\n' > "$rootfs/etc/group"
  chown 65532:65532 "$rootfs/var/cache/tessera"
  chmod 1777 "$rootfs/tmp"
  cp "$OUT/base.tar" "$OUT/context/base.tar"
  cat > "$OUT/context/Containerfile" << EOF
FROM scratch
ADD base.tar /
COPY rootfs/ /
ENV TESSERA_CACHE_DIR=/var/cache/tessera
USER 65532:65532
EXPOSE 8000 8001 8002
ENTRYPOINT ["/opt/tessera/bin/tessera"]
CMD ["--model-repository=/models"]
LABEL org.opencontainers.image.title="tessera" org.opencontainers.image.version="$VERSION"
EOF
}

build() {
  printf '[storage]\ndriver = "vfs"\nrunroot = "%s/run"\ngraphroot = "%s/storage"\n' "$OUT" "$OUT" > "$CONTAINERS_STORAGE_CONF"
  buildah bud --quiet --isolation chroot --layers=false -f "$OUT/context/Containerfile" -t "$IMAGE" "$OUT/context" > /dev/null
  rm -rf "$OUT/oci" "$OUT/tessera-$VERSION.tar"
  buildah push --quiet "$IMAGE" "oci:$OUT/oci:tessera:$VERSION"
  buildah push --quiet "$IMAGE" "docker-archive:$OUT/tessera-$VERSION.tar:tessera:$VERSION"
  buildah rmi --all > /dev/null
}

# The image's size as a registry stores it (compressed layers) and unpacked.
report() {
  local manifest compressed
  manifest="$(skopeo inspect --raw "oci:$OUT/oci:tessera:$VERSION")"
  compressed="$(python3 -c 'import json, sys; print(sum(layer["size"] for layer in json.load(sys.stdin)["layers"]))' <<< "$manifest")"
  echo "image $IMAGE: $((compressed / 1000000)) MB compressed, $(du -sm "$OUT/context/rootfs" | cut -f1) MB of Tessera's files" \
    "+ $(($(stat -c %s "$OUT/base.tar") / 1000000)) MB base unpacked; OCI layout $OUT/oci, docker archive $OUT/tessera-$VERSION.tar"
}

if ((EUID != 0)); then
  echo "the image is not built: buildah's chroot isolation and the tools' installation need root (tests/test_image.py skips)"
  exit 0
fi
mkdir -p "$OUT"
tools
base
files
build
report
