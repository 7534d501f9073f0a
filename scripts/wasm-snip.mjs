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
// `--drops REGEX` also replaces the drop glue of those futures (`drop_in_place<...>`),
// which the futures' vtables keep in the table, under stricter conditions, since the
// compiler may merge identical drop functions and give the merged one a single name: a
// matching function is replaced only if no code that stays calls it or takes its table
// index as a constant, and every place its table index appears in the data is the drop
// slot of a vtable whose method (`Future::poll`, three words on) is a replaced body. A
// drop function shared with a type in use fails one of these and keeps its body.
//
// Needs the wasm's name section (the linker's and wasm-bindgen's keep it; wasm-opt drops
// it). scripts/build-site.sh runs it on the linker's output, before wasm-split-cli cuts it
// into modules, so no module carries the async path: that wasm keeps its relocations
// (`--emit-relocs`), and `reloc.CODE` is rewritten to match the new bodies (those in a
// replaced body dropped, the others moved with theirs); its names are mangled, and read as
// rustc-demangle writes them. Run on the main module after the split instead, it found 30
// of the 352 functions: the rest sit in the pages' modules.
// Prints how many functions and code bytes it replaced.
import fs from 'node:fs';

const args = process.argv.slice(2);
let dropPattern = null;
const at = args.indexOf('--drops');
if (at >= 0) [, dropPattern] = args.splice(at, 2);
const [input, output, ...patterns] = args;
if (!input || !output || patterns.length === 0 || (at >= 0 && !dropPattern)) {
  console.error('usage: wasm-snip.mjs IN.wasm OUT.wasm REGEX... [--drops REGEX]');
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
            names.set(index, demangle(bytes.toString('utf8', q, q + n)));
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

/**
 * A symbol name as rustc-demangle writes it, for the linker's output (wasm-bindgen writes
 * its names demangled already): Rust's legacy mangling (`_ZN...E`, which the crates
 * here use) is read; any other name is left as it is.
 */
function demangle(name) {
  if (!name.startsWith('_ZN')) return name;
  const parts = [];
  let p = 3;
  while (p < name.length && name[p] !== 'E') {
    const m = /^\d+/.exec(name.slice(p));
    if (!m) return name;
    p += m[0].length;
    parts.push(name.slice(p, p + Number(m[0])));
    p += Number(m[0]);
  }
  if (parts.length && /^h[0-9a-f]{16}$/.test(parts[parts.length - 1])) parts.pop();
  const escapes = { SP: '@', BP: '*', RF: '&', LT: '<', GT: '>', LP: '(', RP: ')', C: ',' };
  return parts
    .map((part) =>
      part
        .replace(/^_\$/, '$')
        .replace(/\$(SP|BP|RF|LT|GT|LP|RP|C)\$/g, (_, e) => escapes[e])
        .replace(/\$u([0-9a-f]+)\$/g, (_, hex) => String.fromCodePoint(parseInt(hex, 16)))
        .replace(/\.\./g, '::'),
    )
    .join('::');
}

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
function directCallees(body, consts = []) {
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
    else if (op === 0x41) consts.push(u());
    else if (op === 0x42) u();
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

// The futures' drop glue (`--drops`), to a fixpoint with the conditions above.
let drops = 0;
if (dropPattern) {
  const dropRe = new RegExp(dropPattern);
  const exported = new Set();
  for (const s of sections.filter((s) => s.id === 7)) {
    let [count, p] = leb(s.start);
    for (let i = 0; i < count; i++) {
      let len, index;
      [len, p] = leb(p); p += len;
      const kind = bytes[p++];
      [index, p] = leb(p);
      if (kind === 0) exported.add(index);
    }
  }
  // The table: one active segment of function indices (what wasm-ld writes); anything
  // else and no drop glue is replaced.
  const tableOf = new Map(); // function -> its table indices
  const inTable = new Map(); // table index -> function
  const elem = sections.find((s) => s.id === 9);
  let tableKnown = false;
  if (elem) {
    let [count, p] = leb(elem.start);
    if (count === 1 && bytes[p] === 0 && bytes[p + 1] === 0x41) {
      let offset;
      [offset, p] = leb(p + 2);
      if (bytes[p++] === 0x0b) {
        let n;
        [n, p] = leb(p);
        for (let i = 0; i < n; i++) {
          let f;
          [f, p] = leb(p);
          inTable.set(offset + i, f);
          if (!tableOf.has(f)) tableOf.set(f, []);
          tableOf.get(f).push(offset + i);
        }
        tableKnown = true;
      }
    }
  }
  // Every 32-bit word of the data, at every byte offset (conservative: a drop index that
  // turns up unaligned, as part of something else, only keeps that drop's body).
  const data = sections.filter((s) => s.id === 11);
  const occurrences = new Map(); // table index -> [the word three words on, or -1]
  if (tableKnown) {
    const wanted = new Set();
    for (const b of bodies) {
      if (dropRe.test(names.get(b.index) ?? '') && !exported.has(b.index)) {
        for (const t of tableOf.get(b.index) ?? []) wanted.add(t);
      }
    }
    for (const s of data) {
      let [count, p] = leb(s.start);
      for (let i = 0; i < count; i++) {
        const flags = bytes[p++];
        if (flags === 2) [, p] = leb(p);
        if (flags !== 1) { while (bytes[p] !== 0x0b) p++; p++; }
        let n;
        [n, p] = leb(p);
        for (let q = p; q + 4 <= p + n; q++) {
          const word = bytes.readUInt32LE(q);
          if (!wanted.has(word)) continue;
          if (!occurrences.has(word)) occurrences.set(word, []);
          occurrences.get(word).push(q + 16 <= p + n ? bytes.readUInt32LE(q + 12) : -1);
        }
        p += n;
      }
    }
  }
  const constsOf = new Map(bodies.map((b) => { const c = []; directCallees(b, c); return [b.index, c]; }));
  const dropSnip = new Set(
    tableKnown
      ? bodies.filter((b) => dropRe.test(names.get(b.index) ?? '') && !exported.has(b.index) && !snip.has(b.index)).map((b) => b.index)
      : [],
  );
  const vtableOnly = (f) =>
    (tableOf.get(f) ?? []).every((t) =>
      (occurrences.get(t) ?? []).every((poll) => inTable.has(poll) && snip.has(inTable.get(poll))),
    );
  for (const f of [...dropSnip]) if (!vtableOnly(f)) dropSnip.delete(f);
  for (let changed = true; changed; ) {
    changed = false;
    const gone = (f) => snip.has(f) || dropSnip.has(f);
    const takenIndices = new Set();
    for (const b of bodies) {
      if (gone(b.index)) continue;
      for (const c of constsOf.get(b.index)) takenIndices.add(c);
    }
    for (const b of bodies) {
      if (gone(b.index)) continue;
      for (const callee of calls.get(b.index)) if (dropSnip.delete(callee)) changed = true;
    }
    for (const f of [...dropSnip]) {
      if ((tableOf.get(f) ?? []).some((t) => takenIndices.has(t))) { dropSnip.delete(f); changed = true; }
    }
  }
  for (const f of dropSnip) snip.add(f);
  drops = dropSnip.size;
}

const trap = Buffer.from([3, 0x00, 0x00, 0x0b]); // body size 3: no locals, unreachable, end
let saved = 0;
const parts = bodies.map((b) => {
  if (!snip.has(b.index)) return bytes.subarray(b.from, b.end);
  saved += b.end - b.from - trap.length;
  return trap;
});
const payload = Buffer.concat([encodeLeb(bodies.length), ...parts]);
// A linker's output kept with its relocations (`--emit-relocs`, which wasm-split-cli reads
// to cut the module, scripts/build-site.sh): the code's relocations name offsets in the
// code section, so those in a replaced body go and the others move with their body.
const relocated = relocateCode();
const out = Buffer.concat([
  bytes.subarray(0, code.from),
  Buffer.from([10]),
  encodeLeb(payload.length),
  payload,
  ...relocated,
]);

/** The sections after the code, with `reloc.CODE` (if any) rewritten for the new bodies. */
function relocateCode() {
  const after = sections.filter((s) => s.from >= code.end);
  const codeIndex = sections.indexOf(code);
  // Where each body starts in the old and the new section payload.
  const moves = [];
  let at = encodeLeb(bodies.length).length;
  for (let i = 0; i < bodies.length; i++) {
    moves.push({ from: bodies[i].from - code.start, end: bodies[i].end - code.start, to: at, gone: snip.has(bodies[i].index) });
    at += parts[i].length;
  }
  const moved = (offset) => {
    let lo = 0, hi = moves.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (moves[mid].from <= offset) lo = mid; else hi = mid - 1;
    }
    const m = moves[lo];
    if (!m || offset < m.from || offset >= m.end) throw new Error(`a relocation at ${offset} is in no function body`);
    return m.gone ? null : m.to + (offset - m.from);
  };
  // The relocation types with an addend (WebAssembly/tool-conventions, Linking.md).
  const withAddend = new Set([3, 4, 5, 8, 9, 11, 14, 15, 16, 17, 21, 22, 23, 25]);
  return after.map((s) => {
    const original = bytes.subarray(s.from, s.end);
    if (s.id !== 0) return original;
    let [len, p] = leb(s.start);
    if (bytes.toString('utf8', p, p + len) !== 'reloc.CODE') return original;
    const nameBytes = bytes.subarray(s.start, p + len);
    p += len;
    let target, count;
    [target, p] = leb(p);
    if (target !== codeIndex) throw new Error(`reloc.CODE names section ${target}, the code is section ${codeIndex}`);
    [count, p] = leb(p);
    const kept = [];
    for (let i = 0; i < count; i++) {
      const type = bytes[p++];
      let offset, index;
      [offset, p] = leb(p);
      [index, p] = leb(p);
      let addendBytes = Buffer.alloc(0);
      if (withAddend.has(type)) {
        const q = p;
        while (bytes[p] & 0x80) p++;
        p++;
        addendBytes = bytes.subarray(q, p);
      }
      const to = moved(offset);
      if (to !== null) kept.push(Buffer.concat([Buffer.from([type]), encodeLeb(to), encodeLeb(index), addendBytes]));
    }
    const body = Buffer.concat([nameBytes, encodeLeb(target), encodeLeb(kept.length), ...kept]);
    return Buffer.concat([Buffer.from([0]), encodeLeb(body.length), body]);
  });
}
fs.writeFileSync(output, out);
console.log(
  `wasm-snip: ${snip.size} functions replaced by a trap (${saved} code bytes; ${drops} of them drop glue); ` +
    `${matched - (snip.size - drops)} more matched but are called directly by code that stays`,
);
