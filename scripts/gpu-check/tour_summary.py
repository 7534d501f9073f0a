# The tour step's figures (gpu-check/tour.sh): the test's selection and its run; exits 1 on a
# problem, written to stderr.
# argv: TEST_OUTPUT TEST_RC TEST_LIST TEST_NAME
import json, sys
txt, trc, listing, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
problems = []
listed = [l for l in open(listing, errors="replace") if l.rstrip().endswith(": test")]
if len(listed) != 1:
    problems.append(f"{name} selects {len(listed)} tests, not one")
lines = open(txt, errors="replace").read().splitlines()
ran = [l for l in lines if l.startswith("test ") and " ... " in l]
ok = trc == 0 and any(l.endswith(" ... ok") for l in ran)
if not ok:
    why = "timed out" if trc in (124, 137) else f"exit {trc}"
    panics = [l for l in lines if "panicked at" in l or l.startswith("  left") or l.startswith("  right") or "alone" in l][:6]
    problems.append(f"the test failed ({why}): {' | '.join(ran + panics)[:800]}")
print(json.dumps({"test": name, "ran": ran, "passed": ok}))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
