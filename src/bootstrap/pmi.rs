//! PMI-1's simple wire protocol, the fallback for launchers without PMIx: MPICH's and Intel
//! MPI's Hydra `mpiexec`, `srun --mpi=pmi2` (Slurm's PMI-2 plugin speaks PMI-1 too). The
//! launcher hands each process `PMI_RANK`, `PMI_SIZE` and a connected socket `PMI_FD`, over which
//! it answers one text line per request:
//!
//! ```text
//! cmd=init pmi_version=1 pmi_subversion=1      cmd=response_to_init rc=0 pmi_version=1 ...
//! cmd=get_my_kvsname                           cmd=my_kvsname rc=0 kvsname=42.0
//! cmd=put kvsname=42.0 key=K value=V           cmd=put_result rc=0
//! cmd=barrier_in                               cmd=barrier_out rc=0
//! cmd=get kvsname=42.0 key=K                   cmd=get_result rc=0 value=V
//! cmd=finalize                                 cmd=finalize_ack rc=0
//! ```
//!
//! That is all psyne needs to meet the other ranks ([`crate::bootstrap::meet`]). Values may hold
//! neither spaces nor `=`, and at most 1,024 bytes (the launchers' usual `vallen_max`); rank 0's
//! record fits. A launcher that gives `PMI_PORT` (a TCP address) instead of `PMI_FD` is not
//! served: the error says to use psyrun or PMIx.

use super::meet::Exchange;
use crate::error::{Error, ErrorKind, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `PMI_FD`: the socket to the launcher's PMI server.
pub const FD: &str = "PMI_FD";

/// The longest line a PMI server may answer with (it says `vallen_max=1024`; keys and the
/// command add little).
const MAX_LINE: usize = 4096;

/// A PMI-1 session over the launcher's socket; finalized on drop.
pub struct Client {
    line: Mutex<BufReader<UnixStream>>,
    kvs: String,
}

impl Client {
    /// Takes over the socket in `PMI_FD` and starts a PMI-1 session.
    pub fn connect(deadline: Instant) -> Result<Client> {
        let fd: i32 = std::env::var(FD)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&fd| fd > 2)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Bootstrap,
                    "PMI_FD is not set to a file descriptor; this PMI launcher gives its address \
                     another way (PMI_PORT), which psyne does not speak: start the job with \
                     psyrun, or with a PMIx launcher (Open MPI's mpirun, srun --mpi=pmix)",
                )
            })?;
        // SAFETY: PMI_FD names a socket the launcher opened for this process and that nothing
        // else in it uses (only a PMI library would, and psyne is the one speaking PMI here);
        // the stream takes ownership and closes it on drop. A number that is not an open socket
        // makes the first read or write fail, which is reported.
        let stream = unsafe { UnixStream::from_raw_fd(fd) };
        Client::start(stream, deadline)
    }

    /// Starts a PMI-1 session over `stream`, connected to a PMI server.
    fn start(stream: UnixStream, deadline: Instant) -> Result<Client> {
        let mut client = Client {
            line: Mutex::new(BufReader::new(stream)),
            kvs: String::new(),
        };
        client.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
            deadline,
        )?;
        let reply = client.call("cmd=get_my_kvsname", "my_kvsname", deadline)?;
        client.kvs = field(&reply, "kvsname")
            .ok_or_else(|| protocol("my_kvsname without kvsname", &reply))?
            .to_string();
        Ok(client)
    }

    /// The job's key-value space, as the server named it (unique per job).
    pub fn kvs_name(&self) -> &str {
        &self.kvs
    }

    /// Sends one request and reads its answer, which must be `cmd=expect` with `rc=0`.
    fn call(&self, request: &str, expect: &str, deadline: Instant) -> Result<String> {
        let mut line = self
            .line
            .lock()
            .map_err(|_| Error::new(ErrorKind::Bootstrap, "the PMI session was poisoned"))?;
        let left = deadline.saturating_duration_since(Instant::now());
        let stream = line.get_mut();
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .and_then(|()| stream.write_all(format!("{request}\n").as_bytes()))
            .map_err(|e| Error::io(format!("PMI request `{request}` on PMI_FD"), e))?;
        let mut reply = String::new();
        let read = (*line)
            .by_ref()
            .take(MAX_LINE as u64)
            .read_line(&mut reply)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::new(
                    ErrorKind::Timeout,
                    format!("no PMI answer to `{request}` within PSY_TIMEOUT: is every rank starting psyne?"),
                ),
                _ => Error::io(format!("reading the PMI answer to `{request}`"), e),
            })?;
        if read == 0 || !reply.ends_with('\n') {
            return Err(protocol(
                "the launcher closed PMI_FD or sent an endless line",
                &reply,
            ));
        }
        let reply = reply.trim_end().to_string();
        if field(&reply, "cmd") != Some(expect) {
            return Err(protocol(&format!("expected cmd={expect}"), &reply));
        }
        if field(&reply, "rc").is_some_and(|rc| rc != "0") {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("the PMI server refused `{request}`: {reply}"),
            ));
        }
        Ok(reply)
    }
}

impl Exchange for Client {
    fn publish(&self, key: &str, value: &str, deadline: Instant) -> Result<()> {
        if [key, value].iter().any(|t| t.contains([' ', '=', '\n'])) {
            return Err(Error::config(format!(
                "PMI-1 cannot carry {key}={value}: spaces, `=` and newlines are not allowed"
            )));
        }
        let request = format!("cmd=put kvsname={} key={key} value={value}", self.kvs);
        self.call(&request, "put_result", deadline).map(drop)
    }

    fn fence(&self, deadline: Instant) -> Result<()> {
        self.call("cmd=barrier_in", "barrier_out", deadline)
            .map(drop)
    }

    fn read_rank0(&self, key: &str, deadline: Instant) -> Result<String> {
        let request = format!("cmd=get kvsname={} key={key}", self.kvs);
        let reply = self.call(&request, "get_result", deadline)?;
        field(&reply, "value")
            .map(String::from)
            .ok_or_else(|| protocol("get_result without value", &reply))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A live server answers at once; an unanswered finalize only costs this wait.
        let soon = Instant::now() + Duration::from_secs(1);
        let _ = self.call("cmd=finalize", "finalize_ack", soon);
    }
}

/// The value of `name` in a `k=v k=v` line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(' ')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn protocol(problem: &str, reply: &str) -> Error {
    Error::new(
        ErrorKind::Bootstrap,
        format!("the PMI server's answer is not PMI-1 ({problem}): {reply:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PMI server that answers each request line with the next of `answers` (then reads on
    /// in silence), on the other end of a socket pair.
    fn server(answers: &'static [&'static str]) -> UnixStream {
        let (ours, theirs) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(theirs.try_clone().unwrap());
            let mut out = theirs;
            for answer in answers {
                let mut request = String::new();
                if lines.read_line(&mut request).unwrap_or(0) == 0 {
                    return;
                }
                let _ = out.write_all(format!("{answer}\n").as_bytes());
            }
            // Silent until the client hangs up.
            let mut rest = String::new();
            while lines.read_line(&mut rest).unwrap_or(0) > 0 {}
        });
        ours
    }

    const HELLO: [&str; 2] = [
        "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
        "cmd=my_kvsname rc=0 kvsname=7.0",
    ];

    #[test]
    fn a_session_reads_rank_0s_value() {
        static ANSWERS: [&str; 5] = [
            HELLO[0],
            HELLO[1],
            "cmd=barrier_out rc=0",
            "cmd=get_result rc=0 value=psyne-store-1/9/h/s",
            "cmd=finalize_ack rc=0",
        ];
        let soon = Instant::now() + Duration::from_secs(10);
        let c = Client::start(server(&ANSWERS), soon).unwrap();
        assert_eq!(c.kvs, "7.0");
        c.fence(soon).unwrap();
        assert_eq!(c.read_rank0("k", soon).unwrap(), "psyne-store-1/9/h/s");
    }

    #[test]
    fn a_silent_server_is_a_timeout_and_a_refusal_names_the_request() {
        static SILENT: [&str; 2] = HELLO;
        let soon = Instant::now() + Duration::from_secs(10);
        let c = Client::start(server(&SILENT), soon).unwrap();
        let t0 = Instant::now();
        let e = c
            .fence(Instant::now() + Duration::from_millis(200))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        static REFUSING: [&str; 3] = [HELLO[0], HELLO[1], "cmd=get_result rc=-1 msg=nope"];
        let c = Client::start(server(&REFUSING), soon).unwrap();
        let e = c.read_rank0("psyne.store", soon).unwrap_err();
        assert!(
            e.to_string()
                .contains("refused `cmd=get kvsname=7.0 key=psyne.store`"),
            "{e}"
        );
        assert!(c.publish("a b", "c", soon).is_err());
    }

    #[test]
    fn fields_are_read_by_name() {
        let line = "cmd=get_result rc=0 value=psyne-store-1/1/a/b";
        assert_eq!(field(line, "cmd"), Some("get_result"));
        assert_eq!(field(line, "rc"), Some("0"));
        assert_eq!(field(line, "value"), Some("psyne-store-1/1/a/b"));
        assert_eq!(field(line, "kvsname"), None);
    }
}
