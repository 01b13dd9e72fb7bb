//! POSIX shared-memory segments (`shm_open` + `mmap`), with hygiene: created exclusively with mode
//! 0600, opened only when this user owns them and nobody else can read them, named after the job
//! so a launcher can remove whatever a crashed job left in `/dev/shm`.
//!
//! A [`Segment`] unmaps on drop but never unlinks: unlinking the name is an explicit [`unlink`]
//! (once every process has mapped it, the name is no longer needed and a crash then leaves
//! nothing behind).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::ptr::{self, NonNull};

/// Where Linux (glibc) keeps POSIX shared-memory objects: `/name` is `/dev/shm/name`.
const SHM_DIR: &str = "/dev/shm";

/// Longest file name (without the leading '/'), as for any file in `/dev/shm`.
const NAME_MAX: usize = 255;

/// Longest sanitised job id inside a [`name_for`] name; longer ids are shortened with a hash.
const MAX_JOB_ID: usize = 32;

/// A mapped POSIX shared-memory segment, readable and writable, unmapped on drop.
#[derive(Debug)]
pub struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    name: String,
}

// SAFETY: a `Segment` owns a `MAP_SHARED` mapping, which is not tied to a thread; it only hands
// out a raw pointer, and any access through that pointer is `unsafe` code that must bring its own
// synchronisation (the memory is shared with other processes anyway). Unmapping in `drop` needs
// `&mut self` (exclusive) and is valid from any thread.
unsafe impl Send for Segment {}
// SAFETY: `&Segment` only exposes the pointer, the length and the name (all read-only).
unsafe impl Sync for Segment {}

/// An `io::Error` of the same kind as `e`, with `what` in front of its message.
fn context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The error of a segment `/dev/shm` has no room for ([`no_room`]).
#[derive(Debug)]
struct NoRoom(String);

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoRoom {}

/// Whether `e`, from [`Segment::create`], says that `/dev/shm` has no room for the segment (a
/// smaller one may fit).
pub fn no_room(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NoRoom>())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Checks that `name` is a portable `shm_open` name (one leading '/', no other '/', not empty,
/// at most [`NAME_MAX`] bytes after the '/', no NUL) and converts it.
fn shm_name(name: &str) -> io::Result<CString> {
    let rest = name
        .strip_prefix('/')
        .ok_or_else(|| invalid(format!("shared-memory name {name:?} must start with '/'")))?;
    if rest.is_empty() || rest == "." || rest == ".." || rest.contains('/') || rest.len() > NAME_MAX
    {
        return Err(invalid(format!(
            "shared-memory name {name:?} must be '/' then 1 to {NAME_MAX} bytes without '/'"
        )));
    }
    CString::new(name).map_err(|_| invalid(format!("shared-memory name {name:?} contains NUL")))
}

/// Maps `len` bytes of `fd` shared, readable and writable, every page faulted in now
/// (`MAP_POPULATE`): a ring's pages were otherwise faulted in by the first lap of messages through
/// it, on both sides, about 1.7 ms spread over a job's first calls over a link (2-rank 8 KiB
/// all-reduce: 9.9 µs a call over 200 calls, 3.0 with the pages in; `results/populate/`). The cost
/// moves to setting the link up: 2-8 ms more for a 2-rank job, 45 ms for 8 ranks on 2 cores.
fn map(fd: &OwnedFd, len: usize, name: &str) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping chosen by the kernel (null hint) cannot overlap any Rust object;
    // `fd` is an open descriptor for the object, borrowed for the call.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(context(
            io::Error::last_os_error(),
            format_args!("mmap of {name}"),
        ));
    }
    NonNull::new(p.cast::<u8>())
        .ok_or_else(|| io::Error::other(format!("mmap of {name} returned a null address")))
}

impl Segment {
    /// Creates the segment `name` (see [`name_for`]) of `len` bytes, zero-filled, mode 0600, and
    /// maps it. Fails (`AlreadyExists`) if the name exists, so a stale or foreign segment is never
    /// reused. The descriptor is closed once mapped. On a failure after the name was created, the
    /// name is unlinked again.
    pub fn create(name: &str, len: usize) -> io::Result<Segment> {
        let cname = shm_name(name)?;
        if len == 0 {
            return Err(invalid(format!("shared-memory segment {name}: length 0")));
        }
        let size = libc::off_t::try_from(len).map_err(|_| {
            invalid(format!(
                "shared-memory segment {name}: length {len} too large"
            ))
        })?;
        // SAFETY: `cname` is a valid NUL-terminated string for the call.
        let fd = unsafe {
            libc::shm_open(
                cname.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            )
        };
        if fd < 0 {
            return Err(context(
                io::Error::last_os_error(),
                format_args!("creating {name}"),
            ));
        }
        // SAFETY: `fd` was just returned by shm_open, is open, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let setup = || -> io::Result<NonNull<u8>> {
            // The umask may have taken bits off 0600 (even the owner's): set the mode exactly.
            // SAFETY: `fd` is open for the call.
            if unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } != 0 {
                return Err(context(
                    io::Error::last_os_error(),
                    format_args!("fchmod of {name}"),
                ));
            }
            // SAFETY: `fd` is open for the call.
            if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
                return Err(context(
                    io::Error::last_os_error(),
                    format_args!("sizing {name} to {len} bytes"),
                ));
            }
            // The pages now, so that a full /dev/shm is this error (ENOSPC) rather than a
            // SIGBUS at the first touch of a page it had no room for (MAP_POPULATE below
            // cannot say). posix_fallocate returns the error number instead of setting errno.
            // SAFETY: `fd` is open for the call.
            match unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, size) } {
                0 => {}
                err => {
                    let e = context(
                        io::Error::from_raw_os_error(err),
                        format_args!("reserving {len} bytes of /dev/shm for {name}"),
                    );
                    return Err(match err {
                        libc::ENOSPC => io::Error::new(e.kind(), NoRoom(e.to_string())),
                        _ => e,
                    });
                }
            }
            map(&fd, len, name)
        };
        match setup() {
            Ok(ptr) => Ok(Segment {
                ptr,
                len,
                name: name.to_string(),
            }),
            Err(e) => {
                let _ = unlink(name); // we created it (O_EXCL): do not leave it behind
                Err(e)
            }
        }
    }

    /// Opens and maps the existing segment `name`, which must be exactly `len` bytes, owned by
    /// this process's effective user, and inaccessible to group and others (mode `0?00`); anything
    /// else is refused with an error saying which check failed (`PermissionDenied` for owner and
    /// mode, `InvalidData` for the size or type, `NotFound` if there is no such segment). Call it
    /// only after the creator has announced the segment (it is sized right after creation).
    pub fn open(name: &str, len: usize) -> io::Result<Segment> {
        let cname = shm_name(name)?;
        if len == 0 {
            return Err(invalid(format!("shared-memory segment {name}: length 0")));
        }
        // SAFETY: `cname` is a valid NUL-terminated string for the call. (glibc adds O_NOFOLLOW
        // and O_CLOEXEC.)
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(context(
                io::Error::last_os_error(),
                format_args!("opening {name}"),
            ));
        }
        // SAFETY: `fd` was just returned by shm_open, is open, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `libc::stat` is plain old data; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is a valid, exclusively borrowed stat buffer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(context(
                io::Error::last_os_error(),
                format_args!("fstat of {name}"),
            ));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        let refuse =
            |kind, why: String| Err(io::Error::new(kind, format!("refusing {name}: {why}")));
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return refuse(
                io::ErrorKind::InvalidData,
                "not a regular shared-memory object".into(),
            );
        }
        if st.st_uid != euid {
            return refuse(
                io::ErrorKind::PermissionDenied,
                format!(
                    "owned by uid {}, not by this process's effective uid {euid} (another user's \
                     segment could be read or changed behind our back)",
                    st.st_uid
                ),
            );
        }
        if st.st_mode & 0o077 != 0 {
            return refuse(
                io::ErrorKind::PermissionDenied,
                format!(
                    "mode {:04o} lets group or others access it (psyne creates segments 0600)",
                    st.st_mode & 0o7777
                ),
            );
        }
        if u64::try_from(st.st_size).ok() != Some(len as u64) {
            return refuse(
                io::ErrorKind::InvalidData,
                format!("it is {} bytes, {len} expected", st.st_size),
            );
        }
        let ptr = map(&fd, len, name)?;
        Ok(Segment {
            ptr,
            len,
            name: name.to_string(),
        })
    }

    /// Start of the mapping: page aligned, valid for reads and writes of [`Segment::len`] bytes
    /// while the segment lives. Other processes may change the memory at any time: access it only
    /// through atomics or with a protocol (such as a [`super::ring::Ring`]).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a segment has at least one byte.
    #[allow(dead_code)] // goes with `len`
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The segment's name, as given to `shm_open` (`/psyne-...`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `create`/`open`, unmapped only
        // here; pointers derived from `as_ptr` must not be used past the segment's life (their
        // users' contract, e.g. `Ring::init`/`attach`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Removes the name `name` (existing mappings stay valid; the memory is freed with the last one).
/// `NotFound` if there is no such segment.
pub fn unlink(name: &str) -> io::Result<()> {
    let cname = shm_name(name)?;
    // SAFETY: `cname` is a valid NUL-terminated string for the call.
    if unsafe { libc::shm_unlink(cname.as_ptr()) } != 0 {
        return Err(context(
            io::Error::last_os_error(),
            format_args!("unlinking {name}"),
        ));
    }
    Ok(())
}

/// Unlinks every segment in `/dev/shm` whose name starts with `prefix` (with or without the
/// leading '/'; typically [`job_prefix`]) and that this effective user owns, and returns how many
/// it removed. For a launcher's clean-up after a job. Entries that vanish meanwhile are skipped;
/// if any other removal fails, the rest are still tried and the first error is returned. An empty
/// prefix is refused (it would match every segment of the user). No `/dev/shm`: `Ok(0)`.
pub fn remove_job_segments(prefix: &str) -> io::Result<usize> {
    let bare = prefix.strip_prefix('/').unwrap_or(prefix);
    if bare.is_empty() || bare.contains('/') {
        return Err(invalid(format!(
            "segment prefix {prefix:?} must be non-empty and contain no '/' after the first"
        )));
    }
    let dir = match fs::read_dir(SHM_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(context(e, format_args!("listing {SHM_DIR}"))),
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let mut removed = 0;
    let mut first_err: Option<io::Error> = None;
    for entry in dir {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                first_err.get_or_insert(context(e, format_args!("listing {SHM_DIR}")));
                continue;
            }
        };
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        if !file_name.starts_with(bare) {
            continue;
        }
        // `DirEntry::metadata` does not follow symbolic links.
        let owned_file = match entry.metadata() {
            Ok(m) => m.file_type().is_file() && m.uid() == euid,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => {
                first_err.get_or_insert(context(e, format_args!("{SHM_DIR}/{file_name}")));
                false
            }
        };
        if !owned_file {
            continue;
        }
        match unlink(&format!("/{file_name}")) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        None => Ok(removed),
        Some(e) => Err(io::Error::new(
            e.kind(),
            format!("removing segments {prefix}* (removed {removed}): {e}"),
        )),
    }
}

/// 64-bit FNV-1a: a small, stable hash for names (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The job id as it appears in segment names: ASCII letters, digits, '_' and '.' kept, anything
/// else (including '-', the field separator) replaced by '_'; "_" if empty; ids longer than 32
/// bytes shortened to 19 bytes, '_', and 12 hex digits of a hash of the whole id.
fn sanitise_job_id(job_id: &str) -> String {
    let s: String = job_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "_".to_string()
    } else if s.len() > MAX_JOB_ID {
        // `s` is ASCII, so any byte index is a character boundary.
        format!(
            "{}_{:012x}",
            &s[..MAX_JOB_ID - 13],
            fnv1a(job_id.as_bytes()) & 0xffff_ffff_ffff
        )
    } else {
        s
    }
}

/// The prefix shared by every segment name of job `job_id`: `/psyne-<sanitised job id>-`. The
/// sanitised id contains no '-', so the prefix of one job never matches another job's names
/// (unless their ids sanitise alike: `a-b` and `a_b`). Give it to [`remove_job_segments`].
pub fn job_prefix(job_id: &str) -> String {
    format!("/psyne-{}-", sanitise_job_id(job_id))
}

/// The name of the segment between ranks `a` and `b` (in that order) of group `group` in job
/// `job_id`: `/psyne-<sanitised job id>-<12 hex digits of a hash of group>-<a>-<b>`, for example
/// `/psyne-4f2a91-0c5e1d2b3a49-0-3`.
///
/// It starts with [`job_prefix`]`(job_id)`, is a valid `shm_open` name (one leading '/', no other
/// '/', only `[A-Za-z0-9_.-]`) and is at most 94 bytes long (7 + 32 + 1 + 12 + 1 + 20 + 1 + 20).
pub fn name_for(job_id: &str, group: &str, a: usize, b: usize) -> String {
    format!(
        "{}{:012x}-{a}-{b}",
        job_prefix(job_id),
        fnv1a(group.as_bytes()) & 0xffff_ffff_ffff
    )
}

#[cfg(all(test, not(miri)))] // shm_open, mmap and fchmod are beyond Miri
mod tests {
    use super::*;

    /// Unlinks a name when dropped, so a failing test leaves nothing in /dev/shm.
    struct Unlink(String);

    impl Drop for Unlink {
        fn drop(&mut self) {
            let _ = unlink(&self.0);
        }
    }

    /// A name unique to this test process and `tag`, with its clean-up guard.
    fn test_name(tag: &str) -> (String, Unlink) {
        let name = format!("/psyne-test-{}-{tag}", std::process::id());
        (name.clone(), Unlink(name))
    }

    /// Creates `name` by hand (not through `Segment::create`) with the given mode, size and,
    /// optionally, owner.
    fn create_by_hand(name: &str, mode: libc::mode_t, len: usize, owner: Option<libc::uid_t>) {
        let cname = shm_name(name).expect("name");
        // SAFETY: `cname` is a valid C string.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o600) };
        assert!(fd >= 0, "shm_open: {}", io::Error::last_os_error());
        // SAFETY: `fd` is fresh and owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `fd` is open for the call.
        let rc = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
        assert_eq!(rc, 0, "ftruncate: {}", io::Error::last_os_error());
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }, 0);
        if let Some(uid) = owner {
            // SAFETY: as above; gid -1 leaves the group alone.
            let rc = unsafe { libc::fchown(fd.as_raw_fd(), uid, libc::gid_t::MAX) };
            assert_eq!(rc, 0, "fchown: {}", io::Error::last_os_error());
        }
    }

    #[test]
    fn create_open_share_and_unlink() {
        let (name, _guard) = test_name("share");
        let a = Segment::create(&name, 8192).expect("create");
        assert_eq!(
            (a.len(), a.name(), a.is_empty()),
            (8192, name.as_str(), false)
        );
        assert_eq!(a.as_ptr() as usize % 4096, 0, "page aligned");
        // SAFETY: the mapping is 8192 bytes and only this test touches it.
        unsafe { a.as_ptr().add(8191).write(0x5a) };
        let b = Segment::open(&name, 8192).expect("open");
        assert_ne!(a.as_ptr(), b.as_ptr());
        // SAFETY: as above, through the second mapping of the same memory.
        assert_eq!(unsafe { b.as_ptr().add(8191).read() }, 0x5a);
        // SAFETY: as above; a new segment is zero-filled.
        assert_eq!(unsafe { b.as_ptr().read() }, 0);
        unlink(&name).expect("unlink");
        // The mappings stay valid after the name is gone.
        // SAFETY: as above.
        unsafe { b.as_ptr().add(8191).write(0xa5) };
        // SAFETY: as above.
        assert_eq!(unsafe { a.as_ptr().add(8191).read() }, 0xa5);
        let e = Segment::open(&name, 8192).expect_err("unlinked");
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        assert_eq!(
            unlink(&name).expect_err("twice").kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn create_twice_fails_and_keeps_the_first() {
        let (name, _guard) = test_name("twice");
        let _a = Segment::create(&name, 4096).expect("create");
        let e = Segment::create(&name, 4096).expect_err("the name exists");
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert!(e.to_string().contains(&name), "{e}");
        Segment::open(&name, 4096).expect("the first segment is still there");
    }

    #[test]
    fn open_refuses_segments_others_could_access() {
        let (name, _guard) = test_name("mode");
        for mode in [0o644, 0o620, 0o604, 0o660] {
            create_by_hand(&name, mode, 4096, None);
            let e = Segment::open(&name, 4096).expect_err("group/other bits set");
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            assert!(e.to_string().contains(&format!("{mode:04o}")), "{e}");
        }
        create_by_hand(&name, 0o600, 4096, None);
        Segment::open(&name, 4096).expect("0600 is fine");
    }

    #[test]
    fn open_refuses_a_wrong_size() {
        let (name, _guard) = test_name("size");
        let _a = Segment::create(&name, 4096).expect("create");
        let e = Segment::open(&name, 8192).expect_err("size differs");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("4096"), "{e}");
    }

    #[test]
    fn open_refuses_a_segment_of_another_user() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root can give a segment to another user");
            return;
        }
        let (name, _guard) = test_name("owner");
        create_by_hand(&name, 0o600, 4096, Some(65534));
        let e = Segment::open(&name, 4096).expect_err("owned by nobody");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("65534"), "{e}");
    }

    #[test]
    fn bad_names_and_lengths_are_refused() {
        let long = format!("/{}", "x".repeat(256));
        for bad in ["", "/", "noslash", "/a/b", "/..", "/nul\0x", long.as_str()] {
            let e = Segment::create(bad, 4096).expect_err(bad);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}: {e}");
            assert_eq!(
                unlink(bad).expect_err(bad).kind(),
                io::ErrorKind::InvalidInput
            );
        }
        let (name, _guard) = test_name("zero");
        let e = Segment::create(&name, 0).expect_err("length 0");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert_eq!(
            unlink(&name).expect_err("not created").kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn remove_job_segments_removes_only_matching_names() {
        let pid = std::process::id();
        let prefix = format!("/psyne-test-{pid}-rj-");
        let (m1, _g1) = test_name("rj-0-1");
        let (m2, _g2) = test_name("rj-2-3");
        let (o1, _g3) = test_name("rjx-0-1");
        let (o2, _g4) = test_name("other-rj-0-1");
        let segs: Vec<Segment> = [&m1, &m2, &o1, &o2]
            .iter()
            .map(|n| Segment::create(n, 4096).expect("create"))
            .collect();
        assert_eq!(remove_job_segments(&prefix).expect("remove"), 2);
        for n in [&m1, &m2] {
            let e = Segment::open(n, 4096).expect_err("removed");
            assert_eq!(e.kind(), io::ErrorKind::NotFound, "{n}: {e}");
        }
        for n in [&o1, &o2] {
            Segment::open(n, 4096).expect("kept");
        }
        // Without the leading '/', the same; nothing left to remove.
        assert_eq!(remove_job_segments(&prefix[1..]).expect("remove"), 0);
        for bad in ["", "/", "a/b"] {
            let e = remove_job_segments(bad).expect_err(bad);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}: {e}");
        }
        drop(segs);
    }

    #[test]
    fn names_are_valid_unique_and_carry_the_job_prefix() {
        let long = "j".repeat(300);
        let jobs = [
            "4f2a91",
            "job/with spaces-and-dashes",
            "",
            "日本語",
            long.as_str(),
        ];
        for job in jobs {
            let name = name_for(job, "group/0", 3, usize::MAX);
            assert!(name.starts_with(&job_prefix(job)), "{name}");
            assert!(
                name.starts_with("/psyne-") && !name[1..].contains('/'),
                "{name}"
            );
            assert!(name.len() <= 94, "{} bytes: {name}", name.len());
            assert!(
                name[1..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)),
                "{name}"
            );
            shm_name(&name).expect("a valid shm_open name");
        }
        assert_eq!(
            name_for("abc", "g", 0, 3).len(),
            "/psyne-abc-".len() + 12 + 4
        );
        assert_ne!(name_for("j", "g", 0, 1), name_for("j", "g", 1, 0));
        assert_ne!(name_for("j", "g", 0, 1), name_for("j", "h", 0, 1));
        assert_ne!(name_for("j", "g", 0, 12), name_for("j", "g", 1, 2));
        assert_ne!(
            name_for(&long, "g", 0, 1),
            name_for(&"j".repeat(301), "g", 0, 1)
        );
        // One job's prefix never matches another job's names, even when one id extends the other.
        assert!(!name_for("a-b", "g", 0, 1).starts_with(&job_prefix("a")));
        assert!(!name_for("ab", "g", 0, 1).starts_with(&job_prefix("a")));
        // The name works with shm_open.
        let name = name_for(&format!("test-{}", std::process::id()), "world", 0, 1);
        let _guard = Unlink(name.clone());
        Segment::create(&name, 4096).expect("create under a generated name");
    }
}
