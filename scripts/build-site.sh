#!/usr/bin/env bash
# Builds the browser side into target/site (the server's --site-root):
#   pkg/gradless_bg.wasm + pkg/gradless.js   the hydrated Leptos app (wasm-bindgen --target web)
#   pkg/gradless.css                         style/main.css
#   echarts.min.js and public/*              served from the site root, never from a CDN
# The plain path (cargo + wasm-bindgen) keeps a cold setup light; `cargo leptos build` produces
# the same layout for those who have cargo-leptos.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

SITE=target/site
PROFILE=${GRADLESS_WASM_PROFILE:-wasm-release}
mkdir -p "$SITE/pkg"

echo "==> Building the browser app (wasm32, profile $PROFILE)"
args=(build --profile "$PROFILE" -p app --lib --target wasm32-unknown-unknown --no-default-features --features hydrate)
if [ "$(cat "$GRADLESS_CACHE/wasm-toolchain" 2>/dev/null)" = debian ]; then
  # Where rustup could not add the wasm32 target, Debian's rustc-web builds std for wasm
  # from rust-web-src (scripts/setup.sh chose this fallback).
  RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 cargo "${args[@]}" -Zbuild-std=std,panic_abort
else
  cargo "${args[@]}"
fi

wasm="$CARGO_TARGET_DIR/wasm32-unknown-unknown/$PROFILE/app.wasm"
# wasm-bindgen and wasm-opt -Oz take most of a minute on 2 cores: skip both when the compiled
# wasm (and the wasm-opt choice) is what the site was last built from.
stamp="$SITE/pkg/.built-from"
want="$(sha256sum "$wasm" | cut -d' ' -f1) opt=${GRADLESS_NO_WASM_OPT:-on}"
if [ -f "$SITE/pkg/gradless_bg.wasm" ] && [ -f "$SITE/pkg/gradless.js" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "wasm unchanged: keeping $SITE/pkg"
else
  rm -f "$stamp"
  wasm-bindgen --target web --no-typescript --out-dir "$SITE/pkg" --out-name gradless "$wasm"
  if [ -x node_modules/binaryen/bin/wasm-opt ] && [ -z "${GRADLESS_NO_WASM_OPT:-}" ]; then
    # npm's binaryen: Debian bookworm's (version 108) produces a wasm that fails to
    # instantiate ("WebAssembly.Table.set(): Argument 1 is invalid").
    node_modules/binaryen/bin/wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
      --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
      "$SITE/pkg/gradless_bg.wasm" -o "$SITE/pkg/gradless_bg.wasm"
  fi
  echo "$want" > "$stamp"
fi
cp style/main.css "$SITE/pkg/gradless.css"
cp -r public/. "$SITE/"
cp node_modules/echarts/dist/echarts.min.js "$SITE/echarts.min.js"
echo "site: $(du -sh "$SITE" | cut -f1) in $SITE"
