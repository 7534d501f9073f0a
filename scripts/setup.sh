#!/usr/bin/env bash
# Installs everything Gradless needs, idempotently: each step checks first and is skipped in
# seconds when already done. Heavy things live in $GRADLESS_CACHE (default ~/.cache/gradless)
# so fresh clones and CI runs on the same machine reuse them.
#
#   scripts/setup.sh            what running the app needs
#   scripts/setup.sh --browser  plus Chromium and Playwright for the browser tests
#   scripts/setup.sh --fleet    plus nats-server (JetStream) and PostgreSQL, for the fleet tests
#                               (flags combine)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

WASM_BINDGEN_VERSION=0.2.130   # must equal the `wasm-bindgen` pin in Cargo.toml
WASM_SPLIT_VERSION=0.2.4       # wasm_split_cli_support's CLI, as cargo-leptos 0.3.11 uses the crate
TORCH_VERSION=2.11.0           # tch 0.24 links exactly this libtorch
BROWSER=0
FLEET=0
for flag in "$@"; do
  case "$flag" in
    --browser) BROWSER=1 ;;
    --fleet) FLEET=1 ;;
    *) echo "setup.sh: unknown flag $flag (use --browser, --fleet)" >&2; exit 2 ;;
  esac
done

# Each step says how long setup has been going, so a slow first run explains itself.
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
mkdir -p "$GRADLESS_CACHE"

apt_install() {
  # Installs Debian packages that are missing; silent when all are present.
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  step "Installing Debian packages: ${missing[*]} (a minute or two, once per machine)"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# --- libtorch -------------------------------------------------------------------------------
torch_installed() {
  # pip's record of the install and the library tch links, read from the disk: `import torch`
  # would take seconds of CPU on every run (scripts/run.sh starts in seconds when warm).
  local site
  for site in "$GRADLESS_VENV"/lib/python3*/site-packages; do
    compgen -G "$site/torch-$TORCH_VERSION.dist-info" >/dev/null \
      || compgen -G "$site/torch-$TORCH_VERSION+*.dist-info" >/dev/null || continue
    [ -x "$GRADLESS_VENV/bin/python" ] && [ -f "$site/torch/lib/libtorch_cpu.so" ] && return 0
  done
  return 1
}
if [ -n "${LIBTORCH:-}" ]; then
  echo "libtorch: using LIBTORCH=$LIBTORCH"
elif torch_installed; then
  echo "libtorch: PyTorch $TORCH_VERSION in $GRADLESS_VENV"
else
  step "Installing PyTorch $TORCH_VERSION into $GRADLESS_VENV for its libtorch (about 4.6 GB with the CUDA libraries, a few minutes once per machine)"
  if ! python3 -m venv "$GRADLESS_VENV" 2>/dev/null; then
    python3 -m pip install -q --user virtualenv && python3 -m virtualenv -q "$GRADLESS_VENV"
  fi
  "$GRADLESS_VENV/bin/pip" install -q --upgrade pip >/dev/null
  # torchvision is for the Python peer benchmark (bench/), which measures the same models.
  "$GRADLESS_VENV/bin/pip" install -q "torch==$TORCH_VERSION" "torchvision==0.26.0"
fi

# --- Python packages the tests use, pinned, in the venv ------------------------------------
# Installs NAME==VERSION unless its dist-info is there (DIST: the name as the dist-info spells it).
venv_package() {
  local name=$1 version=$2 dist=$3
  if compgen -G "$GRADLESS_VENV/lib/python3*/site-packages/$dist-$version.dist-info" >/dev/null; then
    echo "$name: $version"
  else
    step "Installing $name $version into $GRADLESS_VENV (seconds)"
    "$GRADLESS_VENV/bin/pip" install -q "$name==$version"
  fi
}
if [ -z "${LIBTORCH:-}" ]; then
  # Hugging Face transformers builds the same decoders from local configs (never the Hub)
  # to check Gradless's logits and tokens and to time its `generate` side by side (bench/).
  venv_package transformers 5.23.0 transformers
  # The test suite validates GET /api/openapi.json with the reference validator.
  venv_package openapi-spec-validator 0.9.0 openapi_spec_validator
  # scripts/fuzz-api.sh fuzzes the API from that document (scripts/test.sh runs it).
  venv_package schemathesis 4.32.5 schemathesis
fi

# --- CUDA's C runtime headers, for CUDA graph capture -----------------------------------------
# torch's wheel brings the CUDA runtime package (nvidia/cu13/include, cuda_runtime_api.h) but
# not the crt/ headers cuda_runtime.h includes; engine/build.rs compiles the CUDA graph
# functions only when both are there. A 134 KB wheel, of the runtime's own minor version.
if [ -z "${LIBTORCH:-}" ]; then
  for site in "$GRADLESS_VENV"/lib/python3*/site-packages; do
    inc="$site/nvidia/cu13/include"
    [ -f "$inc/cuda_runtime_api.h" ] || continue
    if [ -f "$inc/crt/host_config.h" ]; then
      echo "CUDA crt headers: present"
    else
      runtime="$(ls -d "$site"/nvidia_cuda_runtime-*.dist-info 2>/dev/null | head -1 | sed 's/.*nvidia_cuda_runtime-\([0-9]*\.[0-9]*\).*/\1/')"
      step "Installing CUDA's crt headers (nvidia-cuda-crt ~= ${runtime:-13.0}.0) for CUDA graph capture"
      "$GRADLESS_VENV/bin/pip" install -q --no-deps "nvidia-cuda-crt~=${runtime:-13.0}.0" \
        || echo "warning: nvidia-cuda-crt could not be installed: this build will say CUDA graphs are unavailable"
    fi
  done
fi

# --- the wasm32 target ----------------------------------------------------------------------
# rustup's target is the normal path. Where rustup cannot fetch it, Debian's rustc-web with
# its std sources builds std for wasm itself (-Zbuild-std); scripts/build-site.sh reads the
# choice from $GRADLESS_CACHE/wasm-toolchain.
if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  echo "wasm32: rustup target installed"
  echo rustup > "$GRADLESS_CACHE/wasm-toolchain"
elif [ -z "${GRADLESS_WASM_FALLBACK:-}" ] && { step "Adding the wasm32 target with rustup (seconds; bounded to 3 minutes)"; timeout 180 rustup target add wasm32-unknown-unknown; }; then
  echo rustup > "$GRADLESS_CACHE/wasm-toolchain"
else
  step "rustup could not add wasm32: using Debian's rustc-web and building std for wasm (fallback)"
  apt_install rustc-web cargo-web rust-web-src lld-22
  echo debian > "$GRADLESS_CACHE/wasm-toolchain"
fi

# --- wasm-bindgen CLI -----------------------------------------------------------------------
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" = "$WASM_BINDGEN_VERSION" ]; then
  echo "wasm-bindgen: $WASM_BINDGEN_VERSION"
else
  step "Compiling wasm-bindgen-cli $WASM_BINDGEN_VERSION (no prebuilt one on the registries: about 7 minutes on 2 cores, once per machine)"
  # Not --locked: its lockfile names a crate version the registry index lacks; see docs/ARCHITECTURE.md.
  cargo install -q wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

# --- wasm-split-cli: cuts the app's wasm at its lazy routes (scripts/build-site.sh) ----------
# It has no --version: cargo's list of installed crates says which one is there.
if cargo install --list 2>/dev/null | grep -q "^wasm_split_cli_support v$WASM_SPLIT_VERSION:" && command -v wasm-split-cli >/dev/null; then
  echo "wasm-split-cli: $WASM_SPLIT_VERSION"
else
  step "Compiling wasm-split-cli $WASM_SPLIT_VERSION (wasm_split_cli_support; about 2 minutes on 2 cores, once per machine)"
  cargo install -q --locked wasm_split_cli_support --version "$WASM_SPLIT_VERSION" --features build-binary
fi

# --- npm: ECharts (served by us), esbuild (bundles it), binaryen's wasm-opt -----------------
# Reinstalled when package-lock.json changed since the last install (npm keeps its own copy
# of the lock in node_modules/.package-lock.json, written after the install).
if [ -f node_modules/echarts/package.json ] && [ -x node_modules/esbuild/bin/esbuild ] \
    && [ -x node_modules/binaryen/bin/wasm-opt ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
  echo "npm: echarts, esbuild and binaryen present"
else
  step "Installing ECharts, esbuild and binaryen from npm (seconds)"
  npm ci --no-audit --no-fund --loglevel=error
fi

# --- browser tests ----------------------------------------------------------------------------
if [ "$BROWSER" = 1 ]; then
  apt_install chromium chromium-driver
  if [ -d end2end/node_modules/@playwright/test ] && [ -f end2end/node_modules/axe-core/axe.min.js ]; then
    echo "playwright and axe-core: present"
  else
    step "Installing Playwright's test runner (it drives Debian's Chromium; no browser download) and axe-core"
    (cd end2end && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
# --- fleet services ---------------------------------------------------------------------------
# Debian 12's nats-server (2.9, JetStream built in) and PostgreSQL 15. Only their binaries are
# used: the tests start their own instances in a scratch folder (scripts/services.sh); the
# packages' system services are not needed and are left as the packages set them.
if [ "$FLEET" = 1 ]; then
  # openssl: the hardened-NATS test makes its own CA and server certificate; nftables and
  # iproute2: the fault test cuts and loses packets on links between network namespaces.
  if command -v nats-server >/dev/null && compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null \
    && command -v openssl >/dev/null && command -v nft >/dev/null && command -v ip >/dev/null; then
    echo "fleet services: $(nats-server --version), PostgreSQL $(ls /usr/lib/postgresql | sort -V | tail -1), $(nft --version)"
  else
    apt_install nats-server postgresql openssl nftables iproute2
  fi
fi
echo "setup: done in ${SECONDS}s"
