//! Loading a C library at run time (`dlopen`), so that a program built with an optional system
//! library (PMIx here; hwloc in psyrun) still starts where that library is missing.

use std::ffi::{c_void, CStr, CString};

/// A library opened by [`open_first`]; never closed, so the symbols taken from it stay valid
/// for the life of the process.
#[derive(Clone, Copy)]
pub struct Library(*mut c_void);

// SAFETY: a dlopen handle is a process-wide token; dlsym may be called with it from any thread.
unsafe impl Send for Library {}
// SAFETY: as above; the handle is never written after dlopen returned it.
unsafe impl Sync for Library {}

/// The variable `var` names a file to load instead of `names`, if set; else `names`, in order.
pub fn candidates(var: &str, names: &[&str]) -> Vec<String> {
    match std::env::var_os(var) {
        Some(v) => vec![v.to_string_lossy().into_owned()],
        None => names.iter().map(|s| s.to_string()).collect(),
    }
}

/// Opens the first of `names` that loads, with `RTLD_NOW | flags` (`RTLD_LOCAL` or
/// `RTLD_GLOBAL`); else the loader's reason for each, joined.
pub fn open_first(names: &[String], flags: i32) -> Result<Library, String> {
    let mut errors = Vec::new();
    for name in names {
        let Ok(c) = CString::new(name.as_str()) else {
            errors.push(format!("{name:?}: contains a NUL byte"));
            continue;
        };
        // SAFETY: `c` is a valid NUL-terminated string; dlopen runs the library's initialisers,
        // which for the libraries loaded this way (PMIx, hwloc) only set up their own state.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | flags) };
        if !handle.is_null() {
            return Ok(Library(handle));
        }
        errors.push(dlerror_text());
    }
    Err(errors.join("; "))
}

impl Library {
    /// The address of the symbol `name`, or an error naming it.
    pub fn symbol(&self, name: &str) -> Result<*mut c_void, String> {
        let c = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: the handle is live (from dlopen, never closed) and `c` a valid NUL-terminated
        // symbol name.
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        if p.is_null() {
            Err(format!("no function {name}"))
        } else {
            Ok(p)
        }
    }
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a pointer to a NUL-terminated string owned by libc, valid
    // until the next dl* call on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}
