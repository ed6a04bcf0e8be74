# The prologue every test script shares: sourced (never run) from the repository root as
#   source scripts/lib/prologue.sh NAME
# It sets `root`, `started`, `sudo`, `step` (steps printed as "== NAME: …") and defines the
# installers the scripts call, so a fresh Debian machine with Rust needs nothing else:
#   need CMD PKG…           queue the Debian packages PKG… when the command CMD is missing
#   need_ruby LIB PKG…      queue PKG… when Ruby cannot `require LIB`
#   install_needed          apt-get install what was queued (nothing when nothing is missing)
#   need_node               fail unless Node.js 20+ with npm is installed
#   npm_locked DIR CMD…     run CMD… (an npm install) in DIR when DIR/package-lock.json changed
#                           since the last install (a copy of it in node_modules marks it)
#   python_venv VENV        create the venv VENV if missing (installing python3-venv if needed)
#   rk_test_redis           build the shared fixture binary (test-support) in the workspace's
#                           one target directory and export RK_TEST_REDIS, its path
#   go_module_lib           put scripts/test-c's debug libratekeeper (in the shipped form) and the
#                           header where the Go module's cgo directives look (go/lib/, gitignored)
# shellcheck shell=bash

root=$PWD
started=$(date +%s)
prologue_name=${1:?"usage: source scripts/lib/prologue.sh NAME"}
step() { printf '\n== %s: %s\n' "$prologue_name" "$*"; }
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
prologue_missing=()

need() {
  local command=$1; shift
  command -v "$command" >/dev/null || prologue_missing+=("$@")
}

need_ruby() {
  local lib=$1; shift
  ruby -e "require '$lib'" 2>/dev/null || prologue_missing+=("$@")
}

install_needed() {
  [ "${#prologue_missing[@]}" -gt 0 ] || return 0
  echo "installing: ${prologue_missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${prologue_missing[@]}" >/dev/null
  prologue_missing=()
}

need_node() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "Node.js 20 or later with npm is required (https://nodejs.org)" >&2
    exit 1
  fi
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  if [ "$major" -lt 20 ]; then
    echo "Node.js 20 or later is required, found $(node --version)" >&2
    exit 1
  fi
}

npm_locked() {
  local dir=$1; shift
  if cmp -s "$dir/package-lock.json" "$dir/node_modules/.installed-lock.json" 2>/dev/null; then
    echo "$dir/node_modules matches package-lock.json"
  else
    # The lock as it was before the install marks it (npm may rewrite the file it read).
    local lock
    lock=$(mktemp)
    cp "$dir/package-lock.json" "$lock"
    (cd "$dir" && "$@")
    mv "$lock" "$dir/node_modules/.installed-lock.json"
  fi
}

python_venv() {
  local venv=$1
  [ -x "$venv/bin/python" ] && return 0
  if ! python3 -m venv "$venv"; then
    # Debian ships venv separately.
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
}

rk_test_redis() {
  # After `cargo test --workspace` (scripts/test) this only checks that the binary is fresh.
  cargo build --quiet --locked -p ratekeeper-test-support --bin rk-test-redis
  export RK_TEST_REDIS="${CARGO_TARGET_DIR:-$root/target}/debug/rk-test-redis"
}

go_module_lib() {
  # The build scripts/test-c makes (a no-op after it), in the form scripts/package ships
  # (ffi-c/make-static-library), remade only when stale: no second build of the crate.
  cargo build --quiet --locked -p ratekeeper-ffi --features test-hooks --lib
  local lib_dir="${CARGO_TARGET_DIR:-$root/target}/debug"
  local shipped="$lib_dir/static-shipped/libratekeeper.a"
  if [ ! "$shipped" -nt "$lib_dir/libratekeeper.a" ] || [ ! "$shipped" -nt include/ratekeeper.h ]; then
    ffi-c/make-static-library "$lib_dir/libratekeeper.a" "$shipped" --test-hooks
  fi
  mkdir -p go/lib/linux_amd64 go/lib/include
  cp "$shipped" go/lib/linux_amd64/libratekeeper.a
  cp include/ratekeeper.h go/lib/include/ratekeeper.h
}
