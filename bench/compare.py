#!/usr/bin/env python3
"""Side-by-side driver: Gradless (`gradless measure`) against its PyTorch peer
(python/gradless/peer.py).

This file owns the comparison method and its table. For each configuration it runs both
sides over several rounds, interleaved so that slow drifts of the machine (heat, other
load) fall on both alike:

  for round r:                      # rounds outside, so a round spans every config
      for config c:
          order = (ours, peer) on even rounds, (peer, ours) on odd ones
          run each side as its own process, with the same flags

Each run is a separate process: both sides pay a process start, model build and warm-up,
and only the timings measured inside the process are compared. Per side and config the
table shows the median over rounds of the run's p50 latency and the median of its peak
memory above baseline, then the ratios ours / PyTorch. A run that fails or times out is
reported in the table (and its message below it); the driver never stops for it.

Usage:
    python bench/compare.py                      # default configs, 5 rounds
    python bench/compare.py --quick              # fewer configs and rounds
    python bench/compare.py --config resnet50:32:eval:no_grad:fp16 --device cuda
    python bench/compare.py --json raw.json --markdown table.md
    python bench/compare.py --render raw.json     # the table of an earlier (or cut) run

A config is model:batch:eval|train:enabled|no_grad|inference_mode[:off|fp16|bf16[:input_size[:extras]]],
where extras are the advanced settings both sides take, comma-separated: dtype=fp16|bf16,
memory_format=channels_last, input_source=pageable (input_size may be left empty).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = ("tiny_mlp", "resnet18", "resnet50", "mobilenet_v2", "transformer")
GRAD_MODES = ("enabled", "no_grad", "inference_mode")
AUTOCASTS = ("off", "fp16", "bf16")

DEFAULT_CONFIGS = [
    "resnet18:8:eval:no_grad",
    "resnet18:8:train:enabled",
    "resnet50:8:eval:no_grad",
    "resnet50:8:eval:enabled",
    "tiny_mlp:64:eval:no_grad",
    "tiny_mlp:64:train:enabled",
    "transformer:8:eval:inference_mode",
    # The CPU-meaningful advanced settings (issue 14): cast weights, NHWC, a host-side input.
    "resnet18:8:eval:no_grad:off::dtype=bf16",
    "resnet18:8:eval:no_grad:off::memory_format=channels_last",
    "resnet18:8:eval:no_grad:off::input_source=pageable",
]
EXTRAS = {
    "dtype": ("fp32", "fp16", "bf16"),
    "memory_format": ("contiguous", "channels_last"),
    "input_source": ("device", "pageable"),
}
QUICK_CONFIGS = [
    "resnet18:8:eval:no_grad",
    "resnet18:8:train:enabled",
    "tiny_mlp:64:eval:no_grad",
    "tiny_mlp:64:train:enabled",
]
QUICK_ROUNDS = 2
SIDES = ("ours", "pytorch")


@dataclasses.dataclass(frozen=True)
class Config:
    model: str
    batch: int
    eval: bool
    grad: str
    autocast: str = "off"
    input_size: int | None = None
    extras: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def parse(text: str, models_dir: str | None = None) -> "Config":
        parts = text.split(":")
        if not 4 <= len(parts) <= 7:
            raise ValueError(f"config `{text}`: expected model:batch:eval|train:grad[:autocast[:input_size[:extras]]]")
        model, batch, mode, grad = parts[:4]
        autocast = parts[4] if len(parts) > 4 else "off"
        size = int(parts[5]) if len(parts) > 5 and parts[5] else None
        extras = []
        for item in (parts[6].split(",") if len(parts) > 6 and parts[6] else []):
            key, _, value = item.partition("=")
            # `weights=` is the dtype's old name (configs recorded before it had its own).
            key = "dtype" if key == "weights" else key
            if value not in EXTRAS.get(key, ()):
                raise ValueError(f"config `{text}`: unknown extra `{item}` (known: {EXTRAS})")
            extras.append((key, value))
        team = models_dir is not None and (Path(models_dir) / f"{model}.pt").exists()
        if model not in MODELS and not team:
            raise ValueError(f"config `{text}`: unknown model `{model}` (known: {', '.join(MODELS)})")
        if mode not in ("eval", "train"):
            raise ValueError(f"config `{text}`: mode must be eval or train, not `{mode}`")
        if grad not in GRAD_MODES:
            raise ValueError(f"config `{text}`: grad must be one of {', '.join(GRAD_MODES)}")
        if autocast not in AUTOCASTS:
            raise ValueError(f"config `{text}`: autocast must be one of {', '.join(AUTOCASTS)}")
        return Config(model, int(batch), mode == "eval", grad, autocast, size, tuple(extras))

    def label(self) -> str:
        """e.g. `resnet50 b8 eval+no_grad+fp16`."""
        parts = ["eval" if self.eval else "train", self.grad] + ([self.autocast] if self.autocast != "off" else [])
        parts += [value if key != "dtype" else f"{value}-weights" for key, value in self.extras]
        size = f" s{self.input_size}" if self.input_size else ""
        return f"{self.model} b{self.batch}{size} {'+'.join(parts)}"

    def flags(self, args: argparse.Namespace) -> list[str]:
        """The flags both `gradless measure` and peer.py take for this config."""
        flags = [
            "--model", self.model,
            "--batch", str(self.batch),
            "--eval" if self.eval else "--train",
            "--grad", self.grad,
            "--autocast", self.autocast,
            "--device", args.device,
            "--warmup", str(args.warmup),
            "--iters", str(args.iters),
            "--threads", str(args.threads),
        ]
        size = self.input_size or args.input_size
        if size:
            flags += ["--input-size", str(size)]
        if args.models_dir:
            # Team models: both sides load the same TorchScript file.
            flags += ["--models-dir", args.models_dir]
        for key, value in self.extras:
            flags += ["--" + key.replace("_", "-"), value]
        return flags + ["--json"]


def default_gradless() -> str:
    target = os.environ.get("CARGO_TARGET_DIR") or str(Path.home() / ".cache/gradless/target")
    return str(Path(target) / "release" / "gradless")


def parse_report(stdout: str) -> dict:
    """The JSON report in a run's stdout: all of it, or else the last object that starts a
    line (gradless prints pretty, multi-line JSON; a stray log line may come before it)."""
    text = stdout.strip()
    decoder = json.JSONDecoder()
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    for start in reversed(starts):
        if text.startswith("{", start):
            try:
                value, _ = decoder.raw_decode(text, start)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    raise ValueError("no JSON report in its output")


def last_lines(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:]) if lines else ""


def run_bounded(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Runs cmd in its own process group; past `timeout` the whole group is killed (so a
    helper the run started cannot outlive it) and TimeoutExpired is raised."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def run_side(side: str, config: Config, args: argparse.Namespace) -> dict:
    """Runs one side once. Returns {ok, wall_s, report | error, command}."""
    if side == "ours":
        cmd = [args.gradless, "measure"] + config.flags(args)
    else:
        cmd = [args.python, str(args.peer)] + config.flags(args)
    started = time.monotonic()
    result = {"command": cmd}
    try:
        proc = run_bounded(cmd, args.timeout)
    except subprocess.TimeoutExpired:
        result.update(ok=False, error=f"timed out after {args.timeout:g} s")
    except OSError as e:
        result.update(ok=False, error=f"could not start: {e}")
    else:
        if proc.returncode != 0:
            msg = last_lines(proc.stderr) or last_lines(proc.stdout) or "no output"
            result.update(ok=False, error=f"exit {proc.returncode}: {msg}")
        else:
            try:
                report = parse_report(proc.stdout)
                if "error" in report and "latency_ms" not in report:
                    raise ValueError(json.dumps(report["error"]))
                report["latency_ms"]["p50"]  # noqa: B018 - the key the table needs
                result.update(ok=True, report=report)
            except (ValueError, KeyError, TypeError) as e:
                result.update(ok=False, error=f"unreadable report: {e}; stderr: {last_lines(proc.stderr)}")
    result["wall_s"] = round(time.monotonic() - started, 3)
    return result


def median_of(runs: list[dict], pick) -> float | None:
    values = []
    for r in runs:
        if r["ok"]:
            try:
                v = pick(r["report"])
            except (KeyError, TypeError):
                continue
            if v is not None:
                values.append(v)
    return statistics.median(values) if values else None


def p50(report: dict) -> float:
    return report["latency_ms"]["p50"]


def peak(report: dict) -> int:
    return report["memory"]["peak_above_baseline_bytes"]


def format_bytes(n: float | None) -> str:
    """Binary units, like protocol::format_bytes."""
    if n is None:
        return "—"
    value, unit = float(n), 0
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    while value >= 1024.0 and unit + 1 < len(units):
        value /= 1024.0
        unit += 1
    return f"{int(n)} B" if unit == 0 else f"{value:.1f} {units[unit]}"


def numeric_ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "—"
    if b == 0:
        return "1.00" if a == 0 else "∞"
    return f"{a / b:.2f}"


def summarize(results: list[dict]) -> list[dict]:
    """One row per config: medians over rounds per side, their ratios and failures."""
    rows = []
    for entry in results:
        row = {"config": entry["label"]}
        for side in SIDES:
            runs = entry["runs"][side]
            ok = [r for r in runs if r["ok"]]
            row[side] = {
                "rounds": len(runs),
                "ok": len(ok),
                "p50_ms": median_of(runs, p50),
                "p50_ms_each": [p50(r["report"]) for r in ok],
                "peak_above_baseline_bytes": median_of(runs, peak),
                "memory_source": ok[0]["report"].get("memory", {}).get("source") if ok else None,
                "errors": sorted({r["error"] for r in runs if not r["ok"]}),
            }
        o, p = row["ours"], row["pytorch"]
        row["latency_ratio"] = numeric_ratio(o["p50_ms"], p["p50_ms"])
        row["memory_ratio"] = numeric_ratio(o["peak_above_baseline_bytes"], p["peak_above_baseline_bytes"])
        rows.append(row)
    return rows


def cell_ms(s: dict) -> str:
    if s["p50_ms"] is None:
        return "failed" if s["rounds"] else "not run"
    text = f"{s['p50_ms']:.3f}"
    if s["ok"] < s["rounds"]:
        text += f" ({s['ok']}/{s['rounds']} ok)"
    return text


def markdown(rows: list[dict], meta: dict) -> str:
    out = [
        f"Gradless vs PyTorch — device {meta['device_name'] or meta['device']}, threads {meta['threads']}, "
        f"warmup {meta['warmup']}, iters {meta['iters']}, rounds completed {meta['rounds_completed']}/{meta['rounds']} "
        f"(median over rounds of each run's p50; ratio < 1: Gradless is faster / smaller)",
        "",
        "| config | ours p50 ms | PyTorch p50 ms | latency ratio (ours/PyTorch) "
        "| ours peak above baseline | PyTorch peak above baseline | memory ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for row in rows:
        o, p = row["ours"], row["pytorch"]
        out.append(
            f"| {row['config']} | {cell_ms(o)} | {cell_ms(p)} | {ratio(o['p50_ms'], p['p50_ms'])} "
            f"| {format_bytes(o['peak_above_baseline_bytes'])} | {format_bytes(p['peak_above_baseline_bytes'])} "
            f"| {ratio(o['peak_above_baseline_bytes'], p['peak_above_baseline_bytes'])} |"
        )
        for side, s in (("ours", o), ("PyTorch", p)):
            notes += [f"- {row['config']}, {side}: {e}" for e in s["errors"]]
        if o["memory_source"] and p["memory_source"] and o["memory_source"] != p["memory_source"]:
            notes.append(f"- {row['config']}: memory sources differ ({o['memory_source']} vs {p['memory_source']})")
    if notes:
        out += ["", "Failures and notes:"] + notes
    if meta.get("stopped_early"):
        out += ["", f"Stopped early: {meta['stopped_early']}"]
    return "\n".join(out) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gradless", default=default_gradless(),
                   help="the gradless binary (default: $CARGO_TARGET_DIR/release/gradless, "
                        "else ~/.cache/gradless/target/release/gradless)")
    p.add_argument("--python", default=sys.executable, help="the Python that runs peer.py (default: this one)")
    p.add_argument("--peer", default=str(HERE.parent / "python" / "gradless" / "peer.py"),
                   help="the peer script (default: python/gradless/peer.py, beside bench/)")
    p.add_argument("--config", action="append", default=None, metavar="SPEC",
                   help="model:batch:eval|train:grad[:autocast[:input_size]]; repeat for several")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; 2 with --quick)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--input-size", type=int, default=None, help="input size for configs that do not set one")
    p.add_argument("--quick", action="store_true", help="fewer configs and rounds")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed to each run (default 600)")
    p.add_argument("--deadline", type=float, default=None,
                   help="start no run after this many seconds; the table covers what finished")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT",
                   help="write every raw result here (rewritten after each run)")
    p.add_argument("--markdown", default=None, metavar="OUT", help="also write the table here")
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="team models (NAME.pt + NAME.json) both sides load; configs may name them")
    p.add_argument("--render", default=None, metavar="RAW",
                   help="run nothing: print the table of a raw file written by --json")
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else 5
    texts = args.config or (QUICK_CONFIGS if args.quick else DEFAULT_CONFIGS)
    try:
        args.configs = [Config.parse(t, args.models_dir) for t in texts]
    except ValueError as e:
        p.error(str(e))
    if args.rounds < 1 or args.iters < 1 or args.threads < 1 or args.warmup < 0:
        p.error("rounds, iters and threads must be at least 1, warmup at least 0")
    return args


def render(raw_path: str, markdown_out: str | None) -> int:
    """Prints (and writes) the table of a raw --json file, e.g. one a killed run left."""
    doc = json.loads(Path(raw_path).read_text())
    table = markdown(summarize(doc["results"]), doc["meta"])
    print(table, end="")
    if markdown_out:
        Path(markdown_out).write_text(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        return render(args.render, args.markdown)
    started = time.monotonic()
    results = [{"label": c.label(), "config": dataclasses.asdict(c), "runs": {s: [] for s in SIDES}}
               for c in args.configs]
    meta = {
        "started_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": platform.node(),
        "gradless": args.gradless,
        "python": args.python,
        "peer": args.peer,
        "device": args.device,
        "threads": args.threads,
        "warmup": args.warmup,
        "iters": args.iters,
        "rounds": args.rounds,
        "rounds_completed": 0,
        "device_name": None,
        "stopped_early": None,
    }

    def save() -> None:
        if args.json_out:
            doc = {"meta": meta, "summary": summarize(results), "results": results}
            tmp = Path(args.json_out + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            tmp.replace(args.json_out)

    if not Path(args.gradless).exists():
        print(f"warning: {args.gradless} does not exist; the `ours` runs will fail", file=sys.stderr)

    total = args.rounds * len(args.configs) * len(SIDES)
    done = 0
    for r in range(args.rounds):
        for entry, config in zip(results, args.configs):
            order = SIDES if r % 2 == 0 else SIDES[::-1]
            for side in order:
                if args.deadline is not None and time.monotonic() - started > args.deadline:
                    meta["stopped_early"] = f"deadline of {args.deadline:g} s reached after {done}/{total} runs"
                    break
                res = run_side(side, config, args)
                res["round"] = r
                res["first"] = side == order[0]
                entry["runs"][side].append(res)
                done += 1
                if res["ok"]:
                    meta["device_name"] = meta["device_name"] or res["report"].get("env", {}).get("device_name")
                    status = f"p50 {p50(res['report']):.3f} ms, peak {format_bytes(peak(res['report']))}"
                else:
                    status = f"FAILED: {res['error']}"
                print(f"[{done}/{total}] round {r + 1} {entry['label']} {side}: {status} ({res['wall_s']:.1f} s)",
                      file=sys.stderr, flush=True)
                save()
            if meta["stopped_early"]:
                break
        if meta["stopped_early"]:
            break
        meta["rounds_completed"] = r + 1
    meta["finished_at"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    save()

    table = markdown(summarize(results), meta)
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
