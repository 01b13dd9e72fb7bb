//! Giving up a group's links after a failure, so that the other ranks learn of it quickly.

use super::header;
use super::Links;
use crate::error::Error;
use crate::transport::send_and_close;
use std::time::{Duration, Instant};

/// Tells every peer that this rank failed with `err` (where the outgoing stream is at a message
/// boundary, i.e. not marked in [`Links::mid_message`]), closes the sending side of every link, and then reads and
/// discards whatever peers still send (for at most `drain`) in a background thread, so that a peer
/// blocked writing to this rank finishes its write and reaches the abort notice or end of stream.
pub fn abort_links(links: &mut Links, err: &Error, drain: Duration) {
    let reason = err.message().as_bytes();
    let notice = [
        &header::encode_abort(err.kind(), reason.len() as u64)[..],
        reason,
    ]
    .concat();
    // Links the accept thread connected meanwhile hear it too, and so do later ones.
    let _ = links.adopt_arrived();
    if let Some(connector) = &links.connector {
        connector.give_up(notice.clone());
    }
    let give_up = Instant::now() + Duration::from_millis(500);
    for (peer, link) in links.links.iter_mut().enumerate() {
        let Some(link) = link else { continue };
        if links.mid_message.get(peer).copied().unwrap_or(false) {
            link.close_write();
            continue;
        }
        send_and_close(&mut **link, &notice, give_up);
    }
    let mut taken: Vec<_> = links.links.iter_mut().filter_map(Option::take).collect();
    let _ = std::thread::Builder::new()
        .name("psyne-drain".into())
        .spawn(move || {
            let until = Instant::now() + drain;
            let mut sink = vec![0u8; 64 << 10];
            while !taken.is_empty() && Instant::now() < until {
                let mut fds: Vec<libc::pollfd> = taken
                    .iter()
                    .filter_map(|l| l.poll_fd())
                    .map(|fd| libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                let fdless = taken.iter().any(|l| l.poll_fd().is_none());
                // SAFETY: `fds` is a valid, exclusively borrowed vector of pollfd for the whole call.
                unsafe {
                    libc::poll(
                        fds.as_mut_ptr(),
                        fds.len() as libc::nfds_t,
                        if fdless { 5 } else { 200 },
                    );
                }
                taken.retain_mut(|l| loop {
                    match l.read_some(&mut sink) {
                        Ok(0) => break false,
                        Ok(_) => continue,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                        Err(_) => break false,
                    }
                });
            }
        });
}
