// The browser assets' last step, run by scripts/build-site.sh with node:
//
//   node scripts/site-assets.mjs STAGE_DIR SITE_DIR
//
// STAGE_DIR holds wasm-bindgen's output (gradless.js, gradless_bg.wasm). This script
//  1. builds the site's ECharts from npm's `echarts` with esbuild (a prebuilt binary in its
//     npm package) and terser, both from npm: only the chart types and components
//     app/src/charts.rs draws, not the 1 MB full build;
//  2. minifies style/main.css, wasm-bindgen's glue and app/js/record-embed.js (what draws a
//     page served without the wasm) with the same esbuild;
//  3. gives every asset a content-hashed name (pkg/gradless.<hash>.js, ...), so the server
//     can tell browsers to keep it for a year (`immutable`): a changed file has a new name;
//     and writes each one precompressed beside it, brotli (.br) and gzip (.gz), at the highest
//     levels, which a server cannot afford per request;
//  4. writes SITE_DIR/asset-manifest.json, from which the page shell (app/src/lib.rs) takes
//     the names, and removes the hashed files of earlier builds.
// Content-addressed names make the whole step skip work when nothing changed.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

const [stage, site] = process.argv.slice(2);
if (!stage || !site) {
  console.error('usage: node scripts/site-assets.mjs STAGE_DIR SITE_DIR');
  process.exit(2);
}
const pkg = path.join(site, 'pkg');
fs.mkdirSync(pkg, { recursive: true });

// --- 1. ECharts, reduced to what the charts use ---------------------------------------------
// A chart type or component the charts start using (dataZoom, graphic, a scrolling legend,
// markPoint, ...) must be added here, or ECharts silently leaves that part of the option out.
// Each costs a few KB; the page-weight test (end2end/tests/page-weight.spec.ts) keeps count.
const echartsEntry = `
import * as echarts from 'echarts/core';
// Series: the Lab's latency and memory lines, the comparison and pitfall bars and lines.
import { LineChart, BarChart } from 'echarts/charts';
// Aria: the charts' screen-reader descriptions and the bars' decal patterns. The legends
// are plain: where they wrap, the app makes room for their rows (app/src/charts/fit.rs), so
// no legend pages its names ("1/3") and the scrolling legend's code is not sent.
import {
  TitleComponent, TooltipComponent, LegendComponent, GridComponent,
  MarkLineComponent, MarkAreaComponent, AriaComponent,
} from 'echarts/components';
import { CanvasRenderer } from 'echarts/renderers';
// The 'dark' theme (prefers-color-scheme: dark) is registered by echarts/core itself.
echarts.use([
  LineChart, BarChart,
  TitleComponent, TooltipComponent, LegendComponent, GridComponent,
  MarkLineComponent, MarkAreaComponent, AriaComponent,
  CanvasRenderer,
]);
// The same global the full build sets: the app calls echarts.init, getInstanceByDom,
// dispose, and the instances' setOption and getDataURL.
window.echarts = echarts;
// The page loads this script without blocking anything: code that found no ECharts yet
// can wait for this event.
window.dispatchEvent(new Event('echarts-ready'));
`;

const echartsVersion = JSON.parse(fs.readFileSync('node_modules/echarts/package.json', 'utf8')).version;
const echartsOut = path.join(stage, 'echarts.js');
const echartsStamp = path.join(stage, 'echarts.built-from');
const echartsWant = sha256(`${echartsVersion}\nterser passes 2\n${echartsEntry}`);
if (!fs.existsSync(echartsOut) || read(echartsStamp) !== echartsWant) {
  const { build } = await import('esbuild');
  const bundle = await build({
    stdin: { contents: echartsEntry, resolveDir: process.cwd(), loader: 'js' },
    bundle: true,
    minify: true,
    format: 'iife',
    target: 'es2020',
    // ECharts' development checks sit behind __DEV__: a production build drops them.
    define: { __DEV__: 'false', 'process.env.NODE_ENV': '"production"' },
    legalComments: 'none',
    write: false,
    logLevel: 'warning',
  });
  // terser squeezes esbuild's output a further 4% (brotli), worth its ~15 s once per
  // ECharts version: the bundle is rebuilt only when the entry or the version changes.
  const { minify } = await import('terser');
  const min = await minify(bundle.outputFiles[0].text, { compress: { passes: 2 }, mangle: true, ecma: 2020 });
  fs.writeFileSync(echartsOut, min.code);
  fs.writeFileSync(echartsStamp, echartsWant);
  console.log(`echarts ${echartsVersion}: built ${kib(fs.statSync(echartsOut).size)} (line, bar, marks, legend, tooltip, title, grid, aria; canvas)`);
}

// --- 2. the stylesheet and wasm-bindgen's glue, minified -----------------------------------
// style/main.css keeps its comments (they say why a rule is there); what is sent is esbuild's
// minified copy, 28% smaller once brotli-compressed. wasm-bindgen writes its glue readable:
// minified it is 21% smaller (brotli), its exports and the import object's property names
// kept (esbuild renames locals only). No syntax is lowered (no target).
const cssOut = path.join(stage, 'main.min.css');
const glueOut = path.join(stage, 'gradless.min.js');
// The script that draws a page served without the wasm (app/src/static_page.rs), minified too.
const recordEmbedOut = path.join(stage, 'record-embed.min.js');
{
  const { transform } = await import('esbuild');
  const css = await transform(fs.readFileSync('style/main.css', 'utf8'), { loader: 'css', minify: true, legalComments: 'none' });
  if (read(cssOut) !== css.code) fs.writeFileSync(cssOut, css.code);
  const glue = await transform(fs.readFileSync(path.join(stage, 'gradless.js'), 'utf8'), { loader: 'js', format: 'esm', minify: true, legalComments: 'none' });
  if (read(glueOut) !== glue.code) fs.writeFileSync(glueOut, glue.code);
  const recordEmbed = await transform(fs.readFileSync('app/js/record-embed.js', 'utf8'), { loader: 'js', minify: true, legalComments: 'none' });
  if (read(recordEmbedOut) !== recordEmbed.code) fs.writeFileSync(recordEmbedOut, recordEmbed.code);
}
const LOADER_SLOT = '@@gradless-split-loader@@';
const GLUE_SLOT = '@@gradless-glue@@';

// --- 3. content-hashed names, precompressed -------------------------------------------------
const manifest = {};
const keep = new Set();
const assets = {
  js: [glueOut, 'gradless', '.js'],
  wasm: [path.join(stage, 'gradless_bg.wasm'), 'gradless_bg', '.wasm'],
  css: [cssOut, 'gradless', '.css'],
  echarts: [echartsOut, 'echarts', '.js'],
  record_embed: [recordEmbedOut, 'record-embed', '.js'],
};
// The split wasm (build-site.sh): each lazy module (split_*.wasm, chunk_*.wasm) by its own
// hash; the loader (__wasm_split.js) names them, and it and the glue import each other, so
// the two share one hash, of both texts with those names left out: a change to either file
// renames both, and a cached loader never meets another build's glue.
const split = splitModules();
if (split) {
  for (const [file, name] of Object.entries(split.chunks)) publish(path.join(stage, file), name);
  const glueName = `gradless.${split.hash}.js`;
  const loaderName = `__wasm_split.${split.hash}.js`;
  fs.writeFileSync(glueOut, split.glue.replaceAll(LOADER_SLOT, `./${loaderName}`));
  const loaderOut = path.join(stage, '__wasm_split.min.js');
  fs.writeFileSync(loaderOut, split.loader.replaceAll(GLUE_SLOT, `./${glueName}`));
  publish(glueOut, glueName);
  publish(loaderOut, loaderName);
  manifest.js = `/pkg/${glueName}`;
  manifest.split = `/pkg/${loaderName}`;
  // What each lazy page needs, for the page shell's preload hints (app/src/routes.rs).
  manifest.chunks = Object.fromEntries(
    Object.entries(split.needs).map(([page, files]) => [page, files.map((f) => `/pkg/${split.chunks[f]}`)]),
  );
  delete assets.js;
}
for (const [key, [src, stem, ext]] of Object.entries(assets)) {
  const bytes = fs.readFileSync(src);
  const name = `${stem}.${sha256(bytes).slice(0, 16)}${ext}`;
  publish(src, name);
  manifest[key] = `/pkg/${name}`;
}

/** Writes `src` as pkg/`name` with its brotli and gzip copies, unless they are there. */
function publish(src, name) {
  const ext = path.extname(name);
  const bytes = fs.readFileSync(src);
  const dest = path.join(pkg, name);
  if (!fs.existsSync(dest + '.br') || !fs.existsSync(dest + '.gz') || !fs.existsSync(dest)) {
    const br = zlib.brotliCompressSync(bytes, {
      params: {
        [zlib.constants.BROTLI_PARAM_QUALITY]: zlib.constants.BROTLI_MAX_QUALITY,
        [zlib.constants.BROTLI_PARAM_SIZE_HINT]: bytes.length,
        [zlib.constants.BROTLI_PARAM_MODE]: ext === '.wasm' ? zlib.constants.BROTLI_MODE_GENERIC : zlib.constants.BROTLI_MODE_TEXT,
      },
    });
    const gz = zlib.gzipSync(bytes, { level: 9 });
    // Written under temporary names and renamed: a server never sees half a file.
    for (const [file, data] of [[dest, bytes], [dest + '.br', br], [dest + '.gz', gz]]) {
      fs.writeFileSync(file + '.tmp', data);
      fs.renameSync(file + '.tmp', file);
    }
    console.log(`${name}: ${kib(bytes.length)}, gzip ${kib(gz.length)}, brotli ${kib(br.length)}`);
  }
  for (const suffix of ['', '.br', '.gz']) keep.add(name + suffix);
}

/**
 * The split modules in the stage, if the app was split: their hashed names, the minified
 * glue and loader with the names they give each other replaced by slots, their shared hash,
 * and which modules each lazy page needs (from the loader's `export const` lines: a page's
 * own module and the shared chunks it waits for).
 */
function splitModules() {
  const loaderSrc = path.join(stage, '__wasm_split.js');
  if (!fs.existsSync(loaderSrc)) return null;
  const files = fs.readdirSync(stage).filter((f) => /^(split|chunk)_.*\.wasm$/.test(f)).sort();
  const chunks = Object.fromEntries(files.map((f) => {
    const stem = f.slice(0, -'.wasm'.length);
    return [f, `${stem}.${sha256(fs.readFileSync(path.join(stage, f))).slice(0, 16)}.wasm`];
  }));
  let loader = fs.readFileSync(loaderSrc, 'utf8');
  // Which modules each lazy page needs, read before minifying renames the variables:
  //   const __chunk_3 = makeLoad(() => { ... "./chunk_3_x.wasm" ... }, []);
  //   export const __wasm_split_load_NAME = wrapAsyncCb(makeLoad(() => { ... "./split_NAME.wasm" ... }, [__chunk_3]));
  const chunkVars = {};
  for (const m of loader.matchAll(/const (__chunk_\d+) = makeLoad\([\s\S]*?"\.\/([\w.-]+\.wasm)"/g)) chunkVars[m[1]] = m[2];
  const needs = {};
  for (const m of loader.matchAll(/export const __wasm_split_load_(\w+) = wrapAsyncCb\(makeLoad\(([\s\S]*?), \[([\w, ]*)\]\)\)/g)) {
    const own = /"\.\/([\w.-]+\.wasm)"/.exec(m[2]);
    const deps = m[3].split(',').map((v) => v.trim()).filter(Boolean).map((v) => chunkVars[v]);
    // The lazy function's name without the hash of its place in the source.
    needs[m[1].replace(/_\d+$/, '')] = [...deps, ...(own ? [own[1]] : [])];
  }
  for (const [file, name] of Object.entries(chunks)) {
    const literal = `"./${file}"`;
    if (!loader.includes(literal)) throw new Error(`the split loader does not name ${file}`);
    loader = loader.replaceAll(literal, `"./${name}"`);
  }
  if (!loader.includes('from "./gradless.js"')) throw new Error('the split loader does not import ./gradless.js');
  loader = loader.replace('from "./gradless.js"', `from "${GLUE_SLOT}"`);
  // The glue imports the loader (once per function the main module imports from it); the
  // wasm's import module of the same name (a key of the imports object) stays as it is.
  let glue = fs.readFileSync(glueOut, 'utf8');
  const imports = /from\s*"\.\/__wasm_split\.js"/g;
  if (!imports.test(glue)) throw new Error('the glue does not import ./__wasm_split.js');
  glue = glue.replace(imports, `from"${LOADER_SLOT}"`);
  return { chunks, needs, glue, loader, hash: sha256(`${glue}\0${loader}`).slice(0, 16) };
}

// --- 4. the manifest, and no stale files -----------------------------------------------------
const manifestFile = path.join(site, 'asset-manifest.json');
const text = JSON.stringify(manifest, null, 1) + '\n';
if (read(manifestFile) !== text) {
  fs.writeFileSync(manifestFile + '.tmp', text);
  fs.renameSync(manifestFile + '.tmp', manifestFile);
}
for (const f of fs.readdirSync(pkg)) {
  if (!keep.has(f)) fs.rmSync(path.join(pkg, f), { recursive: true, force: true });
}
// The unhashed ECharts of earlier builds.
fs.rmSync(path.join(site, 'echarts.min.js'), { force: true });

function sha256(data) {
  return createHash('sha256').update(data).digest('hex');
}
function read(file) {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}
function kib(n) {
  return `${(n / 1024).toFixed(1)} KiB`;
}
