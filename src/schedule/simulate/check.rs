//! The static checks: each step against the rules of the model, and every message paired with
//! one of equal length.

use super::SimError;
use crate::schedule::{RecvMode, Schedule, Span, Step};

/// Checks one rank's schedule against the per-step rules of the model: peers in `0..size` and
/// not `rank`, spans inside `buf_len`, receive spans pairwise disjoint, `Copy` receives clear of
/// plain sends, forward sends covered by `Copy` receives.
pub fn check(rank: usize, size: usize, schedule: &Schedule) -> Result<(), SimError> {
    for (index, step) in schedule.steps.iter().enumerate() {
        check_step(rank, size, schedule.buf_len, index, step)?;
    }
    Ok(())
}

fn check_step(
    rank: usize,
    size: usize,
    buf_len: usize,
    index: usize,
    step: &Step,
) -> Result<(), SimError> {
    let messages = step
        .sends
        .iter()
        .map(|s| (s.peer, &s.span))
        .chain(step.recvs.iter().map(|r| (r.peer, &r.span)));
    for (peer, span) in messages {
        if peer == rank {
            return Err(SimError::SelfMessage { rank, step: index });
        }
        if peer >= size {
            return Err(SimError::PeerOutOfRange {
                rank,
                step: index,
                peer,
                size,
            });
        }
        if span.start > span.end || span.end > buf_len {
            return Err(SimError::SpanOutOfBounds {
                rank,
                step: index,
                span: span.clone(),
                buf_len,
            });
        }
    }
    for (i, a) in step.recvs.iter().enumerate() {
        for b in &step.recvs[i + 1..] {
            if overlaps(&a.span, &b.span) {
                return Err(SimError::OverlappingRecvs {
                    rank,
                    step: index,
                    first: a.span.clone(),
                    second: b.span.clone(),
                });
            }
        }
    }
    let copies: Vec<&Span> = step
        .recvs
        .iter()
        .filter(|r| r.mode == RecvMode::Copy)
        .map(|r| &r.span)
        .collect();
    for send in &step.sends {
        if send.forward {
            if !covered(&send.span, &copies) {
                return Err(SimError::ForwardNotCovered {
                    rank,
                    step: index,
                    span: send.span.clone(),
                });
            }
        } else if let Some(recv) = copies.iter().find(|c| overlaps(c, &send.span)) {
            return Err(SimError::CopyOverlapsSend {
                rank,
                step: index,
                recv: (*recv).clone(),
                send: send.span.clone(),
            });
        }
    }
    Ok(())
}

/// True when the spans share an element (empty spans share none).
pub(super) fn overlaps(a: &Span, b: &Span) -> bool {
    a.start < b.end && b.start < a.end
}

/// True when the disjoint `copies` cover `span`; an empty span needs at least one copy.
fn covered(span: &Span, copies: &[&Span]) -> bool {
    if span.is_empty() {
        return !copies.is_empty();
    }
    let mut sorted: Vec<&Span> = copies.iter().copied().filter(|c| !c.is_empty()).collect();
    sorted.sort_by_key(|c| c.start);
    let mut at = span.start;
    for c in sorted {
        if c.start <= at && at < c.end {
            at = c.end;
        }
    }
    at >= span.end
}

/// Where a message sits in a schedule.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pos {
    pub(super) step: usize,
    pub(super) index: usize,
}

/// The messages from one rank to another, paired in order.
#[derive(Debug, Default)]
pub(super) struct Channel {
    pub(super) sends: Vec<Pos>,
    pub(super) recvs: Vec<Pos>,
    pub(super) next: usize,
}

/// Pairs every rank's sends with their receives and checks counts and lengths.
pub(super) fn channels(schedules: &[Schedule]) -> Result<Vec<Channel>, SimError> {
    let size = schedules.len();
    let mut channels: Vec<Channel> = (0..size * size).map(|_| Channel::default()).collect();
    for (rank, schedule) in schedules.iter().enumerate() {
        for (step, s) in schedule.steps.iter().enumerate() {
            for (index, send) in s.sends.iter().enumerate() {
                channels[rank * size + send.peer]
                    .sends
                    .push(Pos { step, index });
            }
            for (index, recv) in s.recvs.iter().enumerate() {
                channels[recv.peer * size + rank]
                    .recvs
                    .push(Pos { step, index });
            }
        }
    }
    for (i, ch) in channels.iter().enumerate() {
        let (from, to) = (i / size, i % size);
        if ch.sends.len() != ch.recvs.len() {
            return Err(SimError::Unmatched {
                from,
                to,
                sends: ch.sends.len(),
                recvs: ch.recvs.len(),
            });
        }
        for (index, (s, r)) in ch.sends.iter().zip(&ch.recvs).enumerate() {
            let send = &schedules[from].steps[s.step].sends[s.index].span;
            let recv = &schedules[to].steps[r.step].recvs[r.index].span;
            if send.len() != recv.len() {
                return Err(SimError::LengthMismatch {
                    from,
                    to,
                    index,
                    send: send.clone(),
                    recv: recv.clone(),
                });
            }
        }
    }
    Ok(channels)
}
