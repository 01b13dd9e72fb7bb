//! The store over TCP: [`StoreServer`] serves a [`MemoryStore`] to authenticated clients,
//! [`TcpStore`] is a client.
//!
//! Wire format, after the [`crate::auth`] handshake. Request: `op: u8`, `key_len: u32`, key,
//! `val_len: u32`, value (little endian). `op` is 1 set, 2 get (value: the wait in ms as u64),
//! 3 add (value: i64), 4 set once (replies with the value held), 5 set while connected (value:
//! `len: u32`, the value, then the value for when the connection ends), 6 get many (key: the
//! keys joined by newlines; value: the wait in ms as u64; the reply's payload: each value as
//! `len: u32` then its bytes, in order), 7 get a range (key: the prefix; value: the first and
//! the end index and the wait in ms, three u64; the reply's payload as for op 6, encoded once by
//! the server for every client that reads the same range). Reply: `status: u8` (0 ok, 1 timed out, 2 error),
//! `len: u32`, payload.
//!
//! The server answers each client on a thread of its own (a small stack each), at most
//! [`StoreServer::limit_clients`] at once (default [`DEFAULT_MAX_CLIENTS`]): one beyond that is
//! answered with an error naming the limit and closed. When a client's connection ends it sets
//! every key that client set with op 5 to its value for when the client is gone.

use super::range_read::split_values;
use super::{MemoryStore, Store};
use crate::auth::{self, Secret};
use crate::error::{Error, ErrorKind, Result};
use crate::handshakes::Handshakes;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;
const OP_SET_ONCE: u8 = 4;
const OP_SET_EPHEMERAL: u8 = 5;
const OP_GET_MANY: u8 = 6;
const OP_GET_RANGE: u8 = 7;
const MAX_FIELD: u32 = 64 << 20;
/// How the server's error for an op it does not know begins (a client of a newer psyne falls
/// back on it).
const UNKNOWN_OP: &str = "unknown store op";

/// The most clients a store serves at once unless told otherwise
/// ([`StoreServer::limit_clients`]).
pub const DEFAULT_MAX_CLIENTS: usize = 4096;
/// The stack of a thread that serves one client: it parses requests and waits on the table.
const CLIENT_STACK: usize = 256 << 10;

/// Serves a store on a TCP port until dropped.
pub struct StoreServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    clients: Arc<Clients>,
    accept_thread: Option<std::thread::JoinHandle<()>>,
}

impl StoreServer {
    /// Binds `addr` (port 0 picks a free port) and serves in background threads. Clients must
    /// prove `secret`; those that fail are reported ([`crate::report`]) and closed.
    pub fn bind(
        addr: impl ToSocketAddrs + std::fmt::Display,
        secret: Secret,
    ) -> Result<StoreServer> {
        let report = |line: &str| crate::report::warn(line.trim_start_matches("psyne "));
        StoreServer::bind_logging(addr, secret, Arc::new(report))
    }

    /// [`StoreServer::bind`], with refused connections reported through `log` (one whole line
    /// each), for a launcher that keeps its own output in order.
    pub fn bind_logging(
        addr: impl ToSocketAddrs + std::fmt::Display,
        secret: Secret,
        log: Log,
    ) -> Result<StoreServer> {
        let listener = TcpListener::bind(&addr).map_err(|e| {
            Error::io(
                format!("binding the store at {addr} (is the port in use?)"),
                e,
            )
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("reading the store's address", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let clients = Arc::new(Clients {
            now: AtomicUsize::new(0),
            max: AtomicUsize::new(DEFAULT_MAX_CLIENTS),
        });
        let serving = Serving {
            table: Arc::new(MemoryStore::new()),
            clients: clients.clone(),
            stop: stop.clone(),
            log,
        };
        let accept_thread = std::thread::Builder::new()
            .name("psyne-store".into())
            .spawn(move || serving.accept_loop(listener, secret))
            .map_err(|e| Error::io("starting the store thread", e))?;
        Ok(StoreServer {
            addr: local,
            stop,
            clients,
            accept_thread: Some(accept_thread),
        })
    }

    /// Serves at most `max` clients at once (each has a thread): a job's launcher sets it from
    /// the job's size, so that nobody, even with the job's secret, can make it start threads
    /// without bound.
    pub fn limit_clients(&self, max: usize) {
        self.clients.max.store(max.max(1), Ordering::Relaxed);
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
    }
}

/// Where a store server reports refused connections.
pub type Log = crate::handshakes::Log;

/// How many clients are served, and how many may be.
struct Clients {
    now: AtomicUsize,
    max: AtomicUsize,
}

/// What the store's threads share.
struct Serving {
    table: Arc<MemoryStore>,
    clients: Arc<Clients>,
    stop: Arc<AtomicBool>,
    log: Log,
}

impl Serving {
    /// Accepts connections until `stop`: each proves the secret concurrently with the others
    /// ([`Handshakes`], so silent strangers delay no rank), then gets a thread that serves it.
    fn accept_loop(self, listener: TcpListener, secret: Secret) {
        if listener.set_nonblocking(true).is_err() {
            (self.log)("psyne store: cannot make the listener non-blocking; not serving");
            return;
        }
        // The server's own connection that wakes this loop when it is dropped is no stranger.
        let quiet_when_stopped: Log = {
            let (stop, log) = (self.stop.clone(), self.log.clone());
            Arc::new(move |line: &str| {
                if !stop.load(Ordering::SeqCst) {
                    log(line)
                }
            })
        };
        let mut handshakes = Handshakes::new(secret, "psyne store", quiet_when_stopped);
        let mut turned_away = 0usize;
        while !self.stop.load(Ordering::SeqCst) {
            let far = Instant::now() + Duration::from_secs(3600);
            for proven in handshakes.step(&listener, Duration::from_millis(100), far) {
                if self.stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Err(why) = self.serve_on_a_thread(proven.stream) {
                    turned_away += 1;
                    if turned_away <= crate::handshakes::LOGGED {
                        (self.log)(&format!("psyne store: turned a client away: {why}"));
                    }
                }
            }
        }
        if let Some(line) = handshakes.summary() {
            (self.log)(&line);
        }
    }

    /// Starts a thread that serves `stream`, unless as many clients as allowed are served
    /// already (then `stream` gets an error reply naming the limit, which its first request
    /// reads, and is closed).
    fn serve_on_a_thread(&self, mut stream: TcpStream) -> std::result::Result<(), String> {
        let max = self.clients.max.load(Ordering::Relaxed);
        if self.clients.now.fetch_add(1, Ordering::AcqRel) >= max {
            self.clients.now.fetch_sub(1, Ordering::AcqRel);
            let why = format!("the store serves at most {max} clients at once (a job's ranks need one each); close the clients you no longer use");
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = write_frame(&mut stream, 2, &[why.as_bytes()]);
            return Err(why);
        }
        let (table, clients) = (self.table.clone(), self.clients.clone());
        std::thread::Builder::new()
            .name("psyne-store-conn".into())
            .stack_size(CLIENT_STACK)
            .spawn(move || {
                serve(stream, &table);
                clients.now.fetch_sub(1, Ordering::AcqRel);
            })
            .map(|_| ())
            .map_err(|e| {
                self.clients.now.fetch_sub(1, Ordering::AcqRel);
                format!("cannot start a thread to serve it: {e}")
            })
    }
}

/// Answers the requests of one client that proved the secret, until it leaves; then sets the
/// keys it held while connected to their values for when it is gone.
fn serve(mut stream: TcpStream, table: &MemoryStore) {
    let mut held: Vec<(String, Vec<u8>)> = Vec::new();
    serve_requests(&mut stream, table, &mut held);
    for (key, gone) in held {
        let _ = table.set(&key, &gone);
    }
}

fn serve_requests(stream: &mut TcpStream, table: &MemoryStore, held: &mut Vec<(String, Vec<u8>)>) {
    while let Ok((op, key, val)) = read_request(stream) {
        let result = if op == OP_SET_EPHEMERAL {
            split_ephemeral(&val).and_then(|(value, gone)| {
                held.retain(|(k, _)| *k != key);
                held.push((key.clone(), gone.to_vec()));
                table.set(&key, value).map(|_| Arc::default())
            })
        } else {
            handle(table, op, &key, &val)
        };
        let reply = match result {
            Ok(data) => (0u8, data),
            Err(e) if e.kind() == ErrorKind::Timeout => (1, message(&e)),
            Err(e) => (2, message(&e)),
        };
        if write_frame(stream, reply.0, &[&reply.1]).is_err() {
            return;
        }
    }
}

/// Op 5's value: the value while connected, then the one for when the client is gone.
fn split_ephemeral(val: &[u8]) -> Result<(&[u8], &[u8])> {
    let bad = || Error::invalid("bad set-while-connected request");
    let (len, rest) = val.split_first_chunk::<4>().ok_or_else(bad)?;
    let len = u32::from_le_bytes(*len) as usize;
    (len <= rest.len())
        .then(|| rest.split_at(len))
        .ok_or_else(bad)
}

/// An error's message as a reply's payload.
fn message(e: &Error) -> Arc<Vec<u8>> {
    Arc::new(e.message().as_bytes().to_vec())
}

/// The reply's payload to one request (shared: a range read's reply is the same for every
/// client, encoded once).
fn handle(table: &MemoryStore, op: u8, key: &str, val: &[u8]) -> Result<Arc<Vec<u8>>> {
    match op {
        OP_SET => table.set(key, val).map(|_| Arc::default()),
        OP_GET => table.get(key, deadline_in(val)?).map(Arc::new),
        OP_ADD => {
            let d = i64::from_le_bytes(
                val.try_into()
                    .map_err(|_| Error::invalid("bad add request"))?,
            );
            table
                .add(key, d)
                .map(|v| Arc::new(v.to_le_bytes().to_vec()))
        }
        OP_SET_ONCE => table.set_once(key, val).map(Arc::new),
        OP_GET_MANY => {
            let keys: Vec<String> = key.split('\n').map(String::from).collect();
            let mut reply = Vec::new();
            for value in table.get_many(&keys, deadline_in(val)?)? {
                reply.extend_from_slice(&(value.len() as u32).to_le_bytes());
                reply.extend_from_slice(&value);
            }
            Ok(Arc::new(reply))
        }
        OP_GET_RANGE => {
            let bad = || Error::invalid("bad range request: its value is not three u64");
            let (start, rest) = val.split_first_chunk::<8>().ok_or_else(bad)?;
            let (end, wait) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
            let index = |b: &[u8; 8]| usize::try_from(u64::from_le_bytes(*b)).map_err(|_| bad());
            let (start, end) = (index(start)?, index(end)?);
            table.get_range_encoded(key, start..end.max(start), deadline_in(wait)?)
        }
        _ => Err(Error::invalid(format!("{UNKNOWN_OP} {op}"))),
    }
}

/// The deadline a get request carries: its value is the wait in ms (u64).
fn deadline_in(val: &[u8]) -> Result<Instant> {
    let ms = u64::from_le_bytes(
        val.try_into()
            .map_err(|_| Error::invalid("bad get request: its wait is not 8 bytes"))?,
    );
    Ok(Instant::now() + Duration::from_millis(ms))
}

fn read_field(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FIELD {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "store field too large",
        ));
    }
    let mut buf = vec![0u8; len as usize];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

fn read_request(s: &mut TcpStream) -> std::io::Result<(u8, String, Vec<u8>)> {
    let mut op = [0u8; 1];
    s.read_exact(&mut op)?;
    let key = String::from_utf8(read_field(s)?).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "store key is not UTF-8")
    })?;
    let val = read_field(s)?;
    Ok((op[0], key, val))
}

fn write_frame(s: &mut TcpStream, head: u8, fields: &[&[u8]]) -> std::io::Result<()> {
    let mut msg = vec![head];
    for f in fields {
        msg.extend_from_slice(&(f.len() as u32).to_le_bytes());
        msg.extend_from_slice(f);
    }
    s.write_all(&msg)
}

/// A client of a [`StoreServer`].
pub struct TcpStore {
    addr: String,
    stream: Mutex<TcpStream>,
    /// How long a reply may take beyond the wait a request asks for: the time the client was
    /// given to connect (the job's `PSY_TIMEOUT`), since a store serving a thousand ranks on a
    /// few loaded cores can take seconds to answer.
    patience: Duration,
}

/// The least [`TcpStore::patience`].
const MIN_PATIENCE: Duration = Duration::from_secs(10);

impl TcpStore {
    /// Connects to the store at `addr` (`host:port`), retrying until `deadline` while nothing
    /// listens there yet or the store, busy, pushes the handshake out; proves `secret`. Each
    /// later request waits for its reply as long as the client had to connect (at least 10 s)
    /// beyond the wait it asks for.
    pub fn connect(addr: &str, secret: &Secret, deadline: Instant) -> Result<TcpStore> {
        let stream = auth::connect_retrying(
            || dial(addr, deadline),
            secret,
            auth::STORE_CLIENT,
            deadline,
        )
        .map_err(|e| e.context(format!("store at {addr}")))?;
        Ok(TcpStore {
            addr: addr.to_string(),
            stream: Mutex::new(stream),
            patience: deadline
                .saturating_duration_since(Instant::now())
                .max(MIN_PATIENCE),
        })
    }

    /// The address this client talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The local address of the connection: the interface that reaches the store.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.lock()?
            .local_addr()
            .map_err(|e| Error::io("reading a socket address", e))
    }

    /// The `count` values of a reply to a read of many keys.
    fn values(&self, raw: &[u8], count: usize) -> Result<Vec<Vec<u8>>> {
        split_values(raw, count).ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("the store at {} answered a read of {count} keys with a malformed reply (a different psyne version?)", self.addr),
            )
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, TcpStream>> {
        self.stream.lock().map_err(|_| {
            Error::new(
                ErrorKind::Bootstrap,
                "the store client's lock was poisoned by a panic",
            )
        })
    }

    fn call(&self, op: u8, key: &str, val: &[u8], wait: Duration) -> Result<Vec<u8>> {
        let mut s = self.lock()?;
        let io = |e: std::io::Error| {
            let what = match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                    "no answer within {:?} beyond the request's wait (raise PSY_TIMEOUT if the machine is this loaded); is the launcher stopped?",
                    self.patience
                ),
                _ => format!("{e}; did the launcher exit?"),
            };
            Error::new(
                ErrorKind::Bootstrap,
                format!("lost the job's store at {}: {what}", self.addr),
            )
        };
        s.set_read_timeout(Some(wait + self.patience)).map_err(io)?;
        write_frame(&mut s, op, &[key.as_bytes(), val]).map_err(io)?;
        let mut status = [0u8; 1];
        s.read_exact(&mut status).map_err(io)?;
        let data = read_field(&mut s).map_err(io)?;
        match status[0] {
            0 => Ok(data),
            1 => Err(Error::new(
                ErrorKind::Timeout,
                String::from_utf8_lossy(&data).into_owned(),
            )),
            _ => Err(Error::new(
                ErrorKind::Bootstrap,
                String::from_utf8_lossy(&data).into_owned(),
            )),
        }
    }
}

/// A connection to the store at `addr`, dialled again (with backoff) until `deadline` while
/// nothing listens there yet.
fn dial(addr: &str, deadline: Instant) -> Result<TcpStream> {
    let mut wait = Duration::from_millis(5);
    let last_err = loop {
        let err = match connect_once(addr, deadline) {
            Ok(stream) => return Ok(stream),
            Err(e) => e,
        };
        if Instant::now() + wait >= deadline {
            break err;
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(Duration::from_millis(500));
    };
    Err(Error::new(
        ErrorKind::Bootstrap,
        format!("cannot reach the job's store at {addr}: {last_err}; is the launcher (or rank 0) still running, and is the address reachable from this host?"),
    ))
}

fn connect_once(addr: &str, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "the address resolves to nothing",
    );
    for a in addr.to_socket_addrs()? {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        match TcpStream::connect_timeout(&a, left.min(Duration::from_secs(5))) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call(OP_SET, key, value, Duration::ZERO).map(|_| ())
    }

    fn get(&self, key: &str, deadline: Instant) -> Result<Vec<u8>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        self.call(OP_GET, key, &(wait.as_millis() as u64).to_le_bytes(), wait)
    }

    fn get_many(&self, keys: &[String], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(k) = keys.iter().find(|k| k.contains('\n')) {
            return Err(Error::invalid(format!(
                "store key {k:?} holds a newline, which a get of many keys cannot carry"
            )));
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        let raw = self.call(
            OP_GET_MANY,
            &keys.join("\n"),
            &(wait.as_millis() as u64).to_le_bytes(),
            wait,
        )?;
        self.values(&raw, keys.len())
    }

    fn get_range(
        &self,
        prefix: &str,
        indices: Range<usize>,
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>> {
        if indices.is_empty() {
            return Ok(Vec::new());
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        let mut request = Vec::with_capacity(24);
        for word in [
            indices.start as u64,
            indices.end as u64,
            wait.as_millis() as u64,
        ] {
            request.extend_from_slice(&word.to_le_bytes());
        }
        match self.call(OP_GET_RANGE, prefix, &request, wait) {
            Ok(raw) => self.values(&raw, indices.len()),
            // A store of an older psyne knows no range reads: name every key instead.
            Err(e) if e.message().starts_with(UNKNOWN_OP) => {
                self.get_many(&super::range_keys(prefix, indices), deadline)
            }
            Err(e) => Err(e),
        }
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let v = self.call(OP_ADD, key, &delta.to_le_bytes(), Duration::ZERO)?;
        Ok(i64::from_le_bytes(v.try_into().map_err(|_| {
            Error::new(ErrorKind::Bootstrap, "malformed add reply from the store")
        })?))
    }

    fn set_once(&self, key: &str, value: &[u8]) -> Result<Vec<u8>> {
        self.call(OP_SET_ONCE, key, value, Duration::ZERO)
    }

    fn set_ephemeral(&self, key: &str, value: &[u8], when_gone: &[u8]) -> Result<()> {
        let len = u32::try_from(value.len())
            .map_err(|_| Error::invalid("a store value of 4 GiB or more"))?;
        let mut val = Vec::with_capacity(4 + value.len() + when_gone.len());
        val.extend_from_slice(&len.to_le_bytes());
        val.extend_from_slice(value);
        val.extend_from_slice(when_gone);
        self.call(OP_SET_EPHEMERAL, key, &val, Duration::ZERO)
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store on loopback and two clients of it.
    fn store_and_two_clients() -> (StoreServer, TcpStore, TcpStore) {
        let secret = Secret::generate().unwrap();
        let server = StoreServer::bind("127.0.0.1:0", secret.clone()).unwrap();
        let addr = server.addr().to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        let a = TcpStore::connect(&addr, &secret, deadline).unwrap();
        let b = TcpStore::connect(&addr, &secret, deadline).unwrap();
        (server, a, b)
    }

    #[test]
    fn clients_share_values_and_strangers_are_refused() {
        let (server, a, b) = store_and_two_clients();
        let deadline = Instant::now() + Duration::from_secs(5);
        let t = std::thread::spawn(move || b.get("x", Instant::now() + Duration::from_secs(5)));
        a.set("x", b"hello").unwrap();
        assert_eq!(t.join().unwrap().unwrap(), b"hello");
        assert_eq!(a.add("c", 4).unwrap(), 4);
        let err = a
            .get("never", Instant::now() + Duration::from_millis(50))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout);
        let addr = server.addr().to_string();
        let stranger = TcpStore::connect(&addr, &Secret::generate().unwrap(), deadline);
        assert_eq!(stranger.err().map(|e| e.kind()), Some(ErrorKind::Auth));
        // The store still serves its own clients after the stranger.
        assert_eq!(a.add("c", 1).unwrap(), 5);
    }

    #[test]
    fn get_many_returns_every_value_in_order_once_all_are_set() {
        let (_server, a, b) = store_and_two_clients();
        let keys: Vec<String> = ["x/0", "x/1", "x/2"].map(String::from).to_vec();
        a.set("x/2", b"").unwrap();
        a.set("x/0", b"zero").unwrap();
        let b =
            std::thread::spawn(move || b.get_many(&keys, Instant::now() + Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(50));
        a.set("x/1", b"one, set last").unwrap();
        let got = b.join().unwrap().unwrap();
        assert_eq!(
            got,
            vec![b"zero".to_vec(), b"one, set last".to_vec(), Vec::new()]
        );
        assert_eq!(
            a.get_many(&[], Instant::now()).unwrap(),
            Vec::<Vec<u8>>::new()
        );
        // A key nobody sets: a timeout naming it; a key with a newline: refused.
        let missing = ["x/0", "x/9"].map(String::from);
        let e = a
            .get_many(&missing, Instant::now() + Duration::from_millis(50))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.to_string().contains("x/9"), "{e}");
        let e = a
            .get_many(&["a\nb".to_string()], Instant::now())
            .unwrap_err();
        assert!(e.to_string().contains("newline"), "{e}");
        // The connection still serves requests after both.
        assert_eq!(a.get("x/0", Instant::now()).unwrap(), b"zero");
    }

    #[test]
    fn get_range_waits_for_every_key_of_its_range_and_sees_later_changes() {
        let (_server, a, b) = store_and_two_clients();
        let b = Arc::new(b);
        a.set("r/1", b"one").unwrap();
        a.set("r/10", b"ten, outside 0..3").unwrap();
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    b.get_range("r/", 0..3, Instant::now() + Duration::from_secs(5))
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        a.set("r/2", b"").unwrap();
        a.set("r/02", b"not r/2").unwrap();
        a.set("r/0", b"zero, set last").unwrap();
        let want = vec![b"zero, set last".to_vec(), b"one".to_vec(), Vec::new()];
        for r in readers {
            assert_eq!(r.join().unwrap().unwrap(), want);
        }
        // A key of the range set again: the next read sees the new value.
        a.set("r/1", b"uno").unwrap();
        let got = a.get_range("r/", 1..3, Instant::now()).unwrap();
        assert_eq!(got, vec![b"uno".to_vec(), Vec::new()]);
        assert_eq!(
            a.get_range("r/", 5..5, Instant::now()).unwrap(),
            Vec::<Vec<u8>>::new()
        );
        // A key nobody sets: a timeout naming it; the connection still serves after it.
        let e = a
            .get_range("r/", 0..4, Instant::now() + Duration::from_millis(50))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.to_string().contains("`r/3`"), "{e}");
        // Too many keys in one request: refused, nothing held.
        let e = a.get_range("r/", 0..(1 << 21), Instant::now()).unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
        assert_eq!(a.get("r/0", Instant::now()).unwrap(), b"zero, set last");
    }

    #[test]
    fn set_once_keeps_the_first_value_and_ephemeral_keys_change_when_their_client_leaves() {
        let (_server, a, b) = store_and_two_clients();
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(a.set_once("d", b"a's").unwrap(), b"a's");
        assert_eq!(b.set_once("d", b"b's").unwrap(), b"a's");
        b.set_ephemeral("alive/b", b"1", b"0").unwrap();
        assert_eq!(a.get("alive/b", deadline).unwrap(), b"1");
        drop(b);
        let mut now = a.get("alive/b", deadline).unwrap();
        while now == b"1" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            now = a.get("alive/b", deadline).unwrap();
        }
        assert_eq!(
            now, b"0",
            "the key says b is gone once its connection ended"
        );
    }

    #[test]
    fn connect_gives_up_at_the_deadline_with_a_hint() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let err = TcpStore::connect(
            &addr,
            &Secret::derive("x"),
            Instant::now() + Duration::from_millis(100),
        )
        .err()
        .unwrap();
        assert_eq!(err.kind(), ErrorKind::Bootstrap);
        assert!(err.message().contains("launcher"), "{err}");
    }

    #[test]
    fn clients_beyond_the_limit_are_turned_away_with_an_error_naming_it() {
        let secret = Secret::generate().unwrap();
        let server =
            StoreServer::bind_logging("127.0.0.1:0", secret.clone(), Arc::new(|_| {})).unwrap();
        server.limit_clients(2);
        let addr = server.addr().to_string();
        let connect =
            || TcpStore::connect(&addr, &secret, Instant::now() + Duration::from_secs(10));
        let (a, b) = (connect().unwrap(), connect().unwrap());
        a.set("a", b"1").unwrap();
        b.set("b", b"2").unwrap();
        let third = connect().unwrap();
        let e = third.set("c", b"3").unwrap_err();
        assert!(e.to_string().contains("at most 2 clients"), "{e}");
        // Once a client leaves, its place is free again.
        drop(a);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match connect().unwrap().get("b", Instant::now()) {
                Ok(v) => break assert_eq!(v, b"2"),
                Err(e) if Instant::now() < deadline => {
                    assert!(e.to_string().contains("at most 2"), "{e}")
                }
                Err(e) => panic!("no place freed: {e}"),
            }
        }
    }
}
