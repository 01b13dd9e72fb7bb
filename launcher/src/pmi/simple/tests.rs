//! The service driven by in-process clients over its real sockets.

use super::*;
use crate::pmi::{Alone, HostRanks, Report};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// Every wait of a test ends by then.
const WAIT: Duration = Duration::from_secs(20);

fn job(hosts: &[&[usize]]) -> Arc<JobMap> {
    Arc::new(JobMap {
        job_id: "psy-test-1".into(),
        world_size: hosts.iter().map(|h| h.len()).sum(),
        hosts: hosts
            .iter()
            .enumerate()
            .map(|(i, r)| HostRanks {
                name: format!("h{i}"),
                ranks: r.to_vec(),
            })
            .collect(),
        appnum: Vec::new(),
        tmpdir: "/tmp".into(),
    })
}

/// Collects reports; waits for one.
#[derive(Default)]
struct Reports {
    seen: Mutex<Vec<Report>>,
    cond: Condvar,
}

impl Reports {
    fn reporter(self: &Arc<Self>) -> Reporter {
        let me = self.clone();
        Arc::new(move |r| {
            me.seen.lock().unwrap().push(r);
            me.cond.notify_all();
        })
    }

    fn wait_for(&self, want: &Report) {
        let deadline = Instant::now() + WAIT;
        let mut seen = self.seen.lock().unwrap();
        while !seen.contains(want) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no {want:?} in {seen:?}");
            seen = self.cond.wait_timeout(seen, left).unwrap().0;
        }
    }
}

/// An in-memory all-gather across the services of one test.
#[derive(Default)]
struct MemExchange {
    hosts: usize,
    rounds: Mutex<HashMap<u64, Vec<Option<Vec<u8>>>>>,
    cond: Condvar,
}

impl Exchange for MemExchange {
    fn all_gather(&self, node: usize, round: u64, blob: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        let deadline = Instant::now() + WAIT;
        let mut rounds = self.rounds.lock().unwrap();
        rounds
            .entry(round)
            .or_insert_with(|| vec![None; self.hosts])[node] = Some(blob);
        self.cond.notify_all();
        loop {
            if let Some(all) = rounds[&round].iter().cloned().collect::<Option<Vec<_>>>() {
                return Ok(all);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("round {round}: not every host came"));
            }
            rounds = self.cond.wait_timeout(rounds, left).unwrap().0;
        }
    }
}

/// An exchange that never answers within a test (until its own long deadline).
struct StuckExchange;

impl Exchange for StuckExchange {
    fn all_gather(&self, _: usize, _: u64, _: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        std::thread::sleep(WAIT);
        Err("stuck".into())
    }
}

/// A PMI-2 message (left-aligned length, as MPICH's old client writes it).
fn frame(body: &str) -> Vec<u8> {
    format!("{:<6}{body}", body.len()).into_bytes()
}

/// A rank's side of the socket.
struct Client {
    reader: BufReader<UnixStream>,
    env: HashMap<String, String>,
}

impl Client {
    fn of(service: &mut SimpleService, rank: usize) -> Client {
        let access = service.rank_access(rank).unwrap();
        let stream = UnixStream::from(access.inherit.unwrap());
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let env = access
            .env
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect();
        Client {
            reader: BufReader::new(stream),
            env,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).unwrap();
    }

    /// Sends a PMI-1 line and reads the answer line.
    fn v1(&mut self, line: &str) -> String {
        self.send(format!("{line}\n").as_bytes());
        self.line()
    }

    fn line(&mut self) -> String {
        let mut reply = String::new();
        self.reader.read_line(&mut reply).unwrap();
        assert!(reply.ends_with('\n'), "cut reply `{reply}`");
        reply.trim_end().to_string()
    }

    /// Sends a PMI-2 body and reads the answer's body.
    fn v2(&mut self, body: &str) -> String {
        self.send(&frame(body));
        self.v2_reply()
    }

    fn v2_reply(&mut self) -> String {
        let mut len = [0u8; 6];
        self.reader.read_exact(&mut len).unwrap();
        let len: usize = std::str::from_utf8(&len).unwrap().trim().parse().unwrap();
        let mut body = vec![0u8; len];
        self.reader.read_exact(&mut body).unwrap();
        String::from_utf8(body).unwrap()
    }

    /// Whether the service closed the socket (EOF within the wait).
    fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        match self.reader.read_to_end(&mut rest) {
            Ok(_) => true,
            // Closed with our bytes unread: a reset.
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

fn start(
    map: &Arc<JobMap>,
    node: usize,
    ex: Arc<dyn Exchange>,
    t: Duration,
) -> (SimpleService, Arc<Reports>) {
    let reports = Arc::new(Reports::default());
    let s = SimpleService::start(map.clone(), node, ex, reports.reporter(), t).unwrap();
    (s, reports)
}

#[test]
fn environment_names_the_socket_and_the_rank() {
    let map = job(&[&[0, 2], &[1, 3]]);
    let (mut s, _) = start(&map, 1, Arc::new(Alone), WAIT);
    let c = Client::of(&mut s, 3);
    let want = [
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "4"),
        ("PMI_JOBID", "psy-test-1"),
        ("MPI_LOCALNRANKS", "2"),
        ("MPI_LOCALRANKID", "1"),
        ("PMI_HOSTNAME", "h1"),
    ];
    for (k, v) in want {
        assert_eq!(c.env[k], v, "{k}");
    }
    assert_eq!(c.env["PMI_FD"], c.reader.get_ref().as_raw_fd().to_string());
    assert!(s.rank_access(0).unwrap_err().contains("node 0"));
    let mut bad = (*map).clone();
    bad.hosts[0].ranks = vec![0, 3];
    let r: Reporter = Arc::new(|_| {});
    let err = SimpleService::start(Arc::new(bad), 0, Arc::new(Alone), r.clone(), WAIT);
    assert!(err.err().unwrap().to_string().contains("not 0..4"));
    assert!(SimpleService::start(map.clone(), 2, Arc::new(Alone), r, WAIT).is_err());
    assert!(s.rank_access(9).unwrap_err().contains("not in job"));
}

#[test]
fn pmi1_session() {
    let map = job(&[&[0]]);
    let (mut s, reports) = start(&map, 0, Arc::new(Alone), WAIT);
    let mut c = Client::of(&mut s, 0);
    assert_eq!(
        c.v1("cmd=init pmi_version=1 pmi_subversion=1"),
        "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"
    );
    reports.wait_for(&Report::Spoke { rank: 0 });
    assert_eq!(
        c.v1("cmd=get_maxes"),
        "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024"
    );
    assert_eq!(c.v1("cmd=get_appnum"), "cmd=appnum rc=0 appnum=0");
    assert_eq!(
        c.v1("cmd=get_universe_size"),
        "cmd=universe_size rc=0 size=1"
    );
    assert_eq!(
        c.v1("cmd=get_my_kvsname"),
        "cmd=my_kvsname rc=0 kvsname=psy-test-1"
    );
    assert_eq!(
        c.v1("cmd=put kvsname=psy-test-1 key=a value=b=c"),
        "cmd=put_result rc=0"
    );
    assert!(c
        .v1("cmd=put kvsname=x key=PMI_x value=1")
        .contains("rc=-1"));
    assert_eq!(c.v1("cmd=barrier_in"), "cmd=barrier_out rc=0");
    assert_eq!(
        c.v1("cmd=get kvsname=psy-test-1 key=a"),
        "cmd=get_result rc=0 value=b=c"
    );
    assert!(c
        .v1("cmd=get kvsname=psy-test-1 key=zz")
        .starts_with("cmd=get_result rc=-1"));
    assert_eq!(
        c.v1("cmd=get kvsname=psy-test-1 key=PMI_process_mapping"),
        "cmd=get_result rc=0 value=(vector,(0,1,1))"
    );
    let unknown = c.v1("cmd=publish_name service=x port=y");
    assert!(
        unknown.starts_with("cmd=publish_result rc=-1 msg="),
        "{unknown}"
    );
    assert!(c.v1("cmd=frob").starts_with("cmd=frob_result rc=-1"));
    assert!(c.v1("cmd=init pmi_version=3").contains("rc=-1"));
    assert_eq!(c.v1("cmd=finalize"), "cmd=finalize_ack rc=0");
    reports.wait_for(&Report::Finalized { rank: 0 });
    drop(c);
    drop(s);
    assert_eq!(reports.seen.lock().unwrap().len(), 2);
}

#[test]
fn pmi2_session_with_node_attributes() {
    let map = job(&[&[0, 1]]);
    let (mut s, reports) = start(&map, 0, Arc::new(Alone), WAIT);
    let mut c0 = Client::of(&mut s, 0);
    let mut c1 = Client::of(&mut s, 1);
    for (i, c) in [&mut c0, &mut c1].into_iter().enumerate() {
        assert_eq!(
            c.v1("cmd=init pmi_version=2 pmi_subversion=0"),
            "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0"
        );
        let r = c.v2(&format!("cmd=fullinit;pmirank={i};threaded=FALSE;"));
        assert_eq!(
            r,
            format!(
                "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={i};size=2;\
                 appnum=0;debugged=FALSE;pmiverbose=FALSE;"
            )
        );
    }
    assert!(c0.v2("cmd=fullinit;pmirank=1;").contains("rc=-1"));
    assert_eq!(
        c0.v2("cmd=job-getid;thrid=0x1;"),
        "cmd=job-getid-response;rc=0;jobid=psy-test-1;thrid=0x1;"
    );
    assert_eq!(
        c0.v2("cmd=kvs-put;key=k0;value=v;;0;"),
        "cmd=kvs-put-response;rc=0;"
    );
    assert_eq!(
        c1.v2("cmd=kvs-put;key=k1;value=v1;"),
        "cmd=kvs-put-response;rc=0;"
    );
    // Both enter the fence; both are answered.
    c0.send(&frame("cmd=kvs-fence;"));
    assert_eq!(c1.v2("cmd=kvs-fence;"), "cmd=kvs-fence-response;rc=0;");
    assert_eq!(c0.v2_reply(), "cmd=kvs-fence-response;rc=0;");
    assert_eq!(
        c1.v2("cmd=kvs-get;jobid=psy-test-1;srcid=-1;key=k0;"),
        "cmd=kvs-get-response;rc=0;found=TRUE;value=v;;0;"
    );
    assert_eq!(
        c1.v2("cmd=kvs-get;key=none;"),
        "cmd=kvs-get-response;rc=0;found=FALSE;"
    );
    assert_eq!(
        c1.v2("cmd=info-getjobattr;key=PMI_process_mapping;"),
        "cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,2));"
    );
    assert_eq!(
        c1.v2("cmd=info-getjobattr;key=PMI_other;"),
        "cmd=info-getjobattr-response;rc=0;found=FALSE;"
    );
    // Rank 1 waits for a node attribute that rank 0 then puts.
    assert_eq!(
        c1.v2("cmd=info-getnodeattr;key=shm;wait=FALSE;"),
        "cmd=info-getnodeattr-response;rc=0;found=FALSE;"
    );
    c1.send(&frame("cmd=info-getnodeattr;key=shm;wait=TRUE;"));
    assert_eq!(
        c0.v2("cmd=info-putnodeattr;key=shm;value=seg1;"),
        "cmd=info-putnodeattr-response;rc=0;"
    );
    assert_eq!(
        c1.v2_reply(),
        "cmd=info-getnodeattr-response;rc=0;found=TRUE;value=seg1;"
    );
    let r = c0.v2("cmd=name-publish;name=x;port=y;");
    assert!(
        r.starts_with("cmd=name-publish-response;rc=-1;errmsg="),
        "{r}"
    );
    assert_eq!(c0.v2("cmd=finalize;"), "cmd=finalize-response;rc=0;");
    reports.wait_for(&Report::Finalized { rank: 0 });
    c1.send(&frame(
        "cmd=abort;isworldabort=TRUE;msg=MPI_Abort(comm, 5);",
    ));
    reports.wait_for(&Report::Abort {
        rank: 1,
        code: 5,
        message: "MPI_Abort(comm, 5)".into(),
    });
}

#[test]
fn pmi1_abort_reports_code_and_message() {
    let map = job(&[&[0]]);
    let (mut s, reports) = start(&map, 0, Arc::new(Alone), WAIT);
    let mut c = Client::of(&mut s, 0);
    c.send(b"cmd=abort exitcode=7 message=it\\ broke\n");
    reports.wait_for(&Report::Abort {
        rank: 0,
        code: 7,
        message: "it broke".into(),
    });
    drop(c);
    drop(s);
}

#[test]
fn barrier_spans_two_hosts() {
    let map = job(&[&[0, 1], &[2, 3]]);
    let ex = Arc::new(MemExchange {
        hosts: 2,
        ..Default::default()
    });
    let (mut s0, _) = start(&map, 0, ex.clone(), WAIT);
    let (mut s1, _) = start(&map, 1, ex, WAIT);
    let mut clients: Vec<Client> = (0..4)
        .map(|r| Client::of(if r < 2 { &mut s0 } else { &mut s1 }, r))
        .collect();
    for round in 0..2 {
        for (r, c) in clients.iter_mut().enumerate() {
            let put = format!("cmd=put kvsname=j key=k{r}-{round} value=v{r}");
            assert_eq!(c.v1(&put), "cmd=put_result rc=0");
            c.send(b"cmd=barrier_in\n");
        }
        for c in &mut clients {
            assert_eq!(c.line(), "cmd=barrier_out rc=0");
        }
        for c in &mut clients {
            for r in 0..4 {
                let got = c.v1(&format!("cmd=get kvsname=j key=k{r}-{round}"));
                assert_eq!(got, format!("cmd=get_result rc=0 value=v{r}"));
            }
        }
    }
    let got = clients[3].v1("cmd=get kvsname=j key=PMI_process_mapping");
    assert_eq!(got, "cmd=get_result rc=0 value=(vector,(0,2,2))");
}

#[test]
fn garbage_and_oversized_input_close_the_connection() {
    let map = job(&[&[0, 1]]);
    let (mut s, _) = start(&map, 0, Arc::new(Alone), WAIT);
    let mut c0 = Client::of(&mut s, 0);
    c0.send(b"hello world\n");
    assert!(c0.closed());
    let mut c1 = Client::of(&mut s, 1);
    assert_eq!(c1.v1("cmd=get_appnum"), "cmd=appnum rc=0 appnum=0");
    let mut big = b"cmd=put kvsname=j key=a value=".to_vec();
    big.resize(64 * 1024, b'x');
    // The service may close before reading everything: a write error is fine.
    let _ = c1.reader.get_mut().write_all(&big);
    assert!(c1.closed());
    let problems = s.problems();
    assert!(
        problems[0].contains("rank 0") && problems[0].contains("neither"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("rank 1") && problems[1].contains("longer than"),
        "{problems:?}"
    );
}

#[test]
fn a_rank_lost_mid_barrier_fails_it_at_once() {
    let map = job(&[&[0, 1, 2]]);
    let (mut s, _) = start(&map, 0, Arc::new(Alone), WAIT);
    let mut c0 = Client::of(&mut s, 0);
    let c1 = Client::of(&mut s, 1);
    let mut c2 = Client::of(&mut s, 2);
    let begun = Instant::now();
    c0.send(b"cmd=barrier_in\n");
    drop(c1);
    let reply = c0.line();
    assert!(reply.starts_with("cmd=barrier_out rc=-1 msg="), "{reply}");
    assert!(reply.contains("rank_1_lost"), "{reply}");
    assert!(begun.elapsed() < WAIT / 2);
    assert!(c0.closed(), "the service hangs up after the error");
    // Later barriers fail at once too.
    assert!(c2.v1("cmd=barrier_in").contains("rc=-1"));
    assert!(c2.closed());
    assert!(s
        .problems()
        .iter()
        .any(|p| p.contains("rank 1 closed PMI_FD")));
}

#[test]
fn barriers_and_waits_end_at_the_timeout() {
    let t = Duration::from_millis(300);
    let map = job(&[&[0, 1]]);
    let (mut s, _) = start(&map, 0, Arc::new(Alone), t);
    let mut c0 = Client::of(&mut s, 0);
    let mut c1 = Client::of(&mut s, 1);
    let begun = Instant::now();
    let reply = c0.v1("cmd=barrier_in");
    assert!(begun.elapsed() >= t);
    assert!(
        reply.contains("rc=-1") && reply.contains("rank(s)_1"),
        "{reply}"
    );
    assert!(c0.closed());
    c1.v1("cmd=init pmi_version=2 pmi_subversion=0");
    let begun = Instant::now();
    let r = c1.v2("cmd=info-getnodeattr;key=never;wait=TRUE;");
    assert!(begun.elapsed() >= t);
    assert!(r.starts_with("cmd=info-getnodeattr-response;rc=-1;"), "{r}");

    // An exchange that does not finish.
    let map = job(&[&[0], &[1]]);
    let (mut s, _) = start(&map, 0, Arc::new(StuckExchange), t);
    let mut c = Client::of(&mut s, 0);
    let reply = c.v1("cmd=barrier_in");
    assert!(
        reply.contains("rc=-1") && reply.contains("other_hosts"),
        "{reply}"
    );
    drop(c);
    let begun = Instant::now();
    drop(s);
    assert!(begun.elapsed() < WAIT / 2, "drop waited for the exchange");
}

#[test]
fn a_thousand_ranks_on_one_thread() {
    const N: usize = 1000;
    let ranks: Vec<usize> = (0..N).collect();
    let map = job(&[&ranks]);
    let (mut s, reports) = start(&map, 0, Arc::new(Alone), WAIT);
    let mut clients: Vec<Client> = (0..N).map(|r| Client::of(&mut s, r)).collect();
    for (r, c) in clients.iter_mut().enumerate() {
        c.send(format!("cmd=init pmi_version=1 pmi_subversion=1\ncmd=put kvsname=j key=k{r} value=v{r}\ncmd=barrier_in\n").as_bytes());
    }
    for c in &mut clients {
        assert!(c.line().starts_with("cmd=response_to_init rc=0"));
        assert_eq!(c.line(), "cmd=put_result rc=0");
        assert_eq!(c.line(), "cmd=barrier_out rc=0");
    }
    for (r, c) in clients.iter_mut().enumerate() {
        let other = (r + 1) % N;
        let got = c.v1(&format!("cmd=get kvsname=j key=k{other}"));
        assert_eq!(got, format!("cmd=get_result rc=0 value=v{other}"));
    }
    assert_eq!(reports.seen.lock().unwrap().len(), N);
}
