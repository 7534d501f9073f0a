//! What the device's memory really holds after a run, part by part, each part measured and
//! named with the call that reads it (the "allocated says 0, nvidia-smi says 12 GB"
//! question).
//!
//! - CUDA: driver-used (`torch.cuda.mem_get_info`: total − free) split into other processes
//!   (driver-used − this process's, from `nvidia-smi --query-compute-apps`), this process's
//!   CUDA context and libraries (its driver-used − reserved), the caching allocator's
//!   reserved-but-free blocks (`memory_reserved − memory_allocated`, where a run's freed
//!   activations stay) and allocated (`memory_allocated`: the run's weights and input, and
//!   what else the worker keeps).
//! - CPU: the process's resident memory (`/proc/self/statm`) against libtorch's tensor
//!   memory, the gap named: code, shared libraries, thread stacks and allocator slack.

use protocol::{MemoryBreakdown, MemoryPart};

/// Resident bytes of this process, from `/proc/self/statm` (its second field, in pages).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    // The kernel's page size for this process; 4 KiB on every platform Gradless targets
    // unless the auxiliary vector says otherwise.
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|auxv| {
            auxv.chunks_exact(16).find_map(|pair| {
                let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
                let value = u64::from_ne_bytes(pair[8..].try_into().ok()?);
                (key == 6).then_some(value) // AT_PAGESZ
            })
        })
        .unwrap_or(4096)
}

fn part(label: &str, bytes: u64, read_by: &str) -> MemoryPart {
    MemoryPart {
        label: label.into(),
        bytes,
        read_by: read_by.into(),
    }
}

/// The CPU bar: resident memory after the run, split into the run's tensors (weights and
/// input), the worker's other tensors, and the rest of the process. `resident_before` is
/// named in the total's label, so the bar also shows what the run added.
pub fn cpu(
    resident_before: Option<u64>,
    resident_after: u64,
    run_tensors: u64,
    other_tensors: u64,
) -> MemoryBreakdown {
    let tensors = run_tensors + other_tensors;
    let rest = resident_after.saturating_sub(tensors);
    let before = resident_before
        .map(|b| format!(", {} before the run", protocol::format_bytes(b)))
        .unwrap_or_default();
    MemoryBreakdown {
        total_bytes: run_tensors.min(resident_after)
            + other_tensors.min(resident_after.saturating_sub(run_tensors))
            + rest,
        total_label: format!("process resident memory after the run{before}"),
        parts: vec![
            part(
                "this run's tensors (weights + input)",
                run_tensors.min(resident_after),
                "libtorch CPU allocation reporting (the counter Gradless installs)",
            ),
            part(
                "other tensors the worker keeps (cached models)",
                other_tensors.min(resident_after.saturating_sub(run_tensors)),
                "libtorch CPU allocation reporting",
            ),
            part(
                "not tensors: code, shared libraries (libtorch itself), thread stacks, allocator slack",
                rest,
                "/proc/self/statm resident − tensor memory",
            ),
        ],
    }
}

/// The CUDA figures a breakdown is made of, each read by the caller.
pub struct CudaReadings {
    /// `total − free` from `cudaMemGetInfo` (`torch.cuda.mem_get_info`).
    pub driver_used: u64,
    /// This process's driver-used memory (`nvidia-smi --query-compute-apps`), if readable.
    pub this_process: Option<u64>,
    pub reserved: u64,
    pub allocated: u64,
    /// Of `allocated`: this run's weights and input.
    pub run_tensors: u64,
    /// The run's peak activations above its baseline (held in `reserved` once freed).
    pub peak_activations: u64,
}

/// The CUDA bar, bottom to top: allocated (this run's weights + input, other tensors),
/// reserved but free, context and libraries, other processes. Without a per-process figure
/// the context and other processes are one part, named as such.
pub fn cuda(r: &CudaReadings) -> MemoryBreakdown {
    let run = r.run_tensors.min(r.allocated);
    let free_in_pool = r.reserved.saturating_sub(r.allocated);
    let mut parts = vec![
        part(
            "allocated: this run's weights + input",
            run,
            "torch.cuda.memory_allocated",
        ),
        part(
            "allocated: other tensors the worker keeps (cached models, library workspaces)",
            r.allocated - run,
            "torch.cuda.memory_allocated",
        ),
        part(
            &format!(
                "reserved, not allocated: blocks the caching allocator keeps (the run's peak activations, {}, were here)",
                protocol::format_bytes(r.peak_activations)
            ),
            free_in_pool,
            "torch.cuda.memory_reserved − memory_allocated",
        ),
    ];
    let outside_pool = r.driver_used.saturating_sub(r.reserved.max(r.allocated));
    match r.this_process {
        Some(ours) => {
            let context = ours
                .saturating_sub(r.reserved.max(r.allocated))
                .min(outside_pool);
            parts.push(part(
                "CUDA context and libraries (cuBLAS, cuDNN kernels) of this process",
                context,
                "nvidia-smi per-process used − torch.cuda.memory_reserved",
            ));
            parts.push(part(
                "other processes on this GPU",
                outside_pool - context,
                "torch.cuda.mem_get_info used − nvidia-smi per-process used",
            ));
        }
        None => parts.push(part(
            "CUDA context, libraries and other processes (no per-process figure here)",
            outside_pool,
            "torch.cuda.mem_get_info used − torch.cuda.memory_reserved",
        )),
    }
    let total = parts.iter().map(|p| p.bytes).sum();
    MemoryBreakdown {
        total_bytes: total,
        total_label: "driver-used device memory (what nvidia-smi shows)".into(),
        parts,
    }
}

/// This process's used GPU memory as nvidia-smi reports it, in bytes.
pub fn nvidia_smi_process_used() -> Option<u64> {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-compute-apps=pid,used_memory",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()?;
    parse_compute_apps(&String::from_utf8_lossy(&out.stdout), std::process::id())
}

/// Sums the MiB figures of `pid`'s lines in `pid, used_memory` CSV.
fn parse_compute_apps(text: &str, pid: u32) -> Option<u64> {
    let mut total = None;
    for line in text.lines() {
        let mut fields = line.split(',').map(str::trim);
        let (Some(p), Some(mib)) = (fields.next(), fields.next()) else {
            continue;
        };
        if p.parse::<u32>().ok() == Some(pid) {
            if let Ok(mib) = mib.parse::<u64>() {
                *total.get_or_insert(0) += mib << 20;
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_read_and_covers_the_tensors() {
        let rss = resident_bytes().expect("statm readable on Linux");
        assert!(rss > 1 << 20);
        let b = cpu(Some(rss / 2), rss, 1 << 20, 0);
        assert_eq!(b.parts.iter().map(|p| p.bytes).sum::<u64>(), b.total_bytes);
        assert_eq!(b.total_bytes, rss);
    }

    #[test]
    fn cuda_parts_add_up_to_driver_used() {
        let gib = 1u64 << 30;
        let r = CudaReadings {
            driver_used: 12 * gib,
            this_process: Some(5 * gib),
            reserved: 4 * gib,
            allocated: gib,
            run_tensors: gib / 2,
            peak_activations: 3 * gib,
        };
        let b = cuda(&r);
        assert_eq!(b.total_bytes, 12 * gib);
        let bytes: Vec<u64> = b.parts.iter().map(|p| p.bytes).collect();
        assert_eq!(bytes, [gib / 2, gib / 2, 3 * gib, gib, 7 * gib]);
        assert_eq!(
            parse_compute_apps("12, 300\n77, 5\n12, 100\n", 12),
            Some(400 << 20)
        );
    }
}
