//! Proof that a connection belongs to the job: a challenge-response over the per-job secret,
//! made before any other byte of the connection is read.
//!
//! The acceptor sends a magic and a fresh nonce; the connector answers with its own nonce, a
//! 64-bit claim (its rank, or [`STORE_CLIENT`]) and HMAC-SHA256(secret, "c" | both nonces | claim);
//! the acceptor checks it and answers with HMAC(secret, "s" | both nonces | claim), which the
//! connector checks. The secret itself never crosses the wire. An acceptor that finds the
//! connector's MAC wrong answers [`REFUSED`] instead, so the connector fails at once with "wrong
//! secret" instead of dialling again: a connection that ends without an answer was pushed out
//! by a busy acceptor ([`crate::handshakes`]), and [`connect_retrying`] dials again.

use crate::error::{Error, ErrorKind, Result};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 8] = b"PSYNE\x00\x00\x01";
const NONCE: usize = 16;
const MAC: usize = 32;
/// What an acceptor answers a connector whose MAC is wrong, in place of its own proof (no MAC
/// is this text, but for a chance of one in 2^256).
const REFUSED: &[u8; MAC] = b"PSYNE: refused, wrong job secret";
/// The claim a store client makes (ranks claim their rank).
pub const STORE_CLIENT: u64 = u64::MAX;

/// A job secret: random bytes shared by every rank of a job.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// 32 fresh random bytes from the operating system.
    pub fn generate() -> Result<Secret> {
        let mut bytes = vec![0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("reading random bytes for the job secret: {e}"),
            )
        })?;
        Ok(Secret(bytes))
    }

    /// Parses the hex form (as in `PSY_JOB_SECRET`).
    pub fn from_hex(text: &str) -> Result<Secret> {
        let text = text.trim();
        let bad =
            || Error::config("PSY_JOB_SECRET is not an even-length hex string; let psyrun set it");
        if text.is_empty() || text.len() % 2 != 0 {
            return Err(bad());
        }
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(text.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
            .collect::<Result<Vec<u8>>>()
            .map(Secret)
    }

    /// A secret derived from public text: for launchers that provide no secret (obscurity only).
    pub fn derive(text: &str) -> Secret {
        Secret(Sha256::digest(text.as_bytes()).to_vec())
    }

    /// The hex form.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(&self, tag: u8, server_nonce: &[u8], client_nonce: &[u8], claim: u64) -> [u8; MAC] {
        // HMAC accepts keys of any length, so new_from_slice cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(&[tag]);
        mac.update(server_nonce);
        mac.update(client_nonce);
        mac.update(&claim.to_le_bytes());
        mac.finalize().into_bytes().into()
    }
}

fn nonce() -> Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n)
        .map_err(|e| Error::new(ErrorKind::Io, format!("reading a random nonce: {e}")))?;
    Ok(n)
}

/// Runs `f` with the stream's read and write timeouts set to what is left until `deadline`
/// (restoring the read timeout afterwards).
pub(crate) fn with_deadline<T>(
    stream: &mut TcpStream,
    deadline: Instant,
    f: impl FnOnce(&mut TcpStream) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let before = stream.read_timeout()?;
    stream.set_read_timeout(Some(left))?;
    stream.set_write_timeout(Some(left))?;
    let out = f(stream);
    stream.set_read_timeout(before)?;
    stream.set_write_timeout(None)?;
    out
}

/// Constant-time comparison of two MACs.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Bytes of the connector's reply to the challenge: its nonce, its claim and its MAC.
pub(crate) const REPLY: usize = NONCE + 8 + MAC;

/// The acceptor's first move: sends the magic and a fresh nonce, which it returns (the
/// connector's [`REPLY`] must answer it; [`verify`] checks that).
pub(crate) fn challenge(stream: &mut TcpStream) -> std::io::Result<[u8; NONCE]> {
    let server_nonce = nonce().map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut hello = [0u8; 8 + NONCE];
    hello[..8].copy_from_slice(MAGIC);
    hello[8..].copy_from_slice(&server_nonce);
    stream.write_all(&hello)?;
    Ok(server_nonce)
}

/// The acceptor's second move: checks the connector's `reply` to `server_nonce` and, if it
/// proves the secret, sends the acceptor's own proof; returns the connector's claim.
pub(crate) fn verify(
    stream: &mut TcpStream,
    secret: &Secret,
    server_nonce: &[u8; NONCE],
    reply: &[u8; REPLY],
) -> Result<u64> {
    let client_nonce = &reply[..NONCE];
    let claim = u64::from_le_bytes(reply[NONCE..NONCE + 8].try_into().unwrap_or([0; 8]));
    let want = secret.mac(b'c', server_nonce, client_nonce, claim);
    if !same(&want, &reply[NONCE + 8..]) {
        // Best effort: the connector learns why instead of dialling again.
        let _ = stream.write_all(REFUSED);
        return Err(Error::new(ErrorKind::Auth, "the peer does not know this job's secret (wrong PSY_JOB_SECRET, or not part of this job)"));
    }
    let proof = secret.mac(b's', server_nonce, client_nonce, claim);
    stream.write_all(&proof).map_err(|e| {
        Error::new(
            ErrorKind::Auth,
            format!("handshake did not complete: {}", described(&e)),
        )
    })?;
    Ok(claim)
}

/// An I/O error of a handshake, with a read timeout called what it is.
pub(crate) fn described(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "timed out waiting for the other end".into()
        }
        _ => e.to_string(),
    }
}

/// The acceptor's side, blocking until `deadline`: returns the peer's claim once it has proven
/// the secret. (Listeners run many at once instead: [`crate::handshakes`].)
#[cfg(test)]
pub fn accept(stream: &mut TcpStream, secret: &Secret, deadline: Instant) -> Result<u64> {
    let auth_err = |e: std::io::Error| {
        Error::new(
            ErrorKind::Auth,
            format!("handshake did not complete: {}", described(&e)),
        )
    };
    let server_nonce = challenge(stream).map_err(auth_err)?;
    let reply = with_deadline(stream, deadline, |s| {
        let mut reply = [0u8; REPLY];
        s.read_exact(&mut reply)?;
        Ok(reply)
    })
    .map_err(auth_err)?;
    verify(stream, secret, &server_nonce, &reply)
}

/// The connector's side, once: proves the secret with `claim`, and checks the acceptor knows it
/// too. (Connectors dial with [`connect_retrying`].)
#[cfg(test)]
pub fn connect(
    stream: &mut TcpStream,
    secret: &Secret,
    claim: u64,
    deadline: Instant,
) -> Result<()> {
    handshake(stream, secret, claim, deadline).map_err(Failure::into_error)
}

/// Dials with `dial` and proves the secret with `claim`, dialling again (with backoff, until
/// `deadline`) while the acceptor ends the connection without an answer: a busy acceptor
/// pushes out its oldest silent handshakes ([`crate::handshakes`]), and on a loaded machine a
/// genuine connector can be among them. A refusal (wrong secret), a stranger's answer (bad
/// magic), or `dial`'s own error end it at once.
pub fn connect_retrying(
    mut dial: impl FnMut() -> Result<TcpStream>,
    secret: &Secret,
    claim: u64,
    deadline: Instant,
) -> Result<TcpStream> {
    let mut pause = Duration::from_millis(2);
    loop {
        let mut stream = dial()?;
        match handshake(&mut stream, secret, claim, deadline) {
            Ok(()) => return Ok(stream),
            Err(Failure::Dropped(e)) if Instant::now() + pause < deadline => {
                drop((stream, e));
                std::thread::sleep(jittered(pause));
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            Err(f) => return Err(f.into_error()),
        }
    }
}

/// `pause` stretched by up to half again at random, so that connectors pushed out together do
/// not all dial again at the same instant.
fn jittered(pause: Duration) -> Duration {
    let mut b = [0u8; 1];
    let spread = getrandom::fill(&mut b).map_or(0, |()| u32::from(b[0]));
    pause + pause * spread / 512
}

/// How a handshake failed.
enum Failure {
    /// The acceptor ended the connection (or never answered) without refusing it: worth
    /// dialling again.
    Dropped(String),
    /// Final: a refusal, a bad proof, or a stranger at the other end.
    Final(Error),
}

impl Failure {
    fn into_error(self) -> Error {
        match self {
            Failure::Dropped(why) => Error::new(
                ErrorKind::Auth,
                format!("handshake failed: {why} (no answer from the acceptor: it is overloaded, or it is not this job's)"),
            ),
            Failure::Final(e) => e,
        }
    }
}

/// One handshake on a connected stream.
fn handshake(
    stream: &mut TcpStream,
    secret: &Secret,
    claim: u64,
    deadline: Instant,
) -> std::result::Result<(), Failure> {
    let fail = |what: String| Failure::Final(Error::new(ErrorKind::Auth, what));
    let client_nonce = nonce().map_err(Failure::Final)?;
    let server_nonce = with_deadline(stream, deadline, |s| {
        let mut hello = [0u8; 8 + NONCE];
        s.read_exact(&mut hello)?;
        Ok(hello)
    })
    .map_err(|e| Failure::Dropped(described(&e)))?;
    if &server_nonce[..8] != MAGIC {
        return Err(fail(
            "the other end is not a psyne endpoint of this version (bad magic)".into(),
        ));
    }
    let server_nonce = &server_nonce[8..];
    let mut reply = Vec::with_capacity(NONCE + 8 + MAC);
    reply.extend_from_slice(&client_nonce);
    reply.extend_from_slice(&claim.to_le_bytes());
    reply.extend_from_slice(&secret.mac(b'c', server_nonce, &client_nonce, claim));
    let proof = with_deadline(stream, deadline, |s| {
        s.write_all(&reply)?;
        let mut proof = [0u8; MAC];
        s.read_exact(&mut proof)?;
        Ok(proof)
    })
    .map_err(|e| Failure::Dropped(described(&e)))?;
    if &proof == REFUSED {
        return Err(fail(
            "the acceptor refused this connection: this process does not know the job's secret (wrong PSY_JOB_SECRET, or not part of this job)".into(),
        ));
    }
    if !same(
        &proof,
        &secret.mac(b's', server_nonce, &client_nonce, claim),
    ) {
        return Err(fail("the acceptor does not know this job's secret".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(server: Secret, client: Secret) -> (Result<u64>, Result<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let t = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            connect(&mut s, &client, 7, deadline)
        });
        let (mut s, _) = l.accept().unwrap();
        let a = accept(&mut s, &server, deadline);
        drop(s);
        (a, t.join().unwrap())
    }

    #[test]
    fn same_secret_is_accepted_with_its_claim() {
        let s = Secret::generate().unwrap();
        let (a, c) = pair(s.clone(), s);
        assert_eq!(a.unwrap(), 7);
        c.unwrap();
    }

    #[test]
    fn wrong_secret_is_rejected_on_both_sides() {
        let (a, c) = pair(Secret::generate().unwrap(), Secret::generate().unwrap());
        assert_eq!(a.unwrap_err().kind(), ErrorKind::Auth);
        assert_eq!(c.unwrap_err().kind(), ErrorKind::Auth);
    }

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let s = Secret::generate().unwrap();
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap(), s);
        assert!(Secret::from_hex("abc").is_err());
        assert!(Secret::from_hex("zz").is_err());
    }

    #[test]
    fn a_connector_pushed_out_without_an_answer_dials_again_and_a_refused_one_does_not() {
        let secret = Secret::generate().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server_secret = secret.clone();
        // The first connection gets a challenge and is then dropped unanswered (as a busy
        // acceptor pushes out a handshake); the second is answered.
        let acceptor = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            let (mut first, _) = l.accept().unwrap();
            challenge(&mut first).unwrap();
            drop(first);
            let (mut second, _) = l.accept().unwrap();
            let claim = accept(&mut second, &server_secret, deadline);
            // Then one with the wrong secret, refused.
            let (mut third, _) = l.accept().unwrap();
            (claim, accept(&mut third, &server_secret, deadline))
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let dial = || TcpStream::connect(addr).map_err(|e| Error::io("dialling", e));
        connect_retrying(dial, &secret, 9, deadline).expect("the second dial gets through");
        let wrong = Secret::generate().unwrap();
        let started = Instant::now();
        let e = connect_retrying(dial, &wrong, 9, deadline).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Auth);
        assert!(e.to_string().contains("refused this connection"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a refusal is final"
        );
        let (claim, refused) = acceptor.join().unwrap();
        assert_eq!(claim.unwrap(), 9);
        assert_eq!(refused.unwrap_err().kind(), ErrorKind::Auth);
    }
}
