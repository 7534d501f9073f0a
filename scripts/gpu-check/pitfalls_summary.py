# A card step's figures (gpu-check/pitfalls.sh): the cards' verdicts; exits 1 on a problem,
# written to stderr.
# argv: CARDS_JSONL CARDS_RC WANTED_CARDS MODE
import json, sys
path, rc, wanted, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
# Decided by exact byte counts: no noise can excuse another verdict on any device.
exact = {"generate-no-grad", "kv-cache-size", "gqa", "static-cache", "left-padded-batch", "inference-tensor-cache"}
cards, problems = {}, []
for line in open(path, errors="replace"):
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
    if mode != "dry" and o["id"] in exact and r["verdict"] != "confirmed":
        problems.append(f'{o["id"]} is decided by exact bytes but read {r["verdict"]}: {r.get("reason", "")[:300]}')
counts = {}
for c in cards.values():
    counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
missing = [c for c in wanted if c not in cards]
if rc in (124, 137):
    problems.append(f"the cards ran out of the step's time after {len(cards)} of {len(wanted)}: no report for {missing}")
elif rc != 0 and not problems:
    problems.append(f"gradless pitfall all exited {rc} before every card had reported")
elif missing:
    problems.append(f"no report for {missing}")
print(json.dumps({"cards": len(cards), "verdicts": counts, "by_card": cards}))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
