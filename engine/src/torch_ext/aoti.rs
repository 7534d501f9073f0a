//! AOTInductor packages at the border (`csrc/gradless_aoti.cpp`): a `.pt2` that
//! `torch._inductor.aoti_compile_and_package` wrote, loaded with libtorch's
//! `AOTIModelPackageLoader` ([`AotiPackage::load`]) and run on tensors
//! ([`AotiPackage::run`]). The package checks none of its inputs (unless built to), so the
//! caller (`crate::compiled`) checks shapes against what it exported before every call.

use std::ffi::{c_char, c_void, CStr, CString};
use std::marker::PhantomData;
use std::path::Path;

use super::{check, ExtError, Result};

mod ffi {
    use std::ffi::{c_char, c_void};
    extern "C" {
        pub fn gl_aoti_load(path: *const c_char, model_name: *const c_char, num_runners: i64, out: *mut *mut c_void) -> *mut c_char;
        pub fn gl_aoti_free(handle: *mut c_void) -> *mut c_char;
        pub fn gl_aoti_metadata(handle: *mut c_void, key: *const c_char, value: *mut *mut c_char) -> *mut c_char;
        pub fn gl_aoti_run(
            handle: *mut c_void,
            inputs: *const *const c_void,
            n_inputs: i64,
            outputs: *mut *mut c_void,
            capacity: i64,
            n_outputs: *mut i64,
        ) -> *mut c_char;
        pub fn gl_free_error(error: *mut c_char);
    }
}

/// The most tensors a package's forward may return.
const MAX_OUTPUTS: usize = 16;

/// A loaded AOTInductor package: its compiled kernels and the weights inside it. Dropping it
/// frees the model and the folder it was unpacked into.
pub struct AotiPackage {
    raw: *mut c_void,
    _not_send: PhantomData<*mut ()>,
}

fn c_string(text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| ExtError(format!("`{text}` holds a NUL byte")))
}

impl AotiPackage {
    /// Loads the package at `path` (its model "model"), one runner.
    pub fn load(path: &Path) -> Result<AotiPackage> {
        let path = c_string(&path.to_string_lossy())?;
        let name = c_string("model")?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: both strings are NUL-terminated and live for the call; the extension
        // writes a fresh heap pointer into `raw` on success.
        check(unsafe { ffi::gl_aoti_load(path.as_ptr(), name.as_ptr(), 1, &mut raw) })?;
        Ok(AotiPackage { raw, _not_send: PhantomData })
    }

    /// A metadata value the package carries (`AOTI_DEVICE_KEY`, or one written at compile
    /// time through `aot_inductor.metadata`).
    pub fn metadata(&self, key: &str) -> Result<Option<String>> {
        let key = c_string(key)?;
        let mut value: *mut c_char = std::ptr::null_mut();
        // SAFETY: `raw` is a live package; `value` receives a malloc'd string or null.
        check(unsafe { ffi::gl_aoti_metadata(self.raw, key.as_ptr(), &mut value) })?;
        if value.is_null() {
            return Ok(None);
        }
        // SAFETY: a NUL-terminated string malloc'd by the extension, freed right after.
        let text = unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned();
        // SAFETY: allocated with malloc by the extension, as its error strings are.
        unsafe { ffi::gl_free_error(value) };
        Ok(Some(text))
    }

    /// Runs the package on `inputs` (the exported forward's arguments, in order; made
    /// contiguous by the extension). The caller has checked their shapes and dtypes.
    pub fn run(&self, inputs: &[&tch::Tensor]) -> Result<Vec<tch::Tensor>> {
        let raw: Vec<*const c_void> = inputs.iter().map(|t| t.as_ptr() as *const c_void).collect();
        let mut outputs = [std::ptr::null_mut::<c_void>(); MAX_OUTPUTS];
        let mut n = 0i64;
        // SAFETY: `raw` holds live at::Tensor pointers for the call; the extension writes at
        // most MAX_OUTPUTS new at::Tensor pointers, which are owned here from then on.
        check(unsafe {
            ffi::gl_aoti_run(self.raw, raw.as_ptr(), raw.len() as i64, outputs.as_mut_ptr(), MAX_OUTPUTS as i64, &mut n)
        })?;
        // SAFETY: each of the first `n` pointers is a heap at::Tensor the extension gave up.
        Ok(outputs[..n as usize].iter().map(|&p| unsafe { tch::Tensor::from_ptr(p.cast()) }).collect())
    }
}

impl Drop for AotiPackage {
    fn drop(&mut self) {
        // SAFETY: `raw` came from gl_aoti_load and is freed once, here.
        let error = unsafe { ffi::gl_aoti_free(self.raw) };
        if let Err(e) = check(error) {
            tracing::warn!("freeing an AOTInductor package: {e}");
        }
    }
}
