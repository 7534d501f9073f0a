//! scaled_dot_product_attention at the border: which backend libtorch picks for given
//! tensors ([`sdp_choice`], `at::_fused_sdp_choice`, the op SDPA itself consults) and the
//! context's SDP switches ([`SdpFlags`], `torch.backends.cuda.enable_*_sdp`), set for a
//! scope by [`SdpFlagsGuard`]. In `csrc/gradless_ext.cpp`.

use std::ffi::c_void;
use std::marker::PhantomData;

use protocol::SdpBackend;
use tch::Tensor;

use super::{check, ffi, ExtError, Result};

fn raw(t: &Tensor) -> *const c_void {
    t.as_ptr().cast()
}

/// The backend SDPA will run for `query`, `key`, `value` (and `mask`) with these settings,
/// under this thread's grad mode, autocast state and the context's switches: ask with the
/// very tensors the call will get. `Ok(None)`: libtorch found no backend (the call would
/// fail).
pub fn sdp_choice(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    mask: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    enable_gqa: bool,
) -> Result<Option<SdpBackend>> {
    let mut out = -1i64;
    // SAFETY: tch's tensor handles are `at::Tensor*`, borrowed for the length of the call;
    // the extension only reads them. A null mask means none.
    check(unsafe {
        ffi::gl_sdp_choice(
            raw(query),
            raw(key),
            raw(value),
            mask.map_or(std::ptr::null(), raw),
            dropout_p,
            is_causal.into(),
            enable_gqa.into(),
            &mut out,
        )
    })?;
    match out {
        -1 => Ok(None),
        i => SdpBackend::from_index(i)
            .map(Some)
            .ok_or_else(|| ExtError(format!("libtorch named an unknown SDPA backend ({i})"))),
    }
}

/// The context's SDP switches: which backends SDPA may choose from (process-wide flags,
/// read and set without a GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdpFlags {
    pub flash: bool,
    pub mem_efficient: bool,
    pub math: bool,
    pub cudnn: bool,
}

impl SdpFlags {
    pub fn read() -> Result<SdpFlags> {
        let (mut f, mut e, mut m, mut c) = (0, 0, 0, 0);
        // SAFETY: plain out-parameters.
        check(unsafe { ffi::gl_sdp_flags_get(&mut f, &mut e, &mut m, &mut c) })?;
        Ok(SdpFlags {
            flash: f != 0,
            mem_efficient: e != 0,
            math: m != 0,
            cudnn: c != 0,
        })
    }

    fn write(self) -> Result<()> {
        // SAFETY: plain values.
        check(unsafe {
            ffi::gl_sdp_flags_set(
                self.flash.into(),
                self.mem_efficient.into(),
                self.math.into(),
                self.cudnn.into(),
            )
        })
    }
}

/// Sets the [`SdpFlags`] for as long as the guard lives, then restores the previous ones
/// (`with torch.nn.attention.sdpa_kernel(...)`; the device thread is the only one running
/// models).
pub struct SdpFlagsGuard {
    prev: SdpFlags,
    _thread_bound: PhantomData<*const ()>,
}

impl SdpFlagsGuard {
    pub fn enter(flags: SdpFlags) -> Result<Self> {
        let prev = SdpFlags::read()?;
        flags.write()?;
        Ok(SdpFlagsGuard {
            prev,
            _thread_bound: PhantomData,
        })
    }
}

impl Drop for SdpFlagsGuard {
    fn drop(&mut self) {
        if let Err(e) = self.prev.write() {
            tracing::error!("restoring the SDP switches failed: {e}");
        }
    }
}
