# The toolchains of the prebuilt platforms, shared by scripts/package (which builds them) and
# scripts/test-packages (which runs them under emulation). Sourced after scripts/lib/prologue.sh.
# Everything comes from Debian's packages and PyPI, cached under target/platforms/ (kept between
# runs, like the rest of target/):
#   zig_venv               a venv with zig (PyPI's ziglang) and cargo-zigbuild, which link against
#                          glibc 2.17 (manylinux2014), plus maturin and wheel; puts its bin/ first
#                          on PATH (cargo-zigbuild and maturin --zig find zig through its python3)
#   aarch64_toolchain      Debian's rustc-web (a newer rustc with an aarch64 standard library,
#                          used only for that target: RUSTC=/usr/bin/rustc; rustup's stays the
#                          host's), the aarch64 binutils and C compiler, qemu-aarch64-static
#   arm64_sysroot          an arm64 Debian root (Python 3.11, Node 18, Ruby 3.1 with ffi) made
#                          with `apt-get download` + `dpkg -x` (no maintainer script runs); its
#                          path goes in ARM64_ROOT. Programs run in it with
#                          `qemu-aarch64-static -L "$ARM64_ROOT" PROGRAM ARGS…` (no binfmt
#                          registration, no kernel change)
# shellcheck shell=bash

ZIGLANG_VERSION=0.17.0
CARGO_ZIGBUILD_VERSION=0.24.0
PLATFORMS_MATURIN_VERSION=1.16.0
# `wheel unpack` / `wheel pack` add the CLI to the wheels maturin builds (RECORD rewritten).
PLATFORMS_WHEEL_VERSION=0.45.1
platforms_cache="${CARGO_TARGET_DIR:-$root/target}/platforms"

zig_venv() {
  local venv="$platforms_cache/zig-venv"
  python_venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "ziglang==$ZIGLANG_VERSION" \
    "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION" "maturin==$PLATFORMS_MATURIN_VERSION" \
    "wheel==$PLATFORMS_WHEEL_VERSION"
  export PATH="$venv/bin:$PATH"
}

# The Debian packages aarch64 needs, installed unless they are (dpkg's arm64 architecture added
# first: libstd-rust-web-dev:arm64 is the standard library for that target).
aarch64_toolchain() {
  local missing=() pkg
  for pkg in rustc-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
    qemu-user-static; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  echo "installing: ${missing[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# arm64 packages of the emulated checks (libraries first, then each language's runtime), and
# Node's JavaScript dependencies (architecture all).
ARM64_PACKAGES="libc6 libgcc-s1 libstdc++6 zlib1g libssl3 libffi8 libexpat1 libbz2-1.0 liblzma5
  libsqlite3-0 libncursesw6 libncurses6 libtinfo6 libreadline8 libuuid1 libcrypt1 libnsl2 libtirpc3
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 libdb5.3 libgdbm6
  libedit2 libbsd0 libmd0 libyaml-0-2 libgmp10
  python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
  nodejs libnode108 libuv1 libbrotli1 libc-ares2 libnghttp2-14 libicu72
  ruby3.1 libruby3.1 ruby-ffi"
ALL_PACKAGES="node-cjs-module-lexer node-acorn node-undici node-busboy rubygems-integration"

arm64_sysroot() {
  ARM64_ROOT="$platforms_cache/arm64/root"
  local debs="$platforms_cache/arm64/debs" stamp="$platforms_cache/arm64/packages" pkg
  local wanted
  wanted=$(printf '%s\n' $ARM64_PACKAGES $ALL_PACKAGES)
  if [ -d "$ARM64_ROOT" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
    return 0
  fi
  rm -rf "$ARM64_ROOT" "$debs"
  mkdir -p "$ARM64_ROOT" "$debs"
  # apt-get download runs as the invoking user here (as root it would warn that its sandbox user
  # cannot write the folder).
  (
    cd "$debs"
    for pkg in $ARM64_PACKAGES; do
      apt-get download -q=2 -o APT::Sandbox::User="$(id -un)" "$pkg:arm64"
    done
    for pkg in $ALL_PACKAGES; do
      apt-get download -q=2 -o APT::Sandbox::User="$(id -un)" "$pkg"
    done
  )
  for pkg in "$debs"/*.deb; do dpkg -x "$pkg" "$ARM64_ROOT"; done
  echo "$wanted" >"$stamp"
}
