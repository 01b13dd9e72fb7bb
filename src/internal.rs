//! What psyrun, psybench and the tests need from inside the library and users do not: not part
//! of the supported API (hidden from the docs), kept small on purpose. Everything a user needs is
//! at the crate root.

/// PMIx's v4 types (`pmix_proc_t`, `pmix_value_t`, `pmix_info_t`), constants and how psyne loads
/// `libpmix.so.2`: psyrun's PMIx server adds only the server side.
pub use crate::bootstrap::pmix::ffi as pmix_ffi;
/// The job's key-value store server (psyrun serves one per job; rank 0 under torchrun).
pub use crate::bootstrap::StoreServer;
/// Loading optional C libraries at run time (psyrun's hwloc and PMIx server).
pub use crate::dl;
/// The store key under which a rank records the peer a failed call lost (psyrun reads it).
pub use crate::group::losses::lost_key;
/// Declarations of ranks the others counted failed while they ran (psyrun ends them).
pub use crate::group::losses::{declaration, declared_count_key, declared_key, parse_declaration};
/// Whether this machine offers RDMA, and why not.
pub use crate::transport::rdma::{availability, Availability};
/// The prefix of a job's shared-memory segment names, and removing every segment a job left.
pub use crate::transport::shm::segment::{job_prefix, remove_job_segments};
