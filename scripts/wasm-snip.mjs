#!/usr/bin/env node
// Replaces the bodies of named wasm functions with a trap, so that wasm-opt can drop
// everything only they reach.
//
//   node scripts/wasm-snip.mjs IN.wasm OUT.wasm REGEX...
//
// Why (scripts/build-site.sh): Leptos compiles, for every view the app converts with
// `.into_any()` and for every router branch, an *async* hydration path
// (`RenderHtml::hydrate_async`, used by `leptos::mount::hydrate_from_async` and lazy
// islands) next to the synchronous one. The app hydrates synchronously
// (`leptos::mount::hydrate_body`), so that path is never taken, yet `AnyView` keeps it in
// the function table and the linker cannot drop it: 12% of the app's code.
//
// A function whose (demangled) name matches a REGEX keeps its signature and index (the
// table still points at it) and its body becomes `unreachable`, unless code that stays
// calls it directly (Leptos defines small helpers inside the async path that the
// synchronous one calls too): those keep their bodies, to a fixpoint. What is replaced is
// reached only through the function table; were it ever called, the page would fail
// loudly (the browser tests hydrate every page), never silently misbehave.
//
// Needs the wasm's name section (wasm-bindgen keeps it; wasm-opt run afterwards drops it).
// Prints how many functions and code bytes it replaced.
import fs from 'node:fs';

const [input, output, ...patterns] = process.argv.slice(2);
if (!input || !output || patterns.length === 0) {
  console.error('usage: wasm-snip.mjs IN.wasm OUT.wasm REGEX...');
  process.exit(2);
}
const regexes = patterns.map((p) => new RegExp(p));
const bytes = fs.readFileSync(input);
if (bytes.readUInt32LE(0) !== 0x6d736100) throw new Error(`${input} is not a wasm module`);

function leb(pos) {
  let result = 0, shift = 0, b;
  do {
    b = bytes[pos++];
    result += (b & 0x7f) * 2 ** shift;
    shift += 7;
  } while (b & 0x80);
  return [result, pos];
}
function encodeLeb(n) {
  const out = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return Buffer.from(out);
}
function skipLimits(pos) {
  const flags = bytes[pos++];
  [, pos] = leb(pos);
  if (flags & 1) [, pos] = leb(pos);
  return pos;
}

// The sections, and what the replacement needs from them.
const sections = [];
let importedFunctions = 0;
const names = new Map();
for (let pos = 8; pos < bytes.length; ) {
  const id = bytes[pos];
  const [size, start] = leb(pos + 1);
  const end = start + size;
  sections.push({ id, from: pos, start, end });
  if (id === 2) {
    // Imports: functions imported come first in the function index space.
    let [count, p] = leb(start);
    for (let i = 0; i < count; i++) {
      let len;
      [len, p] = leb(p); p += len; // module
      [len, p] = leb(p); p += len; // field
      const kind = bytes[p++];
      if (kind === 0) { importedFunctions++; [, p] = leb(p); }
      else if (kind === 1) { p += 1; p = skipLimits(p); }
      else if (kind === 2) { p = skipLimits(p); }
      else if (kind === 3) { p += 2; }
      else if (kind === 4) { p += 1; [, p] = leb(p); }
      else throw new Error(`unknown import kind ${kind}`);
    }
  } else if (id === 0) {
    let [len, p] = leb(start);
    const name = bytes.toString('utf8', p, p + len);
    p += len;
    if (name === 'name') {
      while (p < end) {
        const sub = bytes[p];
        const [subSize, subStart] = leb(p + 1);
        if (sub === 1) {
          let [count, q] = leb(subStart);
          for (let i = 0; i < count; i++) {
            let index, n;
            [index, q] = leb(q);
            [n, q] = leb(q);
            names.set(index, bytes.toString('utf8', q, q + n));
            q += n;
          }
        }
        p = subStart + subSize;
      }
    }
  }
  pos = end;
}
if (names.size === 0) throw new Error(`${input} has no function names: snip before wasm-opt`);

const code = sections.find((s) => s.id === 10);
if (!code) throw new Error(`${input} has no code section`);

// Every function body, and the functions each one calls directly (or takes by `ref.func`).
const bodies = [];
{
  let [count, p] = leb(code.start);
  for (let i = 0; i < count; i++) {
    const [size, start] = leb(p);
    bodies.push({ from: p, start, end: start + size, index: importedFunctions + i });
    p = start + size;
  }
}
function directCallees(body) {
  const out = [];
  let [groups, p] = leb(body.start);
  for (let g = 0; g < groups; g++) { [, p] = leb(p); p++; }
  const u = () => { let v; [v, p] = leb(p); return v; };
  while (p < body.end) {
    const op = bytes[p++];
    if (op === 0x10 || op === 0x12 || op === 0xd2) out.push(u());
    else if (op === 0x02 || op === 0x03 || op === 0x04) {
      // Block type: 0x40, a value type (one byte, 0x6f..0x7f) or a type index (s33).
      if (bytes[p] === 0x40 || (bytes[p] >= 0x6f && bytes[p] <= 0x7f)) p++; else u();
    } else if (op === 0x0c || op === 0x0d || (op >= 0x20 && op <= 0x26) || op === 0x3f || op === 0x40 || op === 0xd0) u();
    else if (op === 0x0e) { const n = u(); for (let k = 0; k <= n; k++) u(); }
    else if (op === 0x11 || op === 0x13) { u(); u(); }
    else if (op === 0x1c) { const n = u(); p += n; }
    else if (op >= 0x28 && op <= 0x3e) { const align = u(); if (align & 0x40) u(); u(); }
    else if (op === 0x41 || op === 0x42) u();
    else if (op === 0x43) p += 4;
    else if (op === 0x44) p += 8;
    else if (op === 0xfc) {
      const sub = u();
      if (sub <= 7) {}
      else if (sub === 8 || sub === 10 || sub === 12 || sub === 14) { u(); u(); }
      else if (sub === 9 || sub === 11 || sub === 13 || (sub >= 15 && sub <= 17)) u();
      else throw new Error(`unknown 0xfc instruction ${sub} in function ${body.index}`);
    } else if (op === 0xfd || op === 0xfe || (op >= 0x06 && op <= 0x09) || op === 0x14 || op === 0x15) {
      throw new Error(`instruction 0x${op.toString(16)} in function ${body.index}: extend wasm-snip.mjs`);
    }
  }
  return out;
}

// The candidates, less any that code which stays calls directly (to a fixpoint): a shared
// helper named after the async path (Leptos defines small inner functions there that the
// synchronous path calls too) must keep its body. What remains is reached only through
// the function table, from the async path itself.
const snip = new Set(bodies.filter((b) => regexes.some((re) => re.test(names.get(b.index) ?? ''))).map((b) => b.index));
const matched = snip.size;
const calls = new Map(bodies.map((b) => [b.index, directCallees(b)]));
for (const s of sections.filter((s) => s.id === 7)) {
  // Exported functions stay.
  let [count, p] = leb(s.start);
  for (let i = 0; i < count; i++) {
    let len, index;
    [len, p] = leb(p); p += len;
    const kind = bytes[p++];
    [index, p] = leb(p);
    if (kind === 0) snip.delete(index);
  }
}
for (let changed = true; changed; ) {
  changed = false;
  for (const [caller, callees] of calls) {
    if (snip.has(caller)) continue;
    for (const callee of callees) if (snip.delete(callee)) changed = true;
  }
}

const trap = Buffer.from([3, 0x00, 0x00, 0x0b]); // body size 3: no locals, unreachable, end
let saved = 0;
const parts = bodies.map((b) => {
  if (!snip.has(b.index)) return bytes.subarray(b.from, b.end);
  saved += b.end - b.from - trap.length;
  return trap;
});
const payload = Buffer.concat([encodeLeb(bodies.length), ...parts]);
const out = Buffer.concat([
  bytes.subarray(0, code.from),
  Buffer.from([10]),
  encodeLeb(payload.length),
  payload,
  bytes.subarray(code.end),
]);
fs.writeFileSync(output, out);
console.log(
  `wasm-snip: ${snip.size} functions replaced by a trap (${saved} code bytes); ` +
    `${matched - snip.size} more matched but are called directly by code that stays`,
);
