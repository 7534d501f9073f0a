# The compiled steps' figures (gpu-check/compiled.sh: compiled_summary): PART `measure` (the
# compiled step: the toolchain and tiny_mlp compiled and measured) or `cards` (the
# compiled-cards step: reduce-overhead's outputs and the compiled-model cards, on the
# package the compiled step built); exits 1 on a problem, each written to stderr.
# argv: PART REPORT MEASURE_RC RO_JSON RO_RC CARDS_JSONL CARDS_RC WANTED_CARDS MODE OUT_DIR
import json, math, os, sys
part, report, mrc, ro, rrc, cards, crc, wanted, mode, out_dir = sys.argv[1:11]
def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None
def tail(name, n=400):
    try:
        return " ".join(open(os.path.join(out_dir, name), errors="replace").read().split())[-n:]
    except OSError:
        return ""
figs, problems = {}, []
tool = load(os.path.join(out_dir, "compiled-toolchain.json")) or {}
figs["toolchain"] = tool
problems += tool.get("problems", [])
if not tool and mode != "dry":
    problems.append(f"the toolchain check did not run: {tail('compiled-toolchain.err')}")
blocked = bool(problems)
# 1. tiny_mlp, compiled and measured (the compiled step; the cards step reads it to check
# that its cards took the same package).
measured = None
keys = ("export_ms", "compile_ms", "build_ms", "subprocess_ms", "load_ms", "eager_p50_ms", "max_abs_diff", "bitwise_equal",
        "package", "package_bytes", "cached", "batch_min", "batch_max", "break_even_passes", "torch_version", "threads",
        "load_device_bytes")
r = load(report)
if part == "cards":
    measured = (r or {}).get("compiled") if isinstance(r, dict) else None
elif mrc == "-":
    if not blocked:
        problems.append("tiny_mlp was not compiled (the step's limit came first)")
elif mrc != "0" or not isinstance(r, dict) or not isinstance(r.get("compiled"), dict):
    why = "timed out" if mrc in ("124", "137") else f"exit {mrc}"
    problems.append(f"gradless measure --compiled ({why}): {tail('compiled-measure.err')}")
else:
    c = r["compiled"]
    figs.update({k: c.get(k) for k in keys})
    figs["compiled_p50_ms"] = (r.get("latency_ms") or {}).get("p50")
    figs["device_name"] = (r.get("env") or {}).get("device_name")
    if figs["compiled_p50_ms"] and figs["eager_p50_ms"]:
        figs["eager_over_compiled"] = round(figs["eager_p50_ms"] / figs["compiled_p50_ms"], 3)
    if c.get("cached"):
        problems.append("the package came from a cache: its compile times are not this host's (GRADLESS_CACHE was not a fresh folder)")
    if not (c.get("compile_ms") or 0) > 0:
        problems.append(f"no compile time reported: {c.get('compile_ms')}")
    d = c.get("max_abs_diff")
    if not isinstance(d, (int, float)) or not math.isfinite(d):
        problems.append(f"the compiled output's largest difference from eager is {d}")
    # On CUDA the package's constants live outside the caching allocator: the driver's
    # growth across the load is their figure.
    if mode == "gpu" and c.get("load_device_bytes") is None:
        problems.append("no driver reading of the package's load on CUDA (load_device_bytes)")
if part == "measure":
    figs["problems"] = problems
    print(json.dumps(figs))
    for w in tool.get("workarounds") or []:
        print(f"worked round (a Gradless server compiling here needs the same): {w}", file=sys.stderr)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(1)
    sys.exit(0)
# 2. reduce-overhead's outputs in CUDA graph memory (GPU only).
if mode != "gpu":
    figs["reduce_overhead"] = {"skipped": "CUDA graphs need a GPU" + (" (dry run)" if mode == "dry" else " (a CPU rehearsal)")}
elif rrc == "-":
    figs["reduce_overhead"] = {"skipped": "not reached"}
    if not blocked:
        problems.append("the reduce-overhead check was not reached")
else:
    o = load(ro) or {}
    figs["reduce_overhead"] = o
    figs["overwritten"] = o.get("overwritten")
    figs["reduce_overhead_first_call_s"] = o.get("first_call_s")
    if rrc != "0":
        why = "timed out" if rrc in ("124", "137") else f"exit {rrc}"
        listed = o.get("problems") or [tail("compiled-reduce-overhead.err")]
        problems.append(f"the reduce-overhead check ({why}): " + "; ".join(listed))
# 3. The cards: each must report, with any verdict.
by_card = {}
if os.path.exists(cards):
    for line in open(cards, errors="replace"):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        rep = o.get("report")
        if rep is None:
            by_card[o["id"]] = {"verdict": "failed", "seconds": o.get("seconds"), "reason": (o.get("error") or "")[:300]}
            problems.append(f'{o["id"]}: failed: {(o.get("error") or "")[:300]}')
        else:
            by_card[o["id"]] = {"verdict": rep.get("verdict"), "seconds": o.get("seconds"), "reason": (rep.get("reason") or "")[:400]}
            cached = next((f["value"] for f in rep.get("figures") or [] if f.get("name") == "package from the cache"), None)
            if cached is not None:
                by_card[o["id"]]["package_from_cache"] = bool(cached)
# One package key for the compiled step and the cards (the same threads, batch range and
# weights): the first card took the package the compiled step built, from the cache.
first = by_card.get("compiled-first-call", {})
if measured and not measured.get("cached") and first.get("package_from_cache") is False:
    problems.append("compiled-first-call compiled tiny_mlp again instead of taking the compiled step's package from the cache "
                    f"(a different key: the step built {measured.get('package')} for {measured.get('threads')} thread(s))")
counts = {}
for c in by_card.values():
    counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
figs.update(cards=len(by_card), verdicts=counts, by_card=by_card)
ids = wanted.split(",")
missing = [c for c in ids if c not in by_card]
if crc == "-":
    if not blocked:
        problems.append("the cards were not reached")
elif crc in ("124", "137"):
    problems.append(f"the cards ran out of the step's time after {len(by_card)} of {len(ids)}")
elif missing:
    problems.append(f"no report for {missing} (exit {crc}): {tail('compiled-cards.err')}")
elif crc != "0" and not any(c["verdict"] == "failed" for c in by_card.values()):
    problems.append(f"gradless pitfall exited {crc}: {tail('compiled-cards.err')}")
figs["problems"] = problems
print(json.dumps(figs))
# What the host lacked and this step worked round: said in the step's detail, pass or fail.
for w in tool.get("workarounds") or []:
    print(f"worked round (a Gradless server compiling here needs the same): {w}", file=sys.stderr)
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
