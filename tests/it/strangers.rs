//! Connections that do not prove the job secret cost a rank, and the job's store, nothing: a
//! group forms on time while strangers hold silent connections to every rank's listener, the
//! store serves its clients while hundreds of strangers hold connections to it (without a thread
//! each), and a flood of strangers leaves a bounded number of log lines. Real sockets, ranks as
//! threads.

use psyne::internal::StoreServer;
use psyne::Communicator;
use psyne::{Group, GroupOptions, MemoryStore, ReduceOp, Secret, Store, TcpStore, TransportPolicy};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long psyne gives one handshake (its `handshakes::WINDOW`): a rank or a store that waited on
/// one silent stranger would take this long, so every bound on time here is this window.
const HANDSHAKE_WINDOW: Duration = Duration::from_secs(10);

/// The backlog of a small group's listeners (psyne's least): connections past it wait until the
/// rank accepts.
const BACKLOG: usize = 16;

/// How many ranks the attacker has attacked so far; rank `r` starts once ranks below it were.
#[derive(Default)]
struct Attacked {
    count: Mutex<usize>,
    changed: Condvar,
}

impl Attacked {
    fn one_more(&self) {
        *self.count.lock().unwrap() += 1;
        self.changed.notify_all();
    }

    /// Waits until at least `n` ranks were attacked.
    fn wait_for(&self, n: usize) {
        let count = self.count.lock().unwrap();
        let (_count, timeout) = self
            .changed
            .wait_timeout_while(count, Duration::from_secs(60), |c| *c < n)
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "the attacker never attacked {n} ranks"
        );
    }
}

/// Only one test at a time installs the process-wide reporter.
static REPORTER: Mutex<()> = Mutex::new(());

/// The address `rank` listens on, once it has published it under `prefix` in `store`.
fn listening_address(store: &MemoryStore, prefix: &str, rank: usize) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(20);
    let entry = store
        .get(&format!("{prefix}/addr/{rank}"), deadline)
        .expect("the rank publishes its address");
    let text = String::from_utf8(entry).expect("UTF-8");
    text.split_whitespace()
        .next()
        .and_then(|a| a.parse().ok())
        .expect("an address first")
}

/// Opens `n` connections to `addr` that never say anything; they close when dropped.
fn silent_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect()
}

#[test]
fn a_group_forms_on_time_while_strangers_hold_silent_connections() {
    let _one = REPORTER.lock().unwrap_or_else(|e| e.into_inner());
    psyne::report::set_reporter(|_, _| {});
    let (size, prefix) = (3, "attacked");
    let store = Arc::new(MemoryStore::new());
    // The attacker opens 20 silent connections to each rank as soon as it publishes its address,
    // before the higher ranks connect to it: they start once the first 16 (the listener's
    // backlog for a group this small: more wait for the rank to accept) are queued.
    let attacked = Arc::new(Attacked::default());
    // One attacker thread per rank (connections past the backlog wait for the rank to accept).
    let attackers: Vec<_> = (0..size)
        .map(|r| {
            let (store, attacked) = (store.clone(), attacked.clone());
            std::thread::spawn(move || {
                let addr = listening_address(&store, prefix, r);
                let mut held = silent_connections(addr, BACKLOG);
                attacked.one_more();
                held.extend(silent_connections(addr, 20 - BACKLOG));
                held
            })
        })
        .collect();
    let started = Instant::now();
    let ranks: Vec<_> = (0..size)
        .map(|rank| {
            let store: Arc<dyn Store> = store.clone();
            let attacked = attacked.clone();
            std::thread::spawn(move || {
                attacked.wait_for(rank);
                let mut opts = GroupOptions::local(rank, size, prefix);
                opts.tunables.timeout = Duration::from_secs(30);
                opts.tunables.transport.policy = TransportPolicy::Tcp;
                let g = Group::builder(opts).shared_store(store).build()?;
                let mut x = vec![rank as f64 + 1.0; 1000];
                g.all_reduce(&mut x, ReduceOp::Sum)?;
                Ok::<f64, psyne::Error>(x[999])
            })
        })
        .collect();
    for r in ranks {
        let sum = r.join().expect("a rank panicked").expect("the group forms");
        assert_eq!(sum, 6.0);
    }
    let took = started.elapsed();
    for attacker in attackers {
        drop(attacker.join().expect("an attacker"));
    }
    // Unattacked this takes well under a second; a rank that waited on one silent handshake
    // would take its whole window.
    assert!(took < HANDSHAKE_WINDOW, "formed after {took:?}");
}

#[test]
fn the_store_serves_its_clients_while_strangers_hold_connections_without_a_thread_each() {
    let secret = Secret::generate().unwrap();
    let server =
        StoreServer::bind_logging("127.0.0.1:0", secret.clone(), Arc::new(|_| {})).unwrap();
    let addr = server.addr();
    let threads = || std::fs::read_dir("/proc/self/task").unwrap().count();
    let before = threads();
    let strangers = silent_connections(addr, 300);
    assert!(
        strangers.len() >= 250,
        "only {} connections opened",
        strangers.len()
    );
    let t = Instant::now();
    let client =
        TcpStore::connect(&addr.to_string(), &secret, t + Duration::from_secs(20)).unwrap();
    client.set("k", b"v").unwrap();
    assert_eq!(client.get("k", Instant::now()).unwrap(), b"v");
    // A store that waited on one silent stranger would take its whole handshake window.
    assert!(
        t.elapsed() < HANDSHAKE_WINDOW,
        "served after {:?}",
        t.elapsed()
    );
    // One thread for the client; none per stranger (this test's other threads aside).
    let during = threads();
    assert!(
        during < before + 20,
        "{before} threads before, {during} with 300 strangers"
    );
    drop(strangers);
}

#[test]
fn a_flood_of_strangers_leaves_a_bounded_number_of_log_lines() {
    let _one = REPORTER.lock().unwrap_or_else(|e| e.into_inner());
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let secret = Secret::generate().unwrap();
    let log_lines = lines.clone();
    let log = Arc::new(move |l: &str| log_lines.lock().unwrap().push(l.to_string()));
    let server = StoreServer::bind_logging("127.0.0.1:0", secret.clone(), log).unwrap();
    let addr = server.addr();
    for _ in 0..200 {
        if let Ok(mut s) = TcpStream::connect(addr) {
            use std::io::Write;
            let _ = s.write_all(&[0x55; 64]); // garbage where the reply should be
        }
    }
    // The server still serves, and has refused them all by the time it stops.
    let client = TcpStore::connect(
        &addr.to_string(),
        &secret,
        Instant::now() + Duration::from_secs(20),
    )
    .unwrap();
    client.set("k", b"v").unwrap();
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines.lock().unwrap().len() < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(server);
    let lines = lines.lock().unwrap();
    assert!(
        lines.len() <= 6,
        "{} lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
    let last = lines.last().expect("a summary line");
    assert!(last.contains("more connection(s)"), "{}", lines.join("\n"));
}
