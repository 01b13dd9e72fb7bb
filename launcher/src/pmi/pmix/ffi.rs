//! The PMIx v4 *server* functions and types psyrun uses, resolved at run time from the same
//! `libpmix.so.2` psyne's client loads ([`psyne::internal::pmix_ffi`], whose `pmix_proc_t`,
//! `pmix_value_t` and `pmix_info_t` are reused here). Prototypes are PMIx 4.2's `pmix_server.h`
//! and `pmix.h` (Debian 12: libpmix2 4.2.2), quoted on each field; the server module's and the
//! data array's sizes are checked at compile time against the header's (224 and 24 bytes).

use psyne::internal::dl;
pub use psyne::internal::pmix_ffi::{Info, Proc, INSTALL_HINT, LIBRARY_NAMES, LIBRARY_VAR};
use std::ffi::{c_char, c_int, c_void};

/// `ns` as a `pmix_nspace_t`, or why it cannot be one.
pub fn fixed_nspace(ns: &str) -> Result<[c_char; 256], String> {
    psyne::internal::pmix_ffi::fixed::<256>(ns)
        .ok_or_else(|| format!("PMIx: the namespace {ns:?} is longer than 255 bytes or has a NUL"))
}

/// `PMIX_SUCCESS`
pub const SUCCESS: c_int = 0;
/// `PMIX_ERROR`
pub const ERROR: c_int = -1;
/// `PMIX_ERR_TIMEOUT`
pub const ERR_TIMEOUT: c_int = -24;
/// `PMIX_ERR_NOT_SUPPORTED`
pub const ERR_NOT_SUPPORTED: c_int = -47;
/// `PMIX_OPERATION_SUCCEEDED`: done at once, no callback will follow.
pub const OPERATION_SUCCEEDED: c_int = -157;

/// `PMIX_BOOL`
pub const TYPE_BOOL: u16 = 1;
/// `PMIX_STRING`
pub const TYPE_STRING: u16 = 3;
/// `PMIX_UINT16`
pub const TYPE_UINT16: u16 = 13;
/// `PMIX_UINT32`
pub const TYPE_UINT32: u16 = 14;
/// `PMIX_DATA_ARRAY`
pub const TYPE_DATA_ARRAY: u16 = 39;
/// `PMIX_PROC_RANK`
pub const TYPE_PROC_RANK: u16 = 40;
/// `PMIX_REGEX`: what `PMIx_generate_regex` and `PMIx_generate_ppn` return.
pub const TYPE_REGEX: u16 = 49;

/// `pmix_op_cbfunc_t`
pub type OpCallback = unsafe extern "C" fn(status: c_int, cbdata: *mut c_void);
/// `pmix_release_cbfunc_t`
pub type ReleaseCallback = unsafe extern "C" fn(cbdata: *mut c_void);
/// `pmix_modex_cbfunc_t`
pub type ModexCallback = unsafe extern "C" fn(
    status: c_int,
    data: *const c_char,
    ndata: usize,
    cbdata: *mut c_void,
    release_fn: Option<ReleaseCallback>,
    release_cbdata: *mut c_void,
);

/// `pmix_server_client_connected_fn_t`, also `client_finalized_fn_t`.
pub type ClientFn = unsafe extern "C" fn(
    proc_: *const Proc,
    server_object: *mut c_void,
    cbfunc: Option<OpCallback>,
    cbdata: *mut c_void,
) -> c_int;
/// `pmix_server_abort_fn_t`
pub type AbortFn = unsafe extern "C" fn(
    proc_: *const Proc,
    server_object: *mut c_void,
    status: c_int,
    msg: *const c_char,
    procs: *mut Proc,
    nprocs: usize,
    cbfunc: Option<OpCallback>,
    cbdata: *mut c_void,
) -> c_int;
/// `pmix_server_fencenb_fn_t`
pub type FenceFn = unsafe extern "C" fn(
    procs: *const Proc,
    nprocs: usize,
    info: *const Info,
    ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cbfunc: Option<ModexCallback>,
    cbdata: *mut c_void,
) -> c_int;
/// `pmix_server_dmodex_req_fn_t`
pub type DmodexFn = unsafe extern "C" fn(
    proc_: *const Proc,
    info: *const Info,
    ninfo: usize,
    cbfunc: Option<ModexCallback>,
    cbdata: *mut c_void,
) -> c_int;

/// `pmix_info_cbfunc_t` (psyrun never calls it: only its size matters).
pub type InfoCallback = unsafe extern "C" fn();

/// `pmix_server_job_control_fn_t`
pub type JobControlFn = unsafe extern "C" fn(
    requestor: *const Proc,
    targets: *const Proc,
    ntargets: usize,
    directives: *const Info,
    ndirs: usize,
    cbfunc: Option<InfoCallback>,
    cbdata: *mut c_void,
) -> c_int;

/// An entry of the module psyrun leaves empty (libpmix then does without, or answers "not
/// supported"); only its size matters: one function pointer.
pub type Unused = Option<unsafe extern "C" fn()>;

/// `pmix_server_module_t` (its v4 layout: 28 function pointers, NULL where not offered).
#[repr(C)]
pub struct ServerModule {
    /// `client_connected`
    pub client_connected: Option<ClientFn>,
    /// `client_finalized`
    pub client_finalized: Option<ClientFn>,
    /// `abort`
    pub abort: Option<AbortFn>,
    /// `fence_nb`
    pub fence_nb: Option<FenceFn>,
    /// `direct_modex`
    pub direct_modex: Option<DmodexFn>,
    /// From `publish` to `listener` (v1) and `notify_event` to `allocate` (v2): 14 entries.
    pub unused_before_job_control: [Unused; 14],
    /// `job_control`
    pub job_control: Option<JobControlFn>,
    /// `monitor` (v2), `get_credential` to `push_stdin` (v3) and `group` to
    /// `client_connected2` (v4): 8 entries.
    pub unused_after_job_control: [Unused; 8],
}

const _: () = assert!(std::mem::size_of::<ServerModule>() == 224);
const _: () = assert!(std::mem::offset_of!(ServerModule, fence_nb) == 24);
const _: () = assert!(std::mem::offset_of!(ServerModule, direct_modex) == 32);
const _: () = assert!(std::mem::offset_of!(ServerModule, job_control) == 152);

/// `pmix_data_array_t`
#[repr(C)]
pub struct DataArray {
    /// The elements' `pmix_data_type_t`.
    pub kind: u16,
    /// The number of elements.
    pub size: usize,
    /// The elements.
    pub array: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<DataArray>() == 24);
const _: () = assert!(std::mem::offset_of!(DataArray, array) == 16);

/// The server functions psyrun calls, resolved once.
pub struct ServerApi {
    /// `PMIx_server_init(pmix_server_module_t *module, pmix_info_t info[], size_t ninfo)`
    pub init: unsafe extern "C" fn(*mut ServerModule, *mut Info, usize) -> c_int,
    /// `PMIx_server_finalize(void)`
    pub finalize: unsafe extern "C" fn() -> c_int,
    /// `PMIx_generate_regex(const char *input, char **regex)`
    pub generate_regex: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> c_int,
    /// `PMIx_generate_ppn(const char *input, char **ppn)`
    pub generate_ppn: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> c_int,
    /// `PMIx_server_register_nspace(const pmix_nspace_t nspace, int nlocalprocs, pmix_info_t
    /// info[], size_t ninfo, pmix_op_cbfunc_t cbfunc, void *cbdata)`
    pub register_nspace: unsafe extern "C" fn(
        *const c_char,
        c_int,
        *mut Info,
        usize,
        Option<OpCallback>,
        *mut c_void,
    ) -> c_int,
    /// `PMIx_server_deregister_nspace(const pmix_nspace_t nspace, pmix_op_cbfunc_t cbfunc, void *cbdata)`
    pub deregister_nspace: unsafe extern "C" fn(*const c_char, Option<OpCallback>, *mut c_void),
    /// `PMIx_server_register_client(const pmix_proc_t *proc, uid_t uid, gid_t gid, void
    /// *server_object, pmix_op_cbfunc_t cbfunc, void *cbdata)`
    pub register_client: unsafe extern "C" fn(
        *const Proc,
        libc::uid_t,
        libc::gid_t,
        *mut c_void,
        Option<OpCallback>,
        *mut c_void,
    ) -> c_int,
    /// `PMIx_server_deregister_client(const pmix_proc_t *proc, pmix_op_cbfunc_t cbfunc, void *cbdata)`
    pub deregister_client: unsafe extern "C" fn(*const Proc, Option<OpCallback>, *mut c_void),
    /// `PMIx_server_setup_fork(const pmix_proc_t *proc, char ***env)`
    pub setup_fork: unsafe extern "C" fn(*const Proc, *mut *mut *mut c_char) -> c_int,
    /// `PMIx_Info_list_start(void)`
    pub list_start: unsafe extern "C" fn() -> *mut c_void,
    /// `PMIx_Info_list_add(void *ptr, const char *key, const void *value, pmix_data_type_t type)`
    pub list_add: unsafe extern "C" fn(*mut c_void, *const c_char, *const c_void, u16) -> c_int,
    /// `PMIx_Info_list_convert(void *ptr, pmix_data_array_t *par)`
    pub list_convert: unsafe extern "C" fn(*mut c_void, *mut DataArray) -> c_int,
    /// `PMIx_Info_list_release(void *ptr)`
    pub list_release: unsafe extern "C" fn(*mut c_void),
    /// `PMIx_Data_array_destruct(pmix_data_array_t *d)`
    pub array_destruct: unsafe extern "C" fn(*mut DataArray),
    /// `PMIx_Error_string(pmix_status_t status)`
    pub error_string: unsafe extern "C" fn(c_int) -> *const c_char,
}

/// Resolves `name` from `lib` as a function of type `F`.
///
/// # Safety
/// `F` must be an `extern "C"` function pointer type matching the C prototype of `name`.
unsafe fn function<F: Copy>(lib: &dl::Library, name: &str) -> Result<F, String> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    let p = lib
        .symbol(name)
        .map_err(|e| format!("the PMIx library has {e}"))?;
    // SAFETY: the caller promises `F` is the function pointer type of `name`; `p` is non-null
    // and the library is never unloaded.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

impl ServerApi {
    /// Loads `libpmix.so.2` (or what `PSY_PMIX_LIB` names) with `RTLD_GLOBAL` (its plugins
    /// resolve libpmix's own symbols) and resolves every server function; the error says what
    /// to install.
    pub fn load() -> Result<ServerApi, String> {
        ServerApi::load_from(&dl::candidates(LIBRARY_VAR, &LIBRARY_NAMES))
    }

    /// Loads the first of `names` that opens and resolves every server function.
    pub fn load_from(names: &[String]) -> Result<ServerApi, String> {
        let lib = dl::open_first(names, libc::RTLD_GLOBAL)
            .map_err(|e| format!("cannot load PMIx ({e}); {}", INSTALL_HINT))?;
        // SAFETY: each name is the PMIx 4 function whose prototype the field's type repeats
        // (quoted on the field): pointers for pointers, `c_int` for `pmix_status_t` and `int`,
        // `u16` for `pmix_data_type_t`, `usize` for `size_t`, `*const c_char` for
        // `pmix_nspace_t` (a char array, passed as a pointer), `Option<fn>` for nullable
        // callbacks.
        unsafe {
            Ok(ServerApi {
                init: function(&lib, "PMIx_server_init")?,
                finalize: function(&lib, "PMIx_server_finalize")?,
                generate_regex: function(&lib, "PMIx_generate_regex")?,
                generate_ppn: function(&lib, "PMIx_generate_ppn")?,
                register_nspace: function(&lib, "PMIx_server_register_nspace")?,
                deregister_nspace: function(&lib, "PMIx_server_deregister_nspace")?,
                register_client: function(&lib, "PMIx_server_register_client")?,
                deregister_client: function(&lib, "PMIx_server_deregister_client")?,
                setup_fork: function(&lib, "PMIx_server_setup_fork")?,
                list_start: function(&lib, "PMIx_Info_list_start")?,
                list_add: function(&lib, "PMIx_Info_list_add")?,
                list_convert: function(&lib, "PMIx_Info_list_convert")?,
                list_release: function(&lib, "PMIx_Info_list_release")?,
                array_destruct: function(&lib, "PMIx_Data_array_destruct")?,
                error_string: function(&lib, "PMIx_Error_string")?,
            })
        }
    }

    /// PMIx's name for `status`.
    pub fn describe(&self, status: c_int) -> String {
        psyne::internal::pmix_ffi::status_name(self.error_string, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_says_what_to_install() {
        let err = match ServerApi::load_from(&["libpmix-not-there.so.2".to_string()]) {
            Ok(_) => panic!("a library that does not exist loaded"),
            Err(e) => e,
        };
        assert!(err.contains("libpmix-not-there.so.2"), "{err}");
        assert!(err.contains("libpmix2"), "{err}");
    }

    #[test]
    fn namespaces_longer_than_pmix_allows_are_refused() {
        assert!(fixed_nspace("job-1").is_ok());
        assert!(fixed_nspace(&"x".repeat(256)).is_err());
        assert!(fixed_nspace("a\0b").is_err());
    }
}
