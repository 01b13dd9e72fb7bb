//! What psyrun tells libpmix about a job, as plain data first ([`job_info`], [`server_info`]:
//! pure, tested without PMIx), then as the `pmix_info_t` array libpmix takes ([`InfoArray`],
//! built through libpmix's own `PMIx_Info_list_*`, so libpmix owns and frees every copy).

use super::ffi::{self, DataArray, ServerApi};
use crate::pmi::JobMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;

/// `PMIX_JOBID`
pub const JOBID: &str = "pmix.jobid";
/// `PMIX_JOB_SIZE`
pub const JOB_SIZE: &str = "pmix.job.size";
/// `PMIX_UNIV_SIZE`
pub const UNIV_SIZE: &str = "pmix.univ.size";
/// `PMIX_MAX_PROCS`
pub const MAX_PROCS: &str = "pmix.max.size";
/// `PMIX_NUM_NODES`
pub const NUM_NODES: &str = "pmix.num.nodes";
/// `PMIX_JOB_NUM_APPS`
pub const JOB_NUM_APPS: &str = "pmix.job.napps";
/// `PMIX_NODE_MAP`
pub const NODE_MAP: &str = "pmix.nmap";
/// `PMIX_PROC_MAP`
pub const PROC_MAP: &str = "pmix.pmap";
/// `PMIX_LOCAL_SIZE`
pub const LOCAL_SIZE: &str = "pmix.local.size";
/// `PMIX_LOCAL_PEERS`
pub const LOCAL_PEERS: &str = "pmix.lpeers";
/// `PMIX_LOCALLDR`
pub const LOCALLDR: &str = "pmix.lldr";
/// `PMIX_TMPDIR`
pub const TMPDIR: &str = "pmix.tmpdir";
/// `PMIX_NSDIR`
pub const NSDIR: &str = "pmix.nsdir";
/// `PMIX_PROC_DATA`
pub const PROC_DATA: &str = "pmix.pdata";
/// `PMIX_RANK`
pub const RANK: &str = "pmix.rank";
/// `PMIX_GLOBAL_RANK`
pub const GLOBAL_RANK: &str = "pmix.grank";
/// `PMIX_APP_RANK`
pub const APP_RANK: &str = "pmix.apprank";
/// `PMIX_APPLDR`
pub const APPLDR: &str = "pmix.aldr";
/// `PMIX_APPNUM`
pub const APPNUM: &str = "pmix.appnum";
/// `PMIX_LOCAL_RANK`
pub const LOCAL_RANK: &str = "pmix.lrank";
/// `PMIX_NODE_RANK`
pub const NODE_RANK: &str = "pmix.nrank";
/// `PMIX_NODEID`
pub const NODEID: &str = "pmix.nodeid";
/// `PMIX_HOSTNAME`
pub const HOSTNAME: &str = "pmix.hname";
/// `PMIX_SERVER_TMPDIR`
pub const SERVER_TMPDIR: &str = "pmix.srvr.tmpdir";
/// `PMIX_SYSTEM_TMPDIR`
pub const SYSTEM_TMPDIR: &str = "pmix.sys.tmpdir";
/// `PMIX_SERVER_TOOL_SUPPORT`
pub const SERVER_TOOL_SUPPORT: &str = "pmix.srvr.tool";
/// `PMIX_SERVER_SYSTEM_SUPPORT`
pub const SERVER_SYSTEM_SUPPORT: &str = "pmix.srvr.sys";

/// A value of an entry, typed as PMIx's header documents the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    /// `PMIX_STRING`
    Str(String),
    /// `PMIX_UINT32`
    U32(u32),
    /// `PMIX_UINT16`
    U16(u16),
    /// `PMIX_PROC_RANK`
    Rank(u32),
    /// `PMIX_BOOL`
    Bool(bool),
    /// A node regex: libpmix's `PMIx_generate_regex` of this comma-separated host list.
    Nodes(String),
    /// A proc map regex: `PMIx_generate_ppn` of these ranks, `;` between nodes, `,` within.
    Procs(String),
    /// `PMIX_DATA_ARRAY` of `PMIX_INFO`: one rank's entries (`PMIX_PROC_DATA`).
    Array(Vec<Entry>),
}

/// One key and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The PMIx key (`pmix.job.size`, ...).
    pub key: &'static str,
    /// Its value.
    pub val: Val,
}

fn entry(key: &'static str, val: Val) -> Entry {
    Entry { key, val }
}

fn number(n: usize, what: &str) -> Result<u32, String> {
    u32::try_from(n).map_err(|_| format!("{what} {n} is too large for PMIx"))
}

fn joined(ranks: &[usize]) -> String {
    let list: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    list.join(",")
}

/// Everything psyrun registers for the job's namespace on host `node`: the job-level keys,
/// this node's, and a `PMIX_PROC_DATA` array for every rank of the job. `tmpdir` is the
/// ranks' `PMIX_TMPDIR` (a directory of their own: Open MPI registers what it makes there for
/// recursive removal when the job ends), `tmpdir/ns` their `PMIX_NSDIR`.
pub fn job_info(map: &JobMap, node: usize, tmpdir: &Path) -> Result<Vec<Entry>, String> {
    let host = map
        .hosts
        .get(node)
        .ok_or_else(|| format!("node {node} is not in the job's {} hosts", map.hosts.len()))?;
    let size = number(map.world_size, "the world size")?;
    let names: Vec<&str> = map.hosts.iter().map(|h| h.name.as_str()).collect();
    let ppn: Vec<String> = map.hosts.iter().map(|h| joined(&h.ranks)).collect();
    let mut apps = map.appnum.clone();
    apps.sort_unstable();
    apps.dedup();
    let leader = host.ranks.iter().min().copied().unwrap_or(0);
    let nsdir = nsdir(tmpdir).to_string_lossy().into_owned();
    let tmpdir = tmpdir.to_string_lossy().into_owned();
    let mut out = vec![
        entry(JOBID, Val::Str(map.job_id.clone())),
        entry(JOB_SIZE, Val::U32(size)),
        entry(UNIV_SIZE, Val::U32(size)),
        entry(MAX_PROCS, Val::U32(size)),
        entry(
            NUM_NODES,
            Val::U32(number(map.hosts.len(), "the host count")?),
        ),
        entry(
            JOB_NUM_APPS,
            Val::U32(number(apps.len().max(1), "the app count")?),
        ),
        entry(APPNUM, Val::U32(number(appnum(map, leader), "an appnum")?)),
        entry(NODE_MAP, Val::Nodes(names.join(","))),
        entry(PROC_MAP, Val::Procs(ppn.join(";"))),
        entry(
            LOCAL_SIZE,
            Val::U32(number(host.ranks.len(), "the local size")?),
        ),
        entry(LOCAL_PEERS, Val::Str(joined(&host.ranks))),
        entry(LOCALLDR, Val::Rank(number(leader, "a rank")?)),
        entry(TMPDIR, Val::Str(tmpdir)),
        entry(NSDIR, Val::Str(nsdir)),
    ];
    for (nodeid, h) in map.hosts.iter().enumerate() {
        for (local, &rank) in h.ranks.iter().enumerate() {
            out.push(entry(
                PROC_DATA,
                Val::Array(rank_info(map, nodeid, local, rank)?),
            ));
        }
    }
    Ok(out)
}

/// The ranks' `PMIX_NSDIR` inside their `PMIX_TMPDIR`.
pub fn nsdir(tmpdir: &Path) -> std::path::PathBuf {
    tmpdir.join("ns")
}

fn appnum(map: &JobMap, rank: usize) -> usize {
    map.appnum.get(rank).copied().unwrap_or(0)
}

/// One rank's `PMIX_PROC_DATA` entries (`PMIX_RANK` first, as PMIx requires).
fn rank_info(map: &JobMap, nodeid: usize, local: usize, rank: usize) -> Result<Vec<Entry>, String> {
    let app = appnum(map, rank);
    let in_app: Vec<usize> = (0..map.world_size)
        .filter(|&r| appnum(map, r) == app)
        .collect();
    let app_rank = in_app.iter().position(|&r| r == rank).unwrap_or(0);
    let app_leader = in_app.first().copied().unwrap_or(rank);
    let local = u16::try_from(local).map_err(|_| format!("local rank {local} is too large"))?;
    Ok(vec![
        entry(RANK, Val::Rank(number(rank, "a rank")?)),
        entry(GLOBAL_RANK, Val::Rank(number(rank, "a rank")?)),
        entry(APPNUM, Val::U32(number(app, "an appnum")?)),
        entry(APP_RANK, Val::Rank(number(app_rank, "a rank")?)),
        entry(APPLDR, Val::Rank(number(app_leader, "a rank")?)),
        entry(LOCAL_RANK, Val::U16(local)),
        entry(NODE_RANK, Val::U16(local)),
        entry(NODEID, Val::U32(number(nodeid, "a node id")?)),
        entry(HOSTNAME, Val::Str(map.hosts[nodeid].name.clone())),
    ])
}

/// What `PMIx_server_init` gets: its rendezvous files under `dir` (both the server's and the
/// "system" ones, so nothing is left in `/tmp`), this host's name as the job's maps spell it (so
/// libpmix knows which ranks are its own), and no tool or system-wide server.
pub fn server_info(dir: &Path, hostname: &str) -> Vec<Entry> {
    let dir = dir.to_string_lossy().into_owned();
    vec![
        entry(SERVER_TMPDIR, Val::Str(dir.clone())),
        entry(SYSTEM_TMPDIR, Val::Str(dir)),
        entry(HOSTNAME, Val::Str(hostname.to_string())),
        entry(SERVER_TOOL_SUPPORT, Val::Bool(false)),
        entry(SERVER_SYSTEM_SUPPORT, Val::Bool(false)),
    ]
}

/// A `pmix_info_t` array made by libpmix from [`Entry`]s; libpmix frees it on drop.
pub struct InfoArray<'a> {
    api: &'a ServerApi,
    array: DataArray,
}

impl<'a> InfoArray<'a> {
    /// Converts `entries` (regexes generated on the way).
    pub fn new(api: &'a ServerApi, entries: &[Entry]) -> Result<InfoArray<'a>, String> {
        let list = List::new(api)?;
        for e in entries {
            list.add(e)?;
        }
        list.convert()
    }

    /// The elements, for a `pmix_info_t info[]` argument.
    pub fn as_mut_ptr(&mut self) -> *mut ffi::Info {
        self.array.array.cast()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.array.size
    }
}

impl Drop for InfoArray<'_> {
    fn drop(&mut self) {
        // SAFETY: the array was filled by PMIx_Info_list_convert and is destructed once.
        unsafe { (self.api.array_destruct)(&mut self.array) };
    }
}

/// libpmix's list of `pmix_info_t` under construction (`PMIx_Info_list_start`).
struct List<'a> {
    api: &'a ServerApi,
    handle: *mut c_void,
}

impl<'a> List<'a> {
    fn new(api: &'a ServerApi) -> Result<List<'a>, String> {
        // SAFETY: no arguments; returns a new list or NULL.
        let handle = unsafe { (api.list_start)() };
        if handle.is_null() {
            return Err("PMIx_Info_list_start failed".into());
        }
        Ok(List { api, handle })
    }

    fn add(&self, e: &Entry) -> Result<(), String> {
        match &e.val {
            Val::Str(s) => {
                let c = cstring(s)?;
                self.add_raw(e.key, c.as_ptr().cast(), ffi::TYPE_STRING)
            }
            Val::U32(n) => self.add_raw(e.key, (n as *const u32).cast(), ffi::TYPE_UINT32),
            Val::Rank(n) => self.add_raw(e.key, (n as *const u32).cast(), ffi::TYPE_PROC_RANK),
            Val::U16(n) => self.add_raw(e.key, (n as *const u16).cast(), ffi::TYPE_UINT16),
            Val::Bool(b) => self.add_raw(e.key, (b as *const bool).cast(), ffi::TYPE_BOOL),
            Val::Nodes(s) => self.add_regex(e.key, s, self.api.generate_regex),
            Val::Procs(s) => self.add_regex(e.key, s, self.api.generate_ppn),
            Val::Array(inner) => {
                let mut array = InfoArray::new(self.api, inner)?;
                self.add_raw(
                    e.key,
                    (&mut array.array as *mut DataArray).cast(),
                    ffi::TYPE_DATA_ARRAY,
                )
            }
        }
    }

    /// Adds `key` with the value at `value`, as `PMIx_Value_load` reads a `kind` (a `char *`
    /// itself for strings and regexes, else a pointer to the value); libpmix copies it.
    fn add_raw(&self, key: &str, value: *const c_void, kind: u16) -> Result<(), String> {
        let k = cstring(key)?;
        // SAFETY: the list is live; `k` is NUL-terminated; `value` points to a value of `kind`
        // (see above) that outlives the call, which copies it.
        let status = unsafe { (self.api.list_add)(self.handle, k.as_ptr(), value, kind) };
        if status != ffi::SUCCESS {
            return Err(format!(
                "PMIx_Info_list_add {key}: {}",
                self.api.describe(status)
            ));
        }
        Ok(())
    }

    fn add_regex(
        &self,
        key: &str,
        input: &str,
        generate: unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> i32,
    ) -> Result<(), String> {
        let c = cstring(input)?;
        let mut regex: *mut c_char = std::ptr::null_mut();
        // SAFETY: `c` is NUL-terminated; libpmix stores a malloc'd regex in `regex`.
        let status = unsafe { generate(c.as_ptr(), &mut regex) };
        if status != ffi::SUCCESS || regex.is_null() {
            return Err(format!(
                "PMIx regex of {input:?}: {}",
                self.api.describe(status)
            ));
        }
        let added = self.add_raw(key, regex.cast(), ffi::TYPE_REGEX);
        // SAFETY: `regex` was malloc'd by libpmix and was copied by the add above.
        unsafe { libc::free(regex.cast()) };
        added
    }

    fn convert(self) -> Result<InfoArray<'a>, String> {
        let mut array = DataArray {
            kind: 0,
            size: 0,
            array: std::ptr::null_mut(),
        };
        // SAFETY: the list is live; `array` is an empty data array for libpmix to fill.
        let status = unsafe { (self.api.list_convert)(self.handle, &mut array) };
        if status != ffi::SUCCESS {
            return Err(format!(
                "PMIx_Info_list_convert: {}",
                self.api.describe(status)
            ));
        }
        Ok(InfoArray {
            api: self.api,
            array,
        })
    }
}

impl Drop for List<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from PMIx_Info_list_start and is released once.
        unsafe { (self.api.list_release)(self.handle) };
    }
}

/// `s` as a C string, or an error naming it.
pub fn cstring(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"))
}

/// A C string as text (lossy).
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string.
pub unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated (the caller's promise).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmi::HostRanks;
    use std::path::PathBuf;

    fn two_hosts() -> JobMap {
        JobMap {
            job_id: "job-7".into(),
            world_size: 5,
            hosts: vec![
                HostRanks {
                    name: "a".into(),
                    ranks: vec![0, 1, 2],
                },
                HostRanks {
                    name: "b".into(),
                    ranks: vec![3, 4],
                },
            ],
            appnum: vec![0, 0, 0, 1, 1],
            tmpdir: PathBuf::from("/tmp/job-7"),
        }
    }

    fn value<'a>(entries: &'a [Entry], key: &str) -> &'a Val {
        &entries
            .iter()
            .find(|e| e.key == key)
            .unwrap_or_else(|| panic!("no {key}"))
            .val
    }

    fn rank_data(entries: &[Entry], rank: u32) -> &[Entry] {
        entries
            .iter()
            .find_map(|e| match &e.val {
                Val::Array(inner) if inner.first().map(|f| &f.val) == Some(&Val::Rank(rank)) => {
                    Some(inner.as_slice())
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("no PMIX_PROC_DATA for rank {rank}"))
    }

    #[test]
    fn job_level_keys_describe_the_whole_job() {
        let info = job_info(&two_hosts(), 1, Path::new("/tmp/job-7/r")).unwrap();
        assert_eq!(value(&info, JOBID), &Val::Str("job-7".into()));
        for key in [JOB_SIZE, UNIV_SIZE, MAX_PROCS] {
            assert_eq!(value(&info, key), &Val::U32(5), "{key}");
        }
        assert_eq!(value(&info, NUM_NODES), &Val::U32(2));
        assert_eq!(value(&info, JOB_NUM_APPS), &Val::U32(2));
        assert_eq!(value(&info, NODE_MAP), &Val::Nodes("a,b".into()));
        assert_eq!(value(&info, PROC_MAP), &Val::Procs("0,1,2;3,4".into()));
        assert_eq!(value(&info, TMPDIR), &Val::Str("/tmp/job-7/r".into()));
        assert_eq!(value(&info, NSDIR), &Val::Str("/tmp/job-7/r/ns".into()));
    }

    #[test]
    fn node_level_keys_are_this_hosts() {
        let info = job_info(&two_hosts(), 1, Path::new("/tmp/job-7/r")).unwrap();
        assert_eq!(value(&info, LOCAL_SIZE), &Val::U32(2));
        assert_eq!(value(&info, LOCAL_PEERS), &Val::Str("3,4".into()));
        assert_eq!(value(&info, LOCALLDR), &Val::Rank(3));
        assert_eq!(value(&info, APPNUM), &Val::U32(1));
        let info = job_info(&two_hosts(), 0, Path::new("/tmp/job-7/r")).unwrap();
        assert_eq!(value(&info, LOCAL_PEERS), &Val::Str("0,1,2".into()));
        assert_eq!(value(&info, LOCALLDR), &Val::Rank(0));
    }

    #[test]
    fn every_rank_of_the_job_has_its_proc_data_rank_first() {
        let info = job_info(&two_hosts(), 0, Path::new("/tmp/job-7/r")).unwrap();
        let arrays = info.iter().filter(|e| e.key == PROC_DATA).count();
        assert_eq!(arrays, 5);
        let four = rank_data(&info, 4);
        assert_eq!(four[0].key, RANK);
        assert_eq!(value(four, LOCAL_RANK), &Val::U16(1));
        assert_eq!(value(four, NODE_RANK), &Val::U16(1));
        assert_eq!(value(four, NODEID), &Val::U32(1));
        assert_eq!(value(four, HOSTNAME), &Val::Str("b".into()));
        assert_eq!(value(four, APPNUM), &Val::U32(1));
        assert_eq!(value(four, APP_RANK), &Val::Rank(1));
        assert_eq!(value(four, APPLDR), &Val::Rank(3));
        let two = rank_data(&info, 2);
        assert_eq!(value(two, LOCAL_RANK), &Val::U16(2));
        assert_eq!(value(two, APP_RANK), &Val::Rank(2));
        assert_eq!(value(two, APPLDR), &Val::Rank(0));
    }

    #[test]
    fn a_node_outside_the_job_is_an_error() {
        let err = job_info(&two_hosts(), 2, Path::new("/tmp/job-7/r")).unwrap_err();
        assert!(err.contains("node 2"), "{err}");
    }

    #[test]
    fn the_server_keeps_its_files_where_it_is_told() {
        let info = server_info(Path::new("/tmp/x"), "a");
        assert_eq!(value(&info, SERVER_TMPDIR), &Val::Str("/tmp/x".into()));
        assert_eq!(value(&info, SYSTEM_TMPDIR), &Val::Str("/tmp/x".into()));
        assert_eq!(value(&info, HOSTNAME), &Val::Str("a".into()));
        assert_eq!(value(&info, SERVER_TOOL_SUPPORT), &Val::Bool(false));
    }
}
