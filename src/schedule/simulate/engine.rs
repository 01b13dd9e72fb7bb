//! The rendezvous run of checked schedules.

use super::check::{channels, check, overlaps};
use super::SimError;
use crate::dtype::Element;
use crate::reduce::ReduceOp;
use crate::schedule::{RecvMode, Schedule};
use std::fmt::Write as _;

/// One rank's progress through its schedule.
struct Rank<'a, T> {
    schedule: &'a Schedule,
    buf: Vec<T>,
    /// The current step (`steps.len()` when finished).
    step: usize,
    sent: Vec<bool>,
    received: Vec<bool>,
    /// Start-of-step values of plain sends that a `Reduce` receive of the step overlaps.
    saved: Vec<Option<Vec<T>>>,
}

impl<T: Element> Rank<'_, T> {
    fn finished(&self) -> bool {
        self.step >= self.schedule.steps.len()
    }

    /// Enters `self.step`, resetting its bookkeeping.
    fn enter(&mut self) {
        let Some(step) = self.schedule.steps.get(self.step) else {
            return;
        };
        self.sent = vec![false; step.sends.len()];
        self.received = vec![false; step.recvs.len()];
        self.saved = step
            .sends
            .iter()
            .map(|s| {
                let reduced = step
                    .recvs
                    .iter()
                    .any(|r| r.mode == RecvMode::Reduce && overlaps(&r.span, &s.span));
                (!s.forward && reduced).then(|| self.buf[s.span.clone()].to_vec())
            })
            .collect();
    }

    /// Moves past every completed step; true if it moved.
    fn advance(&mut self) -> bool {
        let mut moved = false;
        while !self.finished() && self.sent.iter().chain(&self.received).all(|&d| d) {
            self.step += 1;
            self.enter();
            moved = true;
        }
        moved
    }

    /// The values send `index` of the current step carries, if it can go now.
    fn outgoing(&self, index: usize) -> Option<Vec<T>> {
        let step = &self.schedule.steps[self.step];
        let send = &step.sends[index];
        if send.forward {
            let waiting = step.recvs.iter().zip(&self.received).any(|(r, &done)| {
                r.mode == RecvMode::Copy
                    && !done
                    && (send.span.is_empty() || overlaps(&r.span, &send.span))
            });
            if waiting {
                return None;
            }
        }
        Some(match &self.saved[index] {
            Some(values) => values.clone(),
            None => self.buf[send.span.clone()].to_vec(),
        })
    }

    /// Applies receive `index` of the current step.
    fn incoming(&mut self, index: usize, values: &[T], op: ReduceOp) {
        let recv = &self.schedule.steps[self.step].recvs[index];
        let dst = &mut self.buf[recv.span.clone()];
        match recv.mode {
            RecvMode::Copy => dst.copy_from_slice(values),
            RecvMode::Reduce => {
                for (d, v) in dst.iter_mut().zip(values) {
                    *d = T::combine(op, *d, *v);
                }
            }
        }
        self.received[index] = true;
    }
}

/// Runs hand-made or built `schedules` (rank `r` runs `schedules[r]`) on `buffers` with
/// rendezvous semantics, after checking them (see [`check`]), and returns the buffers afterwards.
pub fn run_schedules<T: Element>(
    schedules: &[Schedule],
    op: ReduceOp,
    buffers: Vec<Vec<T>>,
) -> Result<Vec<Vec<T>>, SimError> {
    let size = schedules.len();
    if size == 0 {
        return Err(SimError::EmptyWorld);
    }
    if buffers.len() != size {
        return Err(SimError::WorldSize {
            expected: size,
            got: buffers.len(),
        });
    }
    for (rank, (schedule, buf)) in schedules.iter().zip(&buffers).enumerate() {
        if buf.len() != schedule.buf_len {
            return Err(SimError::BufferLen {
                rank,
                expected: schedule.buf_len,
                got: buf.len(),
            });
        }
        check(rank, size, schedule)?;
    }
    let mut channels = channels(schedules)?;
    let mut ranks: Vec<Rank<T>> = schedules
        .iter()
        .zip(buffers)
        .map(|(schedule, buf)| Rank {
            schedule,
            buf,
            step: 0,
            sent: Vec::new(),
            received: Vec::new(),
            saved: Vec::new(),
        })
        .collect();
    for rank in &mut ranks {
        rank.enter();
    }
    loop {
        let mut progressed = false;
        for rank in &mut ranks {
            progressed |= rank.advance();
        }
        if ranks.iter().all(Rank::finished) {
            break;
        }
        for (i, ch) in channels.iter_mut().enumerate() {
            let (from, to) = (i / size, i % size);
            while let (Some(s), Some(r)) = (ch.sends.get(ch.next), ch.recvs.get(ch.next)) {
                if ranks[from].step != s.step || ranks[to].step != r.step {
                    break;
                }
                let Some(values) = ranks[from].outgoing(s.index) else {
                    break;
                };
                ranks[from].sent[s.index] = true;
                ranks[to].incoming(r.index, &values, op);
                ch.next += 1;
                progressed = true;
            }
        }
        if !progressed {
            return Err(SimError::Deadlock {
                report: stuck_report(&ranks),
            });
        }
    }
    Ok(ranks.into_iter().map(|r| r.buf).collect())
}

/// Says where each unfinished rank is stuck and on what.
fn stuck_report<T>(ranks: &[Rank<'_, T>]) -> String {
    let mut report = String::new();
    let stuck = ranks
        .iter()
        .enumerate()
        .filter(|(_, r)| r.step < r.schedule.steps.len());
    for (shown, (rank, r)) in stuck.enumerate() {
        if shown == 8 {
            report.push_str("; ...");
            break;
        }
        let step = &r.schedule.steps[r.step];
        let _ = write!(
            report,
            "{}rank {rank} in step {} of {} waits on",
            if shown == 0 { "" } else { "; " },
            r.step,
            r.schedule.steps.len()
        );
        let pending_sends = step.sends.iter().zip(&r.sent).filter(|(_, &d)| !d);
        for (s, _) in pending_sends {
            let _ = write!(
                report,
                " send {:?} to {} (in step {})",
                s.span, s.peer, ranks[s.peer].step
            );
        }
        let pending_recvs = step.recvs.iter().zip(&r.received).filter(|(_, &d)| !d);
        for (rv, _) in pending_recvs {
            let _ = write!(
                report,
                " recv {:?} from {} (in step {})",
                rv.span, rv.peer, ranks[rv.peer].step
            );
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::simulate::simulate;
    use crate::schedule::{Algo, Collective, Recv, Send, Span, Step};

    fn sched(buf_len: usize, steps: Vec<Step>) -> Schedule {
        Schedule { buf_len, steps }
    }

    fn send(peer: usize, span: Span) -> Send {
        Send {
            peer,
            span,
            forward: false,
        }
    }

    fn recv(peer: usize, span: Span, mode: RecvMode) -> Recv {
        Recv { peer, span, mode }
    }

    #[test]
    fn exchange_with_reduce_uses_start_of_step_values() {
        let step = |peer| Step {
            sends: vec![send(peer, 0..2)],
            recvs: vec![recv(peer, 0..2, RecvMode::Reduce)],
        };
        let out = run_schedules(
            &[sched(2, vec![step(1)]), sched(2, vec![step(0)])],
            ReduceOp::Sum,
            vec![vec![1i64, 2], vec![10, 20]],
        )
        .unwrap();
        assert_eq!(out, vec![vec![11, 22], vec![11, 22]]);
    }

    #[test]
    fn forward_passes_on_what_arrives() {
        let out = simulate(
            Collective::Broadcast { root: 1 },
            Algo::Pipeline,
            4,
            3,
            ReduceOp::Sum,
            vec![vec![0i32; 3], vec![7, 8, 9], vec![0; 3], vec![0; 3]],
        )
        .unwrap();
        assert!(out.iter().all(|b| b == &[7, 8, 9]));
    }

    #[test]
    fn crossing_orders_deadlock() {
        // Both ranks receive first, then send: fine with buffering, a deadlock at rendezvous.
        let s = |peer| {
            sched(
                1,
                vec![
                    Step {
                        sends: vec![],
                        recvs: vec![recv(peer, 0..1, RecvMode::Copy)],
                    },
                    Step {
                        sends: vec![send(peer, 0..1)],
                        recvs: vec![],
                    },
                ],
            )
        };
        let err = run_schedules(&[s(1), s(0)], ReduceOp::Sum, vec![vec![1u8], vec![2]]);
        let err = err.unwrap_err();
        assert!(matches!(err, SimError::Deadlock { .. }), "{err}");
        assert!(err.to_string().contains("rank 0 in step 0"), "{err}");
    }

    #[test]
    fn errors_name_the_problem() {
        let e = SimError::LengthMismatch {
            from: 1,
            to: 2,
            index: 0,
            send: 0..3,
            recv: 0..2,
        };
        assert!(e.to_string().contains("differ in length"));
    }
}
