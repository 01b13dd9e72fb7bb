//! Reading this machine's [`Topology`] from hwloc, through a tiny FFI to its C library loaded at
//! run time.
//!
//! Why not a crate: `hwloc2` 2.2.0 panics when asked for NUMA nodes and overruns a buffer when
//! formatting objects (see the project's PITFALLS notes), and both it and `hwlocality` link
//! libhwloc at build time, so a psyrun built with them does not start at all on a host without
//! the library. Loading `libhwloc.so.15` (hwloc 2.x, whose ABI is stable across 2.x) with
//! `dlopen` when binding is needed keeps psyrun working everywhere: where hwloc is missing,
//! psyrun reads the topology Linux gives in `/sys` instead ([`super::sysfs`]), and only where
//! that fails too does binding fail with an error that says what to install (`--bind-to none`
//! reads nothing).
//!
//! Only nine exported functions are used, and only the first fields of `struct hwloc_obj`, whose
//! layout is mirrored below (checked against hwloc 2.9's `hwloc.h` in a test). The environment
//! variable `PSYRUN_HWLOC_LIB` names another library file to load instead (tests use it to
//! simulate a host without hwloc).

use super::topology::{Pu, Topology, TopologyError};
use psyne::internal::dl;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// The library file names tried, in order, unless `PSYRUN_HWLOC_LIB` is set.
pub const LIBRARY_NAMES: [&str; 2] = ["libhwloc.so.15", "libhwloc.so"];

/// The variable that overrides which library file is loaded.
pub const LIBRARY_VAR: &str = "PSYRUN_HWLOC_LIB";

/// What to install to get hwloc, for error messages.
pub const INSTALL_HINT: &str = "install hwloc's library (Debian/Ubuntu: apt-get install \
     libhwloc15; Fedora/RHEL: dnf install hwloc-libs), or run with --bind-to none";

/// Why the topology could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HwlocError {
    /// The library could not be loaded.
    #[error("hwloc could not be loaded ({0}); {INSTALL_HINT}")]
    Missing(String),
    /// The library is there but not hwloc 2.x, or lacks a function.
    #[error("the hwloc library found is not usable ({0}); psyrun needs hwloc 2.x: {INSTALL_HINT}")]
    Unusable(String),
    /// hwloc failed to read the topology.
    #[error("hwloc could not read this machine's topology ({0}); run with --bind-to none")]
    Failed(String),
}

impl From<TopologyError> for HwlocError {
    fn from(e: TopologyError) -> HwlocError {
        HwlocError::Failed(e.to_string())
    }
}

// hwloc 2.x object types (`hwloc_obj_type_t`).
const OBJ_PACKAGE: c_int = 1;
const OBJ_CORE: c_int = 2;
const OBJ_PU: c_int = 3;
const OBJ_NUMANODE: c_int = 13;
/// `HWLOC_TYPE_DEPTH_UNKNOWN` and `HWLOC_TYPE_DEPTH_MULTIPLE`.
const DEPTH_UNKNOWN: c_int = -1;
const DEPTH_MULTIPLE: c_int = -2;

/// The start of hwloc 2.x's `struct hwloc_obj`, up to the fields psyrun reads (`logical_index`
/// and `cpuset`). Only ever read through pointers hwloc hands out; never created here.
#[repr(C)]
struct HwlocObj {
    obj_type: c_int,
    subtype: *mut c_char,
    os_index: c_uint,
    name: *mut c_char,
    total_memory: u64,
    attr: *mut c_void,
    depth: c_int,
    logical_index: c_uint,
    next_cousin: *mut HwlocObj,
    prev_cousin: *mut HwlocObj,
    parent: *mut HwlocObj,
    sibling_rank: c_uint,
    next_sibling: *mut HwlocObj,
    prev_sibling: *mut HwlocObj,
    arity: c_uint,
    children: *mut *mut HwlocObj,
    first_child: *mut HwlocObj,
    last_child: *mut HwlocObj,
    symmetric_subtree: c_int,
    memory_arity: c_uint,
    memory_first_child: *mut HwlocObj,
    io_arity: c_uint,
    io_first_child: *mut HwlocObj,
    misc_arity: c_uint,
    misc_first_child: *mut HwlocObj,
    cpuset: *const c_void,
}

type Topo = *mut c_void;

/// The functions of libhwloc that psyrun calls.
struct Api {
    get_api_version: unsafe extern "C" fn() -> c_uint,
    topology_init: unsafe extern "C" fn(*mut Topo) -> c_int,
    topology_load: unsafe extern "C" fn(Topo) -> c_int,
    topology_destroy: unsafe extern "C" fn(Topo),
    get_type_depth: unsafe extern "C" fn(Topo, c_int) -> c_int,
    get_nbobjs_by_depth: unsafe extern "C" fn(Topo, c_int) -> c_uint,
    get_obj_by_depth: unsafe extern "C" fn(Topo, c_int, c_uint) -> *const HwlocObj,
    bitmap_first: unsafe extern "C" fn(*const c_void) -> c_int,
    bitmap_next: unsafe extern "C" fn(*const c_void, c_int) -> c_int,
}

impl Api {
    /// Opens the library (`PSYRUN_HWLOC_LIB` if set, else [`LIBRARY_NAMES`] in order) and
    /// resolves every function.
    fn load() -> Result<Api, HwlocError> {
        let names = dl::candidates(LIBRARY_VAR, &LIBRARY_NAMES);
        let lib = dl::open_first(&names, libc::RTLD_LOCAL).map_err(HwlocError::Missing)?;
        let sym = |name: &str| lib.symbol(name).map_err(HwlocError::Unusable);
        // SAFETY: for each transmute below, the symbol is the libhwloc 2.x function of that
        // name, whose C prototype the target type repeats exactly (hwloc.h: `unsigned
        // hwloc_get_api_version(void)`, `int hwloc_topology_init(hwloc_topology_t *)`, `int
        // hwloc_topology_load(hwloc_topology_t)`, `void hwloc_topology_destroy(hwloc_topology_t)`,
        // `int hwloc_get_type_depth(hwloc_topology_t, hwloc_obj_type_t)`, `unsigned
        // hwloc_get_nbobjs_by_depth(hwloc_topology_t, int)`, `hwloc_obj_t
        // hwloc_get_obj_by_depth(hwloc_topology_t, int, unsigned)`, `int
        // hwloc_bitmap_first(hwloc_const_bitmap_t)`, `int hwloc_bitmap_next(hwloc_const_bitmap_t,
        // int)`); the library stays loaded for the life of the process.
        let api = unsafe {
            Api {
                get_api_version: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_uint>(
                    sym("hwloc_get_api_version")?,
                ),
                topology_init: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut Topo) -> c_int,
                >(sym("hwloc_topology_init")?),
                topology_load: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(Topo) -> c_int,
                >(sym("hwloc_topology_load")?),
                topology_destroy: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Topo)>(
                    sym("hwloc_topology_destroy")?,
                ),
                get_type_depth: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(Topo, c_int) -> c_int,
                >(sym("hwloc_get_type_depth")?),
                get_nbobjs_by_depth: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(Topo, c_int) -> c_uint,
                >(sym("hwloc_get_nbobjs_by_depth")?),
                get_obj_by_depth: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(Topo, c_int, c_uint) -> *const HwlocObj,
                >(sym("hwloc_get_obj_by_depth")?),
                bitmap_first: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*const c_void) -> c_int,
                >(sym("hwloc_bitmap_first")?),
                bitmap_next: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*const c_void, c_int) -> c_int,
                >(sym("hwloc_bitmap_next")?),
            }
        };
        // SAFETY: takes no arguments and only returns a constant.
        let version = unsafe { (api.get_api_version)() };
        if version >> 16 != 2 {
            return Err(HwlocError::Unusable(format!(
                "its API version is {}.{}",
                version >> 16,
                (version >> 8) & 0xff
            )));
        }
        Ok(api)
    }
}

/// A loaded topology, destroyed on drop.
struct Loaded<'a> {
    api: &'a Api,
    topo: Topo,
}

impl Drop for Loaded<'_> {
    fn drop(&mut self) {
        // SAFETY: `topo` was initialised by hwloc_topology_init and is destroyed exactly once.
        unsafe { (self.api.topology_destroy)(self.topo) }
    }
}

impl Loaded<'_> {
    /// For each object of `obj_type`, its logical index and the OS indices of its CPUs; `None`
    /// if the topology has no such objects at one depth.
    fn objects(&self, obj_type: c_int) -> Option<Vec<(usize, Vec<usize>)>> {
        // SAFETY: `topo` is a loaded topology; the call only reads it.
        let depth = unsafe { (self.api.get_type_depth)(self.topo, obj_type) };
        if depth == DEPTH_UNKNOWN || depth == DEPTH_MULTIPLE {
            return None;
        }
        // SAFETY: as above; `depth` is one hwloc itself returned (possibly virtual, e.g. NUMA's).
        let n = unsafe { (self.api.get_nbobjs_by_depth)(self.topo, depth) };
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            // SAFETY: `i` is below the number of objects at `depth`, so hwloc returns a valid
            // object pointer, which lives as long as the topology.
            let obj = unsafe { (self.api.get_obj_by_depth)(self.topo, depth, i) };
            if obj.is_null() {
                continue;
            }
            // SAFETY: `obj` points to a live `struct hwloc_obj` whose first fields `HwlocObj`
            // mirrors; only plain fields are read.
            let (logical, cpuset) = unsafe { ((*obj).logical_index, (*obj).cpuset) };
            let mut cpus = Vec::new();
            if !cpuset.is_null() {
                // SAFETY: `cpuset` is the object's bitmap, alive with the topology; first/next
                // only read it and return -1 at the end.
                let mut cpu = unsafe { (self.api.bitmap_first)(cpuset) };
                while cpu >= 0 {
                    cpus.push(cpu as usize);
                    // SAFETY: as above.
                    cpu = unsafe { (self.api.bitmap_next)(cpuset, cpu) };
                }
            }
            out.push((logical as usize, cpus));
        }
        Some(out)
    }
}

/// Reads this machine's topology (the CPUs psyrun may use: hwloc leaves out those outside its
/// cgroup or affinity). A machine without core information gets one core per processing unit,
/// without NUMA or package information one of each.
pub fn load() -> Result<Topology, HwlocError> {
    let api = Api::load()?;
    let mut topo: Topo = std::ptr::null_mut();
    // SAFETY: `topo` is a valid place for hwloc to store the new topology's handle.
    if unsafe { (api.topology_init)(&mut topo) } != 0 || topo.is_null() {
        return Err(HwlocError::Failed("hwloc_topology_init failed".into()));
    }
    let loaded = Loaded { api: &api, topo };
    // SAFETY: `topo` was just initialised and is loaded once.
    if unsafe { (api.topology_load)(loaded.topo) } != 0 {
        return Err(HwlocError::Failed(format!(
            "hwloc_topology_load failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    let pus = loaded
        .objects(OBJ_PU)
        .ok_or_else(|| HwlocError::Failed("no processing units".into()))?;
    let owner = |objects: &Option<Vec<(usize, Vec<usize>)>>, cpu: usize| -> Option<usize> {
        objects
            .as_ref()?
            .iter()
            .find(|(_, cpus)| cpus.contains(&cpu))
            .map(|(logical, _)| *logical)
    };
    let (cores, numas, packages) = (
        loaded.objects(OBJ_CORE),
        loaded.objects(OBJ_NUMANODE),
        loaded.objects(OBJ_PACKAGE),
    );
    let n = pus.len();
    let list = pus
        .iter()
        .filter_map(|(logical, cpus)| cpus.first().map(|&cpu| (*logical, cpu)))
        .map(|(logical, cpu)| Pu {
            cpu,
            // A processing unit outside any core becomes a core of its own, numbered after
            // the real ones.
            core: owner(&cores, cpu).unwrap_or(n + logical),
            numa: owner(&numas, cpu).unwrap_or(0),
            package: owner(&packages, cpu).unwrap_or(0),
        })
        .collect();
    Ok(Topology::new(list)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_layout_matches_hwloc_2() {
        // Offsets in hwloc 2.9's hwloc.h on x86-64 and aarch64 (LP64), printed by a C program
        // with offsetof.
        if std::mem::size_of::<usize>() == 8 {
            assert_eq!(std::mem::offset_of!(HwlocObj, os_index), 16);
            assert_eq!(std::mem::offset_of!(HwlocObj, logical_index), 52);
            assert_eq!(std::mem::offset_of!(HwlocObj, cpuset), 184);
        }
    }

    #[test]
    fn this_machine_reads_like_the_kernel_says() {
        let topo = match load() {
            Ok(t) => t,
            Err(HwlocError::Missing(why)) => {
                eprintln!("skipped: no hwloc here ({why})");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let allowed = super::super::own_cpus().unwrap();
        let topo = topo.restrict(&allowed).unwrap();
        assert_eq!(topo.cpus(), allowed);
        assert!(!topo.cores().is_empty());
    }
}
