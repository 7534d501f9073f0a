# The compiled step's reduce-overhead check (gpu-check/compiled.sh), in the venv's Python, on a
# GPU only: torch.compile(mode="reduce-overhead")'s outputs in CUDA graph memory, which the
# next call takes back. Writes its figures to OUT_JSON as it goes; exits 1 on a problem.
# argv: OUT_JSON
import json, statistics, sys, time
path = sys.argv[1]
out, problems = {}, []
def save():
    out["problems"] = problems
    json.dump(out, open(path, "w"))
t0 = time.time()
import torch
from torch._dynamo.utils import counters
out.update(torch=torch.__version__, import_s=round(time.time() - t0, 2))
if not torch.cuda.is_available():
    problems.append("PyTorch sees no CUDA device")
    save(); sys.exit(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 64)).cuda().eval()
xs = [torch.randn(16, 256, device="cuda") for _ in range(10)]
with torch.no_grad():
    eager = [model(x).clone() for x in xs]  # each input's answer, from the eager model
def same(a, b):
    return torch.allclose(a, b, rtol=1e-3, atol=1e-4)
def read(t):
    """t's values on the host, or the error reading them raised."""
    try:
        return t.cpu(), None
    except Exception as e:  # RuntimeError: the storage was freed and marked
        return None, f"{type(e).__name__}: {e}"
def probe(y, kept, i, j):
    """y: the output of the call on xs[i], read after the call on xs[j]; kept: its clone."""
    values, error = read(y)
    return {"raised": error is not None, "error": (error or "")[:300],
            "overwritten_message": error is not None and "overwritten" in error.lower(),
            "holds_its_values": values is not None and same(values.cuda(), eager[i]),
            "holds_next_calls_values": values is not None and same(values.cuda(), eager[j]),
            "clone_kept_its_values": same(kept, eager[i])}
ro = torch.compile(model, mode="reduce-overhead")
with torch.no_grad():
    # Call 1: Dynamo, AOTAutograd, Inductor and Triton compile, then a warm-up run (eager,
    # in the graphs' pool). Call 2 records the CUDA graph. Call 3 replays it.
    t = time.time(); y_warm = ro(xs[0]); torch.cuda.synchronize()
    out["first_call_s"] = round(time.time() - t, 2)
    save()
    kept_warm = y_warm.clone()
    t = time.time(); y_rec = ro(xs[1]); torch.cuda.synchronize()
    out["recording_call_s"] = round(time.time() - t, 3)
    out["warmup_output"] = probe(y_warm, kept_warm, 0, 1)
    kept_rec = y_rec.clone()
    ro(xs[2]); torch.cuda.synchronize()
    out["recording_output"] = probe(y_rec, kept_rec, 1, 2)
    for x in xs[3:6]:
        ro(x)
    # Replaying: keep one call's output, call again on another input.
    y1 = ro(xs[6]); kept1 = y1.clone()
    y2 = ro(xs[7]); torch.cuda.synchronize()
    steady = probe(y1, kept1, 6, 7)
    steady["same_tensor_as_next_output"] = y1 is y2
    out["replay_output"] = steady
    save()
    def median_ms(f, n=20):
        times = []
        for _ in range(n):
            torch.cuda.synchronize(); t = time.perf_counter(); f(); torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1000)
        return round(statistics.median(times), 4)
    out["replay_p50_ms"] = median_ms(lambda: ro(xs[8]))
    out["eager_p50_ms"] = median_ms(lambda: model(xs[8]))
out["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"]
if out["cudagraph_skips"]:
    problems.append(f'Inductor skipped CUDA graphs {out["cudagraph_skips"]} times (see compiled-reduce-overhead.err)')
# Overwritten: the output kept from a call no longer gives that call's values once the next
# call has run (its read raised the overwritten error, or it now holds the next call's).
gone = [not p["holds_its_values"] for p in (out["recording_output"], out["replay_output"])]
out["overwritten"] = 1 if all(gone) else 0
rec, rep = out["recording_output"], out["replay_output"]
if not (rec["raised"] and rec["overwritten_message"]):
    problems.append(f"reading the recording run's output after the next call did not raise the overwritten error: {rec}")
if not rep["raised"] and not rep["holds_next_calls_values"]:
    problems.append(f"a replayed output kept across the next call neither raised nor held the next call's values: {rep}")
if not all(p["clone_kept_its_values"] for p in (out["warmup_output"], rec, rep)):
    problems.append("a clone taken before the next call lost its values")
save()
sys.exit(1 if problems else 0)
