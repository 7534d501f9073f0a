//! What hardware the engine runs on: discovering devices and their abilities once at start,
//! memory meters per device, and the environment stamp every report carries.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use protocol::{Autocast, AutocastSupport, DeviceInfo, DeviceKind, EnvStamp, MemorySource};

use crate::torch_ext::{self, CpuMemoryCounter, ExtError};

/// The libtorch this binary was built against (from the build script).
pub const LIBTORCH_VERSION: &str = env!("GRADLESS_LIBTORCH_VERSION");

/// Facts about the machine gathered once, when the worker starts.
#[derive(Clone, Debug)]
pub struct Machine {
    pub cpu_model: String,
    pub cpu_flags: Vec<String>,
    pub cuda: Option<CudaFacts>,
}

#[derive(Clone, Debug)]
pub struct CudaFacts {
    pub name: String,
    pub total_memory_bytes: Option<u64>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub cudnn_version: Option<String>,
    /// Compute capability, major * 10 + minor (bf16 needs 80+).
    pub compute_capability: Option<u32>,
}

impl Machine {
    /// Looks at the CPU (procfs) and, when libtorch sees one, the GPU.
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let cpu_model = field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let cpu_flags = field("flags")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
        let cuda = torch_ext::cuda_available().then(probe_cuda);
        Machine {
            cpu_model,
            cpu_flags,
            cuda,
        }
    }

    /// The GPU's compute capability as major·10 + minor (80 for Ampere); `None` without
    /// CUDA or where it could not be read.
    pub fn compute_capability(&self) -> Option<u32> {
        self.cuda
            .as_ref()
            .and_then(|c| c.compute_capability)
    }

    pub fn has_cuda(&self) -> bool {
        self.cuda.is_some()
    }

    fn cpu_has(&self, flag: &str) -> bool {
        self.cpu_flags.iter().any(|f| f == flag)
    }

    /// What each autocast setting does on `device`, for the UI and for validation.
    pub fn autocast_support(&self, device: DeviceKind) -> Vec<AutocastSupport> {
        protocol::words::all::<Autocast>()
            .iter()
            .map(|&autocast| {
                let (supported, note) = match (device, autocast) {
                    (_, Autocast::Off) => (true, String::new()),
                    (DeviceKind::Cpu, Autocast::Bf16) if self.cpu_has("avx512_bf16") || self.cpu_has("amx_bf16") => {
                        (true, String::new())
                    }
                    (DeviceKind::Cpu, Autocast::Bf16) => (
                        true,
                        "this CPU has no bf16 units (AVX512-BF16/AMX): bf16 is emulated and usually slower than fp32"
                            .to_string(),
                    ),
                    (DeviceKind::Cpu, Autocast::Fp16) if self.cpu_has("avx512_fp16") || self.cpu_has("amx_fp16") => {
                        (true, String::new())
                    }
                    (DeviceKind::Cpu, Autocast::Fp16) => (
                        true,
                        "this CPU has no fp16 arithmetic units: fp16 is emulated and usually slower than fp32".to_string(),
                    ),
                    (DeviceKind::Cuda, Autocast::Fp16) => (true, String::new()),
                    (DeviceKind::Cuda, Autocast::Bf16) => {
                        match self.cuda.as_ref().and_then(|c| c.compute_capability) {
                            Some(cc) if cc < 80 => (
                                false,
                                format!("bf16 needs compute capability 8.0 or newer; this GPU has {}.{}", cc / 10, cc % 10),
                            ),
                            _ => (true, String::new()),
                        }
                    }
                };
                AutocastSupport { autocast, supported, note }
            })
            .collect()
    }

    /// The devices this machine offers, GPU first when present.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let mut out = Vec::new();
        if let Some(c) = &self.cuda {
            out.push(DeviceInfo {
                kind: DeviceKind::Cuda,
                name: c.name.clone(),
                total_memory_bytes: c.total_memory_bytes,
                autocast: self.autocast_support(DeviceKind::Cuda),
                no_cuda_graphs: crate::torch_ext::cuda_graphs_built().err(),
            });
        }
        out.push(DeviceInfo {
            kind: DeviceKind::Cpu,
            name: self.cpu_model.clone(),
            total_memory_bytes: total_ram(),
            autocast: self.autocast_support(DeviceKind::Cpu),
            no_cuda_graphs: None,
        });
        out
    }

    /// The stamp for a report measured now on `device` with `threads` intra-op threads.
    pub fn stamp(&self, device: DeviceKind, threads: u32) -> EnvStamp {
        let cuda = if device == DeviceKind::Cuda {
            self.cuda.as_ref()
        } else {
            None
        };
        EnvStamp {
            device,
            device_name: cuda
                .map(|c| c.name.clone())
                .unwrap_or_else(|| self.cpu_model.clone()),
            device_total_memory_bytes: match cuda {
                Some(c) => c.total_memory_bytes,
                None => total_ram(),
            },
            driver_version: cuda.and_then(|c| c.driver_version.clone()),
            cuda_version: cuda.and_then(|c| c.cuda_version.clone()),
            cudnn_version: cuda.and_then(|c| c.cudnn_version.clone()),
            libtorch_version: LIBTORCH_VERSION.to_string(),
            cpu_model: self.cpu_model.clone(),
            threads,
            measured_at: rfc3339_now(),
            gradless_version: env!("CARGO_PKG_VERSION").to_string(),
            worker: None,
            cpu_cores: std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u32),
        }
    }
}

fn probe_cuda() -> CudaFacts {
    // Everything is asked of CUDA device 0 as libtorch numbers it (CUDA_VISIBLE_DEVICES
    // applied): the driver gives its name, compute capability and PCI bus id; nvidia-smi,
    // asked by that bus id (its own numbering ignores CUDA_VISIBLE_DEVICES), gives the driver
    // version; libtorch gives the runtime and cuDNN it loaded. Each is optional: a missing
    // figure is absent, never another GPU's.
    let facts = match torch_ext::cuda_device_facts(0) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!("could not ask the CUDA driver about device 0: {e}");
            None
        }
    };
    let smi = facts.as_ref().and_then(|f| {
        Command::new("nvidia-smi")
            .args([
                "--query-gpu=name,driver_version,compute_cap",
                "--format=csv,noheader",
                &format!("--id={}", f.pci_bus_id),
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    });
    let smi = smi.map(|s| parse_smi_line(&s)).unwrap_or_default();
    let (cudart, cudnn) = torch_ext::cuda_versions().unwrap_or((0, 0));
    CudaFacts {
        name: facts
            .as_ref()
            .map(|f| f.name.clone())
            .filter(|n| !n.is_empty())
            .or(smi.name)
            .unwrap_or_else(|| "CUDA device 0".to_string()),
        total_memory_bytes: torch_ext::cuda_mem_info(0).ok().map(|(_, total)| total),
        driver_version: smi.driver_version,
        cuda_version: (cudart > 0).then(|| format!("{}.{}", cudart / 1000, (cudart % 1000) / 10)),
        cudnn_version: (cudnn > 0).then(|| format_cudnn_version(cudnn)),
        compute_capability: facts
            .as_ref()
            .map(|f| f.compute_capability)
            .filter(|&cc| cc > 0)
            .or(smi.compute_capability),
    }
}

/// cuDNN 9 numbers its versions major * 10000 + minor * 100 + patch (8.x used * 1000).
fn format_cudnn_version(v: i64) -> String {
    if v >= 90_000 {
        format!("{}.{}.{}", v / 10_000, (v % 10_000) / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100)
    }
}

/// One line of `nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader`.
#[derive(Debug, Default, PartialEq)]
struct SmiLine {
    name: Option<String>,
    driver_version: Option<String>,
    compute_capability: Option<u32>,
}

fn parse_smi_line(line: &str) -> SmiLine {
    let parts: Vec<&str> = line
        .lines()
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .collect();
    let field = |i: usize| {
        parts
            .get(i)
            .filter(|p| !p.is_empty() && !p.starts_with('['))
            .map(|p| p.to_string())
    };
    SmiLine {
        name: field(0),
        driver_version: field(1),
        compute_capability: field(2).and_then(|c| {
            let (maj, min) = c.split_once('.')?;
            Some(maj.parse::<u32>().ok()? * 10 + min.parse::<u32>().ok()?)
        }),
    }
}

pub(crate) fn total_ram() -> Option<u64> {
    meminfo_field("MemTotal:")
}

/// A field of /proc/meminfo (given in KiB there), in bytes; `None` off Linux.
pub(crate) fn meminfo_field(name: &str) -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = meminfo
        .lines()
        .find(|l| l.starts_with(name))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Reads allocated/reserved memory on one device, the way PyTorch's experts read it there.
pub enum Meter<'a> {
    Cpu(&'a CpuMemoryCounter),
    Cuda { index: i32 },
}

/// One reading of a meter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    pub allocated: u64,
    pub peak_allocated: u64,
    pub reserved: Option<u64>,
    pub peak_reserved: Option<u64>,
}

impl Meter<'_> {
    pub fn source(&self) -> MemorySource {
        match self {
            Meter::Cpu(_) => MemorySource::CpuTensorMemory,
            Meter::Cuda { .. } => MemorySource::CudaCachingAllocator,
        }
    }

    pub fn read(&self) -> Result<Reading, ExtError> {
        match self {
            Meter::Cpu(c) => {
                let r = c.read()?;
                Ok(Reading {
                    allocated: r.current,
                    peak_allocated: r.peak,
                    reserved: None,
                    peak_reserved: None,
                })
            }
            Meter::Cuda { index } => {
                let s = torch_ext::cuda_memory_stats(*index)?;
                Ok(Reading {
                    allocated: s.allocated.current,
                    peak_allocated: s.allocated.peak,
                    reserved: Some(s.reserved.current),
                    peak_reserved: Some(s.reserved.peak),
                })
            }
        }
    }

    pub fn reset_peak(&self) -> Result<(), ExtError> {
        match self {
            Meter::Cpu(c) => c.reset_peak(),
            Meter::Cuda { index } => torch_ext::cuda_reset_peak(*index),
        }
    }

    /// Device-level bytes in use (CUDA context included); `None` where it cannot be read.
    pub fn device_used(&self) -> Option<u64> {
        match self {
            Meter::Cpu(_) => None,
            Meter::Cuda { index } => torch_ext::cuda_mem_info(*index)
                .ok()
                .map(|(free, total)| total - free),
        }
    }
}

/// CUDA's caching allocator hands out memory in blocks of multiples of this many bytes
/// (`kMinBlockSize`): a tensor of n bytes holds `ceil(n / 512) × 512` of `memory_allocated`,
/// exactly so for tensors up to 1 MiB (the small pool splits its 2 MiB segments at 512 B
/// boundaries); a larger one may keep an unsplit tail of under 1 MiB more.
pub const CUDA_BLOCK_BYTES: u64 = 512;

/// The largest unsplit tail a CUDA block above 1 MiB may keep (`kSmallSize`: the large pool
/// splits a free block only when more than this would remain), so the same tensor can
/// occupy up to this much more in one run than in another.
pub const CUDA_LARGE_TAIL_BYTES: u64 = 1 << 20;

/// The bytes a tensor of `bytes` bytes adds to what `device`'s meter reads as allocated:
/// the CPU's counter sees exactly what libtorch's allocator was asked for; CUDA's rounds
/// up to whole [`CUDA_BLOCK_BYTES`] blocks (a lower bound above 1 MiB). Tests and rules
/// derive their tolerances from this, never from a figure seen on one machine.
pub fn allocated_for(device: DeviceKind, bytes: u64) -> u64 {
    match device {
        DeviceKind::Cpu => bytes,
        DeviceKind::Cuda => bytes.div_ceil(CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES,
    }
}

/// Now, as an RFC 3339 UTC timestamp (days-to-civil after Howard Hinnant).
pub fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_rfc3339(secs)
}

pub fn format_rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(
            format_rfc3339(1_798_761_600 + 3_723),
            "2027-01-01T01:02:03Z"
        );
    }

    #[test]
    fn nvidia_smi_lines_and_cudnn_versions_parse() {
        assert_eq!(
            parse_smi_line("NVIDIA H200, 580.65.06, 9.0\n"),
            SmiLine {
                name: Some("NVIDIA H200".into()),
                driver_version: Some("580.65.06".into()),
                compute_capability: Some(90),
            }
        );
        // Fields nvidia-smi cannot read come as "[N/A]": absent, not wrong.
        assert_eq!(
            parse_smi_line("Tesla T4, [N/A], 7.5"),
            SmiLine {
                name: Some("Tesla T4".into()),
                driver_version: None,
                compute_capability: Some(75),
            }
        );
        assert_eq!(parse_smi_line(""), SmiLine::default());
        assert_eq!(format_cudnn_version(91_002), "9.10.2");
        assert_eq!(format_cudnn_version(8_902), "8.9.2");
    }

    #[test]
    fn the_cpu_is_always_offered_and_off_always_supported() {
        let m = Machine::probe();
        let devices = m.devices();
        assert!(devices.iter().any(|d| d.kind == DeviceKind::Cpu));
        for d in devices {
            assert!(d
                .autocast
                .iter()
                .any(|a| a.autocast == Autocast::Off && a.supported));
        }
    }
}
