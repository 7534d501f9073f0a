#!/usr/bin/env bash
# Builds the browser side into target/site (the server's --site-root):
#   pkg/gradless_bg.<hash>.wasm + pkg/gradless.<hash>.js  the hydrated Leptos app's main module: the Lab and the
#                                                        page chrome (wasm-bindgen --target web; the glue minified)
#   pkg/split_*.<hash>.wasm, pkg/chunk_*.<hash>.wasm     the other pages' code, one module per lazy route or function
#                                                        and one per piece several of them share (app/src/routes.rs)
#   pkg/__wasm_split.<hash>.js                           the loader that fetches those on demand
#   pkg/gradless.<hash>.css                              style/main.css, minified
#   pkg/echarts.<hash>.js                                ECharts, only the parts the charts use
#   asset-manifest.json                                  those names, for the page shell
#   public/*                                             the favicon; nothing comes from a CDN
# Each pkg/ file has brotli (.br) and gzip (.gz) copies beside it (scripts/site-assets.mjs).
# The plain path (cargo + wasm-bindgen) keeps a cold setup light. `cargo leptos build` writes
# unhashed names without a manifest, which the page shell falls back to (app/src/shell.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

SITE=target/site
# wasm-bindgen's output before it gets its hashed name (outside the served site).
STAGE=target/site-stage
PROFILE=${GRADLESS_WASM_PROFILE:-wasm-release}
mkdir -p "$SITE/pkg" "$STAGE"

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
stamp="$STAGE/.built-from"
# Whether wasm-opt will run is part of the stamp: a site built before npm's binaryen was
# installed must not be kept once it is (that wasm is several times larger).
opt=off
if [ -x node_modules/binaryen/bin/wasm-opt ] && [ -z "${GRADLESS_NO_WASM_OPT:-}" ]; then opt=on; fi
# Leptos's async hydration path, which the app never takes (it hydrates synchronously with
# hydrate_body): 12% of the code, 95 KB of the brotli wasm. scripts/wasm-snip.mjs says why.
# The futures' bodies (`...::hydrate_async::{{closure}}`), then their drop glue, which the
# futures' vtables keep: only where the snip can show that nothing else uses it, since the
# compiler may merge one drop function for a future and a type in use (it does: a few
# are kept for that reason).
SNIP=('^(?!core::ptr::drop_in_place).*::hydrate_async::\{\{closure\}\}' --drops '^core::ptr::drop_in_place<.*hydrate_async')
command -v wasm-split-cli >/dev/null || { echo "error: wasm-split-cli is missing: run scripts/setup.sh" >&2; exit 1; }
want="$(sha256sum "$wasm" scripts/wasm-snip.mjs "$(command -v wasm-split-cli)" | cut -d' ' -f1 | tr '\n' ' ')opt=$opt snip=${SNIP[*]}"
if [ -f "$STAGE/gradless_bg.wasm" ] && [ -f "$STAGE/gradless.js" ] && [ -f "$STAGE/__wasm_split.js" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "wasm unchanged: keeping $STAGE"
else
  rm -f "$stamp"
  # The split (app/src/routes.rs, docs/ARCHITECTURE.md "How the site is split"): the
  # linker's wasm, with its relocations (--emit-relocs, .cargo/config.toml), cut at the
  # `#[lazy]` / `#[lazy_route]` points into the main module (the Lab), one module per lazy
  # page or function (split_*.wasm), the code several of them share (chunk_*.wasm), and the
  # loader that fetches them on demand (__wasm_split.js).
  rm -rf "$STAGE/split" "$STAGE"/split_*.wasm "$STAGE"/chunk_*.wasm "$STAGE/__wasm_split.js"
  # The snip first, on the linker's wasm (its relocations rewritten to match): the split
  # then never sees what only the async path reaches, in any module. On the main module
  # alone, after the split, it found 16 KB of the 141 KB: the rest sits in the pages' chunks.
  node scripts/wasm-snip.mjs "$wasm" "$STAGE/app.snipped.wasm" "${SNIP[@]}"
  wasm-split-cli "$STAGE/app.snipped.wasm" "$STAGE/split" --target web --out-name gradless
  rm -f "$STAGE/app.snipped.wasm"
  # The main module through wasm-bindgen as before; the split modules import what they need
  # from it (its exports, which --keep-lld-exports keeps), so they need no bindgen.
  wasm-bindgen --target web --no-typescript --keep-lld-exports --out-dir "$STAGE" --out-name gradless "$STAGE/split/gradless.wasm"
  mv "$STAGE/split/__wasm_split.js" "$STAGE/"
  for m in "$STAGE"/split/*.wasm; do
    [ "$(basename "$m")" = gradless.wasm ] || mv "$m" "$STAGE/"
  done
  if [ "$opt" = on ]; then
    # npm's binaryen: Debian bookworm's (version 108) produces a wasm that fails to
    # instantiate ("WebAssembly.Table.set(): Argument 1 is invalid"). -Os rather than -Oz:
    # 2% more raw bytes, but 0.5% fewer once brotli-compressed, which is what is sent.
    # Every module, as many at once as there are cores (most of a small module's time is
    # binaryen's start-up).
    ls "$STAGE/gradless_bg.wasm" "$STAGE"/split_*.wasm "$STAGE"/chunk_*.wasm 2>/dev/null \
      | xargs -P "$(nproc)" -I{} node_modules/binaryen/bin/wasm-opt -Os --strip-producers --strip-target-features --enable-bulk-memory \
        --enable-nontrapping-float-to-int --enable-sign-ext --enable-mutable-globals \
        --enable-reference-types --enable-multivalue {} -o {}
  fi
  echo "$want" > "$stamp"
fi
cp -r public/. "$SITE/"
# ECharts, hashed names, brotli + gzip, the manifest; skips what is already there.
node scripts/site-assets.mjs "$STAGE" "$SITE"
echo "site: $(du -sh "$SITE" | cut -f1) in $SITE"
