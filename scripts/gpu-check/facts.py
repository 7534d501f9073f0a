# The facts step (gpu-check/facts.sh), in the venv's Python: what the host is (PyTorch, CUDA,
# cuDNN, the driver, the SDPA backends' order, cuBLAS's workspaces, bandwidth and matmul
# FLOP/s against the peak gradless finds). Writes what it has to PARTIAL_JSON as it goes.
# argv: DEVICE PARTIAL_JSON GRADLESS
import json, math, os, subprocess, sys, time
device, partial, gradless = sys.argv[1:4]
t0 = time.time()
out, problems = {"device": device}, []
def save():
    json.dump(out, open(partial, "w"))
import torch
out.update(torch=torch.__version__, torch_cuda=torch.version.cuda, import_s=round(time.time() - t0, 1),
           cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
def sdp_order():
    names = []
    for b in torch._C._get_sdp_priority_order():
        try:
            names.append(torch.nn.attention.SDPBackend(b).name)
        except Exception:
            names.append(str(b))
    return names
try:
    # Read before any SDPA call, and again after one (below): in 2.11 the order can change
    # at the first backend selection (cuDNN attention first from cuDNN 9.15 on sm_90 and
    # sm_100), so only the second reading is what a run meets.
    out["sdp_priority_order_before_first_call"] = sdp_order()
except Exception as e:
    problems.append(f"torch._C._get_sdp_priority_order(): {e}")
try:
    out["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=8).stdout.strip() or None
except (OSError, subprocess.SubprocessError):
    out["driver"] = None
save()
def timed(f, n):
    """Best of n, in seconds (CUDA events; f runs once untimed first)."""
    f(); torch.cuda.synchronize()
    best = math.inf
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / 1000)
    return best
if device == "cuda":
    if not torch.cuda.is_available():
        problems.append("PyTorch sees no CUDA device")
    else:
        p = torch.cuda.get_device_properties(0)
        out["gpu"] = {"name": p.name, "total_memory_bytes": p.total_memory, "capability": f"{p.major}.{p.minor}",
                      "multiprocessors": p.multi_processor_count}
        # cuBLAS's workspaces: what one matmul (and one with a bias, cuBLASLt's epilogue)
        # leaves allocated on the default stream, then on a second stream.
        a = torch.ones(64, 64, device="cuda")
        bias = torch.ones(64, device="cuda")
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        def mm():
            for kind in (torch.float32, torch.bfloat16):
                x, c = a.to(kind), bias.to(kind)
                r1, r2 = x @ x, torch.addmm(c, x, x)
                del x, c, r1, r2
        mm(); torch.cuda.synchronize()
        first = torch.cuda.memory_allocated() - base
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            mm()
        torch.cuda.synchronize()
        second = torch.cuda.memory_allocated() - base - first
        out["cublas_workspace_bytes"] = {"default_stream": first, "second_stream": second,
                                         "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                                         "CUBLASLT_WORKSPACE_SIZE": os.environ.get("CUBLASLT_WORKSPACE_SIZE")}
        save()
        # One bf16 SDPA call, as a decoder's prefill makes it (batch 1, 8 heads, 512 tokens,
        # head dim 128, causal): the backend order read after it, and the kernels that ran,
        # by name, from the profiler (flash, efficient, cudnn or math).
        try:
            q = torch.randn(1, 8, 512, 128, device="cuda", dtype=torch.bfloat16)
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            torch.cuda.synchronize()
            out["sdp_priority_order"] = sdp_order()
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
                torch.cuda.synchronize()
            kernels = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
            low = " ".join(kernels).lower()
            ran = ("cudnn" if "cudnn" in low or "sm90_flash" in low or "cudnn_generated" in low
                   else "flash" if "flash" in low else "efficient" if "fmha" in low or "mem_eff" in low or "efficient" in low
                   else "math" if kernels else None)
            out["sdpa_bf16_prefill"] = {"shape": [1, 8, 512, 128], "kernels": kernels[:12], "backend": ran}
            del q
        except Exception as e:
            problems.append(f"one bf16 SDPA call and its kernels: {e}")
        save()
        # Copy bandwidth (read + write) over 1 GiB, and square matmuls of 8192.
        n = 256 << 20
        x = torch.empty(n, device="cuda"); y = torch.empty_like(x)
        out["copy_gb_s"] = round(2 * 4 * n / timed(lambda: y.copy_(x), 5) / 1e9, 1)
        del x, y
        k = 8192
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        for kind, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            m = torch.randn(k, k, device="cuda", dtype=kind)
            out[f"matmul_{name}_tflops"] = round(2 * k ** 3 / timed(lambda: m @ m, 5) / 1e12, 1)
            del m
        torch.backends.cuda.matmul.allow_tf32 = prev
        torch.cuda.empty_cache()
        save()
if "sdp_priority_order" not in out and "sdp_priority_order_before_first_call" in out:
    out["sdp_priority_order"] = out["sdp_priority_order_before_first_call"]
# The peak Gradless reports against: a datasheet row its device name matches, or measured.
try:
    r = subprocess.run([gradless, "measure", "--device", device, "--model", "tiny_mlp", "--batch", "1", "--warmup", "0",
                        "--iters", "1", "--threads", "1", "--json"], capture_output=True, text=True, timeout=60)
    rep = json.loads(r.stdout)
    roof = rep.get("roofline") or {}
    g = {"device_name": rep["env"]["device_name"], "peak_source": rep.get("peak_source"),
         "peak_tflops": roof.get("peak_tflops"), "bandwidth_gb_s": roof.get("bandwidth_gb_s")}
    g["datasheet_match"] = (g["peak_source"] or "").startswith("datasheet")
    if g["bandwidth_gb_s"] and out.get("copy_gb_s"):
        g["copy_percent_of_datasheet"] = round(100 * out["copy_gb_s"] / g["bandwidth_gb_s"], 1)
    if g["peak_tflops"] and out.get("matmul_fp32_tflops"):
        g["matmul_fp32_percent_of_datasheet"] = round(100 * out["matmul_fp32_tflops"] / g["peak_tflops"], 1)
    out["gradless"] = g
    if device == "cuda" and not g["datasheet_match"]:
        problems.append(f"gradless matches no datasheet row for {g['device_name']!r} (it measured its own peak: {g['peak_source']}); the bandwidth percentages are against that")
except (OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
    problems.append(f"gradless measure: {e}")
out["seconds"] = round(time.time() - t0, 1)
out["problems"] = problems
save()
print(json.dumps(out))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
