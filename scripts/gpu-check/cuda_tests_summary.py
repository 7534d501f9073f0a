# The cuda-tests step's figures (gpu-check/cuda-tests.sh): the test binary's output counted,
# and the step's list of CUDA tests held to the binary's own list of ignored tests (also at
# bundle time: bundle.sh runs this with `--check-list`); exits 1 on a problem, on stderr.
# argv: TESTS_OUTPUT TESTS_LIST MODE SKIPPED_PREFIXES NAME...
#   or: --check-list TESTS_LIST SKIPPED_PREFIXES NAME...
import json, sys


def list_problems(listing, skipped, names):
    """What is wrong with the step's NAMES against the binary's `--list --ignored`."""
    ignored = [l.split(": test")[0] for l in open(listing, errors="replace") if l.rstrip().endswith(": test")]
    # Every ignored test of the binary needs a CUDA device, but those left to other steps.
    wanted = [t for t in ignored if not t.startswith(tuple(skipped))]
    out = []
    missing = sorted(set(wanted) - set(names))
    unknown = sorted(set(names) - set(ignored))
    stray = sorted(n for n in names if n.startswith(tuple(skipped)))
    if missing:
        out.append(f"CUDA tests of the binary that the step does not name: {missing}")
    if unknown:
        out.append(f"names in the step that are no ignored test of the binary: {unknown}")
    if stray:
        out.append(f"names the step must leave to other steps: {stray}")
    return out, len(wanted)


if sys.argv[1] == "--check-list":
    problems, n = list_problems(sys.argv[2], sys.argv[3].split(), sys.argv[4:])
    print("\n".join(problems) or f"the cuda-tests step names the binary's {n} CUDA tests")
    sys.exit(1 if problems else 0)

out_txt, listing, mode, skipped, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5:]
passed, failed, ignored = [], [], 0
for l in open(out_txt, errors="replace"):
    l = l.rstrip()
    if l.startswith("test ") and l.endswith(" ... ok"):
        passed.append(l.split()[1])
    elif l.startswith("test ") and l.endswith(" ... FAILED"):
        failed.append(l.split()[1])
    elif l.startswith("test ") and " ... ignored" in l:
        ignored += 1
problems, selection = list_problems(listing, skipped, names)
if mode == "gpu":
    # Each named test ran, and passed (a filter that matched nothing passes vacuously).
    not_run = sorted(set(names) - set(passed) - set(failed))
    if not_run:
        problems.append(f"named tests that did not run: {not_run}")
elif not passed:
    problems.append("the engine's test binary ran no test (the filter matched nothing)")
print(json.dumps({"passed": len(passed), "failed": failed, "ignored": ignored, "named": len(names),
                  "gpu_selection": selection}))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
