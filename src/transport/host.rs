//! The identity of this machine, as the transports see it: its host name (for messages) and a
//! key that says which ranks can share memory.

/// This machine's host name (`gethostname`), or `localhost` if it has none.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is a valid writable buffer and its length is passed, so gethostname writes
    // within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// This machine's identity for shared memory: host name and kernel boot id. Ranks with equal
/// keys run on one kernel and can map each other's segments.
pub fn host_key() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{}/{}", hostname(), boot.trim())
}
