//! `--device` of `gradless serve` and `gradless worker`: which of a machine's devices this
//! process measures on. libtorch is told through `CUDA_VISIBLE_DEVICES`, set before it
//! starts, so a process sees exactly the GPU it was given, as device 0, and a `cpu`
//! process sees none (its page then offers the CPU only).

use std::fmt;
use std::str::FromStr;

/// A `--device` value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceArg {
    /// What libtorch finds: the first GPU when there is one, else the CPU.
    #[default]
    Auto,
    /// The CPU only, even on a GPU host.
    Cpu,
    /// The N-th GPU of the machine (as `nvidia-smi` numbers them).
    Cuda(u32),
}

impl FromStr for DeviceArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DeviceArg::Auto),
            "cpu" => Ok(DeviceArg::Cpu),
            "cuda" => Ok(DeviceArg::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse::<u32>) {
                Some(Ok(n)) => Ok(DeviceArg::Cuda(n)),
                _ => Err(format!("`{other}`: use cuda:N (e.g. cuda:0), cpu or auto")),
            },
        }
    }
}

impl fmt::Display for DeviceArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceArg::Auto => f.write_str("auto"),
            DeviceArg::Cpu => f.write_str("cpu"),
            DeviceArg::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceArg {
    /// The value of `CUDA_VISIBLE_DEVICES` this choice sets, if any: `auto` leaves the
    /// environment as it is (an operator's own `CUDA_VISIBLE_DEVICES` still applies).
    pub fn visible_devices(self) -> Option<String> {
        match self {
            DeviceArg::Auto => None,
            DeviceArg::Cpu => Some(String::new()),
            DeviceArg::Cuda(n) => Some(n.to_string()),
        }
    }

    /// Sets `CUDA_VISIBLE_DEVICES` for this choice. Call it first thing in `main`, while the
    /// process has one thread and before libtorch is loaded: libtorch reads the variable
    /// once, when CUDA starts, and another thread reading the environment meanwhile would
    /// race with the write.
    pub fn apply_before_libtorch(self) {
        if let Some(v) = self.visible_devices() {
            std::env::set_var("CUDA_VISIBLE_DEVICES", v);
        }
    }

    /// The error when a GPU was asked for and libtorch found none.
    pub fn check_found(self, has_cuda: bool) -> Result<(), String> {
        match self {
            DeviceArg::Cuda(_) if !has_cuda => Err(format!(
                "--device {self}: libtorch finds no CUDA device here (check `nvidia-smi`, and that this binary was built with CUDA: docs/operating.md)"
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_values_read_and_print_back() {
        for (text, want) in [("auto", DeviceArg::Auto), ("cpu", DeviceArg::Cpu), ("cuda:3", DeviceArg::Cuda(3))] {
            assert_eq!(text.parse::<DeviceArg>(), Ok(want));
            assert_eq!(want.to_string(), text);
        }
        assert_eq!("cuda".parse::<DeviceArg>(), Ok(DeviceArg::Cuda(0)));
        for bad in ["cuda:x", "tpu", "cuda:-1", ""] {
            let e = bad.parse::<DeviceArg>().unwrap_err();
            assert!(e.contains("cuda:N"), "{bad}: {e}");
        }
    }

    #[test]
    fn each_choice_sets_what_libtorch_reads() {
        assert_eq!(DeviceArg::Auto.visible_devices(), None);
        assert_eq!(DeviceArg::Cpu.visible_devices().as_deref(), Some(""));
        assert_eq!(DeviceArg::Cuda(2).visible_devices().as_deref(), Some("2"));
        assert!(DeviceArg::Cuda(0).check_found(false).unwrap_err().contains("no CUDA device"));
        assert!(DeviceArg::Cuda(0).check_found(true).is_ok());
        assert!(DeviceArg::Cpu.check_found(false).is_ok());
    }
}
