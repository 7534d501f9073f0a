# The cuda-tests step's figures (gpu-check/cuda-tests.sh): the test binary's output counted, and
# the GPU's test selection checked; exits 1 on a problem, written to stderr.
# argv: TESTS_OUTPUT TESTS_LIST
import json, sys
passed, failed, ignored = 0, [], 0
for l in open(sys.argv[1], errors="replace"):
    l = l.rstrip()
    if l.startswith("test ") and l.endswith(" ... ok"):
        passed += 1
    elif l.startswith("test ") and l.endswith(" ... FAILED"):
        failed.append(l.split()[1])
    elif l.startswith("test ") and " ... ignored" in l:
        ignored += 1
# What `--ignored` with the GPU's skips selects: the CUDA halves, never the A/A test, the
# soak or a card.
selected = [l.split(": test")[0] for l in open(sys.argv[2], errors="replace") if l.rstrip().endswith(": test")]
stray = [t for t in selected if t.startswith(("a_a::", "soak::", "pitfalls::cuda::"))]
print(json.dumps({"passed": passed, "failed": failed, "ignored": ignored,
                  "gpu_selection": len(selected), "gpu_selection_stray": stray}))
problems = []
# A filter that matched nothing passes vacuously: that is a failure of the check.
if not passed:
    problems.append("the engine's test binary ran no test (the filter matched nothing)")
if not selected or stray:
    problems.append(f"the GPU's test selection is wrong: {len(selected)} tests, of which {stray} should not be there")
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
