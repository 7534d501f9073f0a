# The --bundle half of scripts/gpu-check.sh: reads `cargo test --release --workspace --no-run
# --message-format=json` on stdin and prints the paths of the two executables the bundle
# carries, the gradless binary and the engine's per-device test binary, one a line.
import json, sys
found = {}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    if m.get("reason") != "compiler-artifact" or not exe:
        continue
    t = m["target"]
    # The binary itself, not the harness of its unit tests (also a "bin" target, test: true).
    if t["name"] == "gradless" and t["kind"] == ["bin"] and not m["profile"]["test"]:
        found["gradless"] = exe
    elif t["name"] == "device" and t["kind"] == ["test"]:
        found["device-tests"] = exe
for k in ("gradless", "device-tests"):
    if k not in found:
        sys.exit(f"cargo built no {k} executable")
    print(found[k])
