# The pitfalls step's figures (gpu-check/pitfalls.sh): the cards' verdicts and the tour test;
# exits 1 on a problem, written to stderr.
# argv: CARDS_JSONL CARDS_RC TOUR_OUTPUT TOUR_RC TOUR_LIST TOUR_TEST WANTED_CARDS MODE
import json, sys
path, rc, tour_txt, trc, tour_list, tour, wanted, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7].split(","), sys.argv[8]
# Decided by exact byte counts: no noise can excuse another verdict on any device.
exact = {"generate-no-grad", "kv-cache-size", "gqa", "static-cache", "padding-waste", "inference-tensor-cache"}
cards, problems = {}, []
for line in open(path):
    try:
        o = json.loads(line)
    except ValueError:
        continue
    r = o.get("report")
    if r is None:
        cards[o["id"]] = {"verdict": "failed", "seconds": o.get("seconds"), "reason": o.get("error", "")[:300]}
        problems.append(f'{o["id"]}: failed: {o.get("error", "")[:300]}')
        continue
    cards[o["id"]] = {"verdict": r["verdict"], "seconds": o.get("seconds"), "reason": r.get("reason", "")[:400]}
    if o["id"] in exact and r["verdict"] != "confirmed":
        problems.append(f'{o["id"]} is decided by exact bytes but read {r["verdict"]}: {r.get("reason", "")[:300]}')
counts = {}
for c in cards.values():
    counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
if rc in (124, 137):
    problems.append(f"the cards ran out of their share of the step after {len(cards)} of {len(wanted)}")
elif rc != 0 and not problems:
    problems.append(f"gradless pitfall all exited {rc} before every card had reported")
if mode != "dry":
    missing = [c for c in wanted if c not in cards]
    if missing and rc == 0:
        problems.append(f"no report for {missing}")
# The tour test: its CUDA name selects exactly one test, and the test run passed.
listed = [l for l in open(tour_list, errors="replace") if l.rstrip().endswith(": test")]
if len(listed) != 1:
    problems.append(f"{tour} selects {len(listed)} tests, not one")
lines = open(tour_txt, errors="replace").read().splitlines()
ran = [l for l in lines if l.startswith("test ") and " ... " in l]
tour_ok = trc == 0 and any(l.endswith(" ... ok") for l in ran)
if not tour_ok:
    why = "timed out" if trc in (124, 137) else f"exit {trc}"
    panics = [l for l in lines if "panicked at" in l or l.startswith("  left") or l.startswith("  right")][:6]
    problems.append(f"the tour test failed ({why}): {' | '.join(ran + panics)[:600]}")
print(json.dumps({"cards": len(cards), "verdicts": counts, "by_card": cards,
                  "tour_test": {"name": tour, "ran": ran, "passed": tour_ok}}))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
