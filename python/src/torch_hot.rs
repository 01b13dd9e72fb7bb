//! The C entry points of the torch backend's C++ hot path (`psyne/_torch_hot.cpp`): a blocking
//! in-place all-reduce of one buffer on a [`NativeGroup`], callable from C++ with the GIL held.
//!
//! `dist.all_reduce` of 8 bytes spent as long in the Python half's checks of the tensor and the
//! options (each a Python attribute read, `opts.reduceOp` building a new object) as in the call
//! itself (`results/torch-ddp/floor-split-2026-11-27/`); the C++ half reads them as fields and
//! calls [`all_reduce`] through the table of a capsule, `psyne._native._torch_hot_api`.
//! Everything a call from Python does (the checks of the process and of interrupts, the wait for
//! the calls issued before it, the GIL released during the exchange) happens here exactly as in
//! [`NativeGroup::run_all_reduce`], which this calls.

use crate::NativeGroup;
use pyo3::prelude::*;
use std::ffi::{c_int, c_void, CStr};

/// The capsule's name, as `PyCapsule_Import` wants it (module path and attribute).
const CAPSULE_NAME: &CStr = c"psyne._native._torch_hot_api";

/// The table the capsule points to. `version` changes whenever a field's meaning does; the C++
/// half refuses a table of another version (and the Python half then keeps its own path).
#[repr(C)]
pub struct HotApi {
    /// [`API_VERSION`].
    version: u32,
    /// [`all_reduce`].
    all_reduce: unsafe extern "C" fn(*mut pyo3::ffi::PyObject, u8, usize, usize, u8) -> c_int,
}

/// The version of [`HotApi`] this module exports.
pub const API_VERSION: u32 = 1;

static API: HotApi = HotApi {
    version: API_VERSION,
    all_reduce,
};

/// In-place all-reduce of `len` elements of dtype tag `dtype` at `addr`, op tag `op`, on the
/// `NativeGroup` `group`: 0 when it ran, -1 with a Python exception set when it did not (psyne's
/// error as its `psyne._errors` class, or a `TypeError` when `group` is not a `NativeGroup`).
///
/// # Safety
/// The caller holds the GIL; `group` is a live Python object; `addr` and `len` describe
/// writable memory of that dtype that stays valid and untouched by others until this returns.
unsafe extern "C" fn all_reduce(
    group: *mut pyo3::ffi::PyObject,
    dtype: u8,
    addr: usize,
    len: usize,
    op: u8,
) -> c_int {
    // SAFETY: the caller holds the GIL (this function's contract).
    let py = unsafe { Python::assume_attached() };
    let run = std::panic::AssertUnwindSafe(|| -> PyResult<()> {
        // SAFETY: `group` is a live object the caller holds a reference to.
        let any = unsafe { Bound::from_borrowed_ptr(py, group) };
        let native = any.cast::<NativeGroup>()?;
        native.get().run_all_reduce(py, dtype, addr, len, op)
    });
    let result = std::panic::catch_unwind(run).unwrap_or_else(|_| {
        Err(pyo3::panic::PanicException::new_err(
            "psyne: the all-reduce of the torch hot path panicked",
        ))
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            e.restore(py);
            -1
        }
    }
}

/// Adds the capsule `_torch_hot_api` to the module.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let table = std::ptr::addr_of!(API) as *mut c_void;
    // SAFETY: the capsule points to a `static` that lives as long as the process and is never
    // written; its name is a `'static` C string; no destructor is needed.
    let raw = unsafe { pyo3::ffi::PyCapsule_New(table, CAPSULE_NAME.as_ptr(), None) };
    // SAFETY: `PyCapsule_New` returns a new reference, or null with an exception set.
    let capsule = unsafe { Bound::from_owned_ptr_or_err(m.py(), raw) }?;
    m.add("_torch_hot_api", capsule)
}
