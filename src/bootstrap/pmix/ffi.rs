//! The few PMIx v4 client functions and types psyne uses, loaded from `libpmix.so.2` at run time.
//!
//! Why `dlopen` rather than linking: a psyne program must start on hosts without PMIx, where this
//! path is simply absent (as RDMA is without libibverbs). The types below mirror PMIx 4.x's
//! `pmix_common.h` (Debian 12: libpmix2 4.2.2); their sizes are checked at compile time against
//! the header's (`pmix_proc_t` 260 bytes, `pmix_value_t` 32, `pmix_info_t` 552), and PMIx keeps
//! this ABI stable across its v4 and v5 releases.

use crate::dl;
use std::ffi::{c_char, c_int, c_void, CStr};

/// The library file names tried, in order, unless [`LIBRARY_VAR`] names another.
pub const LIBRARY_NAMES: [&str; 2] = ["libpmix.so.2", "libpmix.so"];

/// The variable that names another PMIx library file to load (tests use a missing one).
pub const LIBRARY_VAR: &str = "PSY_PMIX_LIB";

/// What to install to get PMIx, for error messages.
pub const INSTALL_HINT: &str =
    "install PMIx's client library (Debian/Ubuntu: apt-get install libpmix2; Fedora/RHEL: dnf install pmix)";

/// `PMIX_MAX_NSLEN`
const MAX_NSLEN: usize = 255;
/// `PMIX_MAX_KEYLEN`
const MAX_KEYLEN: usize = 511;

/// `PMIX_SUCCESS`
pub const SUCCESS: c_int = 0;
/// `PMIX_RANK_WILDCARD`: the job as a whole, for job-level keys.
pub const RANK_WILDCARD: u32 = u32::MAX - 1;
/// `PMIX_GLOBAL`: a value every process of the job may read, on any node.
pub const SCOPE_GLOBAL: u8 = 3;

// `pmix_data_type_t` values (pmix_common.h).
/// `PMIX_BOOL`
pub const TYPE_BOOL: u16 = 1;
/// `PMIX_STRING`
pub const TYPE_STRING: u16 = 3;
/// `PMIX_SIZE`
pub const TYPE_SIZE: u16 = 4;
/// `PMIX_INT`
pub const TYPE_INT: u16 = 6;
/// `PMIX_INT32`
pub const TYPE_INT32: u16 = 9;
/// `PMIX_UINT8`
pub const TYPE_UINT8: u16 = 12;
/// `PMIX_UINT16`
pub const TYPE_UINT16: u16 = 13;
/// `PMIX_UINT32`
pub const TYPE_UINT32: u16 = 14;
/// `PMIX_UINT64`
pub const TYPE_UINT64: u16 = 15;
/// `PMIX_PROC_RANK`
pub const TYPE_PROC_RANK: u16 = 40;

/// `pmix_proc_t`: a namespace and a rank in it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Proc {
    /// NUL-terminated namespace.
    pub nspace: [c_char; MAX_NSLEN + 1],
    /// The rank, or [`RANK_WILDCARD`].
    pub rank: u32,
}

/// The union inside `pmix_value_t`, with the members psyne reads or writes; `_size` gives it
/// the header's size (24 bytes: its largest members are three words).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Data {
    /// `PMIX_BOOL`
    pub flag: bool,
    /// `PMIX_STRING`: owned by whoever made the value.
    pub string: *mut c_char,
    /// `PMIX_SIZE`
    pub size: usize,
    /// `PMIX_INT`, `PMIX_INT32`
    pub integer: c_int,
    /// `PMIX_UINT8`
    pub uint8: u8,
    /// `PMIX_UINT16`
    pub uint16: u16,
    /// `PMIX_UINT32`, `PMIX_PROC_RANK`
    pub uint32: u32,
    /// `PMIX_UINT64`
    pub uint64: u64,
    _size: [u64; 3],
}

/// `pmix_value_t`: a typed value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Value {
    /// A `pmix_data_type_t` (`TYPE_*`).
    pub kind: u16,
    /// The value, read as `kind` says.
    pub data: Data,
}

/// `pmix_info_t`: a key, directives, and a value: how calls take their options.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Info {
    /// NUL-terminated key (`pmix.timeout`, ...).
    pub key: [c_char; MAX_KEYLEN + 1],
    /// `pmix_info_directives_t`
    pub flags: u32,
    /// The option's value.
    pub value: Value,
}

const _: () = assert!(std::mem::size_of::<Proc>() == 260);
const _: () = assert!(std::mem::size_of::<Value>() == 32);
const _: () = assert!(std::mem::size_of::<Info>() == 552);
const _: () = assert!(std::mem::offset_of!(Info, value) == 520);

/// Copies `text` into a fixed C character array, NUL-terminated; `None` if it does not fit.
pub fn fixed<const N: usize>(text: &str) -> Option<[c_char; N]> {
    if text.len() >= N || text.as_bytes().contains(&0) {
        return None;
    }
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(text.bytes()) {
        *o = b as c_char;
    }
    Some(out)
}

impl Info {
    /// An option `key` with `value`; `None` if the key is too long for PMIx.
    pub fn new(key: &str, value: Value) -> Option<Info> {
        Some(Info {
            key: fixed(key)?,
            flags: 0,
            value,
        })
    }

    /// A boolean option.
    pub fn flag(key: &str, on: bool) -> Option<Info> {
        Info::new(
            key,
            Value {
                kind: TYPE_BOOL,
                data: Data { flag: on },
            },
        )
    }

    /// An `int` option.
    pub fn int(key: &str, n: c_int) -> Option<Info> {
        Info::new(
            key,
            Value {
                kind: TYPE_INT,
                data: Data { integer: n },
            },
        )
    }
}

/// The PMIx client functions psyne calls, resolved once from the library.
pub struct Api {
    /// `PMIx_Init(pmix_proc_t *proc, pmix_info_t info[], size_t ninfo)`
    pub init: unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int,
    /// `PMIx_Finalize(const pmix_info_t info[], size_t ninfo)`
    pub finalize: unsafe extern "C" fn(*const Info, usize) -> c_int,
    /// `PMIx_Put(pmix_scope_t scope, const pmix_key_t key, pmix_value_t *val)`
    pub put: unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int,
    /// `PMIx_Commit(void)`
    pub commit: unsafe extern "C" fn() -> c_int,
    /// `PMIx_Fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo)`
    pub fence: unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> c_int,
    /// `PMIx_Get(const pmix_proc_t *proc, const pmix_key_t key, const pmix_info_t info[], size_t ninfo, pmix_value_t **val)`
    pub get: unsafe extern "C" fn(
        *const Proc,
        *const c_char,
        *const Info,
        usize,
        *mut *mut Value,
    ) -> c_int,
    /// `PMIx_Value_destruct(pmix_value_t *val)`: frees what a value owns (not the value itself).
    pub value_destruct: unsafe extern "C" fn(*mut Value),
    /// `PMIx_Error_string(pmix_status_t status)`
    pub error_string: unsafe extern "C" fn(c_int) -> *const c_char,
}

impl Api {
    /// Loads the library ([`LIBRARY_VAR`], else [`LIBRARY_NAMES`]) and resolves every function;
    /// the error says what failed to load. The library stays loaded for the life of the process.
    pub fn load() -> Result<Api, String> {
        Api::load_from(&dl::candidates(LIBRARY_VAR, &LIBRARY_NAMES))
    }

    /// Loads the first of `names` that opens and resolves every function.
    pub fn load_from(names: &[String]) -> Result<Api, String> {
        // RTLD_GLOBAL: PMIx loads its own plugins, which resolve symbols of libpmix itself.
        let lib = dl::open_first(names, libc::RTLD_GLOBAL)?;
        let sym = |name: &str| {
            lib.symbol(name)
                .map_err(|e| format!("the PMIx library has {e}"))
        };
        // SAFETY: each symbol is the PMIx v4 client function of that name, whose C prototype
        // (pmix.h, quoted on each field of `Api`) the target type repeats exactly: pointers for
        // pointers, `c_int` for `pmix_status_t` (int), `u8` for `pmix_scope_t` (uint8_t), `usize`
        // for `size_t`, `*const c_char` for `pmix_key_t` (a char array, passed as a pointer). The
        // library is never unloaded, so the pointers stay valid.
        unsafe {
            Ok(Api {
                init: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int,
                >(sym("PMIx_Init")?),
                finalize: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*const Info, usize) -> c_int,
                >(sym("PMIx_Finalize")?),
                put: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int,
                >(sym("PMIx_Put")?),
                commit: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(sym(
                    "PMIx_Commit",
                )?),
                fence: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> c_int,
                >(sym("PMIx_Fence")?),
                get: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(
                        *const Proc,
                        *const c_char,
                        *const Info,
                        usize,
                        *mut *mut Value,
                    ) -> c_int,
                >(sym("PMIx_Get")?),
                value_destruct: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut Value)>(
                    sym("PMIx_Value_destruct")?,
                ),
                error_string: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(c_int) -> *const c_char,
                >(sym("PMIx_Error_string")?),
            })
        }
    }

    /// PMIx's name for `status` (`PMIX_ERR_TIMEOUT`, ...).
    pub fn describe(&self, status: c_int) -> String {
        status_name(self.error_string, status)
    }
}

/// `PMIx_Error_string`'s name for `status` with the number (`PMIX_ERR_TIMEOUT (-24)`), through
/// `error_string` (the client's or the server's loaded copy of it).
pub fn status_name(
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    status: c_int,
) -> String {
    // SAFETY: PMIx_Error_string accepts any status and returns a pointer to a static
    // NUL-terminated string (or NULL, checked).
    let p = unsafe { error_string(status) };
    if p.is_null() {
        return format!("PMIx status {status}");
    }
    // SAFETY: non-null, static, NUL-terminated (above).
    let name = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    format!("{name} ({status})")
}
