//! The work buffer as the step engine sees it: one writable buffer, or the caller's own input
//! and output placed where a schedule's layout puts them, so that no copy is made.
//!
//! A schedule addresses one work buffer ([`crate::schedule::Layout`]). Most collectives need it
//! whole: they reduce into their input, or forward what they receive. But where a rank only sends
//! from its input and only receives into its output (all-to-all, linear scatter and
//! gather, the leaves of a reduce tree, a send), the caller's two slices can stand in for the
//! buffer. Copying them in and out would otherwise cost two more passes over memory: at 64 MiB,
//! more than the transfer itself ([`WorkView::fits`] decides, per call).
//!
//! Where the writable part is the caller's output and its first values are input bytes that a
//! receive reduces into (this rank's chunk of a reduce-scatter), the view can also leave them
//! there ([`WorkView::seeded_from_input`]): each reduction then reads the input's bytes and
//! writes the output's, a piece at a time while the piece is in the cache, instead of a copy of
//! the whole chunk before the call and a second pass over it to reduce.

use crate::copy::copy_slice;
use crate::reduce::Reducer;
use crate::schedule::{RecvMode, Schedule, Span};
use crate::transport::shm::stream_copy;
use std::ops::Range;

/// A schedule's work buffer: `ro` holds its bytes from `ro_at` on (read only), `rw` its bytes
/// from `rw_at` on (read and written). A byte range is served by the writable part if it holds
/// the range whole, else by the read-only part if that does (so where the two overlap, the
/// writable part is the buffer, and a range that overlaps it only partly is served by neither);
/// the bytes in neither part are never touched.
///
/// A *mirror* ([`WorkView::with_mirror`]) holds some of the buffer's bytes (the caller's input to
/// an all-gather) that the writable part does not hold yet: reads that it holds whole come from
/// it, and the writable part gets its bytes as they are sent, while they are in the cache
/// ([`WorkView::sent`]), and the rest at the end ([`WorkView::finish`]), instead of a copy of the
/// whole input before the call. A peer that pulls a send straight out of this process's memory
/// also reads lines that no core has just written, instead of ones dirty in this core's cache (an
/// all-gather of 1 MiB on 2 ranks took 72 µs from a fresh copy, 40 µs from the input, pulls on in
/// both, measured by hand and not kept; `results/shm-pulls` has the session before and after:
/// 75 → 44).
pub(crate) struct WorkView<'a> {
    ro: &'a [u8],
    ro_at: usize,
    rw: &'a mut [u8],
    rw_at: usize,
    mirror: &'a [u8],
    mirror_at: usize,
    /// How many of the mirror's bytes (from its start) the writable part holds.
    mirror_filled: usize,
    /// Whether the writable part's bytes are still the read-only part's at the same places
    /// ([`WorkView::seeded_from_input`]).
    seeded: bool,
}

impl<'a> WorkView<'a> {
    /// The whole buffer, writable.
    pub(crate) fn whole(buf: &'a mut [u8]) -> Self {
        WorkView {
            ro: &[],
            ro_at: 0,
            rw: buf,
            rw_at: 0,
            mirror: &[],
            mirror_at: 0,
            mirror_filled: 0,
            seeded: false,
        }
    }

    /// This view, with the buffer's bytes `at..at + mirror.len()` in `mirror` (not written during
    /// the call) and not yet in the writable part, which must hold them: reads there come from
    /// `mirror`, and the writable part gets them as they are sent, before the run where the
    /// schedule could read or write them otherwise ([`Self::prepare`]), the rest at the end.
    pub(crate) fn with_mirror(self, mirror: &'a [u8], at: usize) -> Self {
        debug_assert!(self.in_rw(&(at..at + mirror.len())));
        WorkView {
            mirror,
            mirror_at: at,
            mirror_filled: 0,
            ..self
        }
    }

    /// Copies the mirror's bytes from `from` (a position in it) up to `to` into the writable
    /// part, if they are not there yet.
    /// Into a buffer large enough to stream ([`stream_copy::streams`]) the mirror is copied
    /// bypassing the cache, as large receives are.
    fn fill_mirror(&mut self, to: usize) {
        let from = self.mirror_filled;
        if to > from {
            let at = self.mirror_at - self.rw_at;
            let streams = stream_copy::streams(self.rw.len());
            let dst = &mut self.rw[at + from..at + to];
            let src = &self.mirror[from..to];
            if streams {
                // SAFETY: `src` and `dst` are slices of equal length; `dst` is an exclusive
                // borrow, so they do not overlap.
                unsafe { stream_copy::copy(src.as_ptr(), dst.as_mut_ptr(), dst.len()) };
            } else {
                copy_slice(&mut dst[..], src);
            }
            self.mirror_filled = to;
        }
    }

    /// The bytes `r` have been sent: where they continue what the writable part holds of the
    /// mirror, it takes them now, while they are in the cache.
    pub(crate) fn sent(&mut self, r: Range<usize>) {
        let filled_to = self.mirror_at + self.mirror_filled;
        if r.start <= filled_to && r.end > filled_to && r.end <= self.mirror_at + self.mirror.len()
        {
            self.fill_mirror(r.end - self.mirror_at);
        }
    }

    /// After the run: the writable part takes what it does not yet hold of the mirror.
    pub(crate) fn finish(&mut self) {
        self.fill_mirror(self.mirror.len());
    }

    /// The buffer's bytes `ro_at..` read from `ro` and its bytes `rw_at..` read from and
    /// written to `rw`.
    pub(crate) fn split(ro: &'a [u8], ro_at: usize, rw: &'a mut [u8], rw_at: usize) -> Self {
        WorkView {
            ro,
            ro_at,
            rw,
            rw_at,
            mirror: &[],
            mirror_at: 0,
            mirror_filled: 0,
            seeded: false,
        }
    }

    /// This split view, with the writable part's bytes not yet copied from the read-only part
    /// (which must hold them): the buffer's values there are the read-only part's until a
    /// reduction ([`Self::reduce`]) writes the reduced ones. A schedule [`Self::fits`] such a
    /// view only if nothing but reducing receives touches the writable part, each byte at most
    /// once; [`Self::prepare`] copies the bytes none of them covers before the run.
    pub(crate) fn seeded_from_input(self) -> Self {
        debug_assert!(
            self.rw_at >= self.ro_at && self.rw_at + self.rw.len() <= self.ro_at + self.ro.len()
        );
        WorkView {
            seeded: !self.rw.is_empty(),
            ..self
        }
    }

    /// The writable buffer, when this view is one whole buffer, and the mirror's bytes it does
    /// not hold yet with where they go in it (empty where there are none): for an engine that
    /// sends them from the mirror and copies them in after
    /// ([`crate::executor::flat::BoardCollective`]), which must copy them in before anything
    /// reads that part of the buffer, and before the call ends.
    pub(crate) fn as_whole_and_mirror(&mut self) -> Option<(&mut [u8], &'a [u8], usize)> {
        if !(self.ro.is_empty() && self.rw_at == 0) {
            return None;
        }
        let mirror: &'a [u8] = self.mirror;
        let (rest, at) = (
            &mirror[self.mirror_filled..],
            self.mirror_at + self.mirror_filled,
        );
        // The caller copies them in.
        self.mirror_filled = mirror.len();
        Some((&mut *self.rw, rest, at - self.rw_at))
    }

    fn in_rw(&self, r: &Range<usize>) -> bool {
        r.start >= self.rw_at && r.end <= self.rw_at + self.rw.len()
    }

    /// In the read-only part and clear of the writable one (whose bytes are the buffer's).
    fn in_ro(&self, r: &Range<usize>) -> bool {
        let clear_of_rw = r.end <= self.rw_at || r.start >= self.rw_at + self.rw.len();
        r.start >= self.ro_at && r.end <= self.ro_at + self.ro.len() && clear_of_rw
    }

    /// Whether the bytes `r` may be read (an empty range always may).
    pub(crate) fn readable(&self, r: &Range<usize>) -> bool {
        r.is_empty() || self.in_rw(r) || self.in_ro(r)
    }

    /// Whether the bytes `r` may be written (an empty range always may).
    pub(crate) fn writable(&self, r: &Range<usize>) -> bool {
        r.is_empty() || self.in_rw(r)
    }

    /// The bytes `r`, which [`Self::readable`] allows.
    pub(crate) fn read(&self, r: Range<usize>) -> &[u8] {
        if r.is_empty() {
            &[]
        } else if r.start >= self.mirror_at && r.end <= self.mirror_at + self.mirror.len() {
            &self.mirror[r.start - self.mirror_at..r.end - self.mirror_at]
        } else if self.in_rw(&r) {
            let unfilled = self.mirror_at + self.mirror_filled..self.mirror_at + self.mirror.len();
            debug_assert!(
                unfilled.is_empty() || r.end <= unfilled.start || r.start >= unfilled.end,
                "a read of {r:?} across the mirror's bytes {unfilled:?} not yet copied: prepare() \
                 copies them first"
            );
            &self.rw[r.start - self.rw_at..r.end - self.rw_at]
        } else {
            &self.ro[r.start - self.ro_at..r.end - self.ro_at]
        }
    }

    /// The bytes `r`, which [`Self::writable`] allows.
    pub(crate) fn write(&mut self, r: Range<usize>) -> &mut [u8] {
        if r.is_empty() {
            &mut []
        } else {
            &mut self.rw[r.start - self.rw_at..r.end - self.rw_at]
        }
    }

    /// `dst = op(dst, src)` on the bytes `r` (writable): where the view is seeded, `dst`'s
    /// value is the read-only part's, read in the same pass ([`Reducer::apply_from`]).
    pub(crate) fn reduce(&mut self, r: Range<usize>, src: &[u8], reducer: Reducer) {
        if !self.seeded || r.is_empty() {
            reducer.apply(self.write(r), src);
            return;
        }
        let (from, to) = (r.start - self.ro_at, r.start - self.rw_at);
        let n = src.len();
        reducer.apply_from(&mut self.rw[to..to + n], &self.ro[from..from + n], src);
    }

    /// Whether every send of `schedule` (elements of `elem_size` bytes) reads only readable
    /// bytes and every receive writes only writable ones; where the view is seeded, also that
    /// only reducing receives touch the writable part, and no byte twice.
    pub(crate) fn fits(&self, schedule: &Schedule, elem_size: usize) -> bool {
        let bytes = |s: &Span| s.start * elem_size..s.end * elem_size;
        let plain = schedule.steps.iter().all(|step| {
            step.sends.iter().all(|s| self.readable(&bytes(&s.span)))
                && step.recvs.iter().all(|r| self.writable(&bytes(&r.span)))
        });
        plain && (!self.seeded || self.only_reduced_once(schedule, elem_size))
    }

    /// The byte ranges of `schedule`'s receives that touch the writable part, clipped to it,
    /// each with whether it reduces.
    fn receives_in_rw<'s>(
        &self,
        schedule: &'s Schedule,
        elem_size: usize,
    ) -> impl Iterator<Item = (Range<usize>, bool)> + Clone + 's {
        let rw = self.rw_at..self.rw_at + self.rw.len();
        schedule
            .steps
            .iter()
            .flat_map(|step| &step.recvs)
            .map(move |r| {
                let bytes =
                    (r.span.start * elem_size).max(rw.start)..(r.span.end * elem_size).min(rw.end);
                (bytes, r.mode == RecvMode::Reduce)
            })
            .filter(|(r, _)| r.start < r.end)
    }

    /// For a seeded view: whether the writable part is only reduced into, each byte at most once
    /// (no send reads it, no receive copies into it, no two receives overlap there).
    fn only_reduced_once(&self, schedule: &Schedule, elem_size: usize) -> bool {
        let rw = self.rw_at..self.rw_at + self.rw.len();
        let sent_from = schedule.steps.iter().flat_map(|step| &step.sends).any(|s| {
            let b = s.span.start * elem_size..s.span.end * elem_size;
            !b.is_empty() && b.start < rw.end && rw.start < b.end
        });
        let recvs = self.receives_in_rw(schedule, elem_size);
        !sent_from
            && recvs.clone().all(|(_, reduces)| reduces)
            && recvs.clone().enumerate().all(|(i, (a, _))| {
                recvs
                    .clone()
                    .skip(i + 1)
                    .all(|(b, _)| a.end <= b.start || b.end <= a.start)
            })
    }

    /// Before running `schedule` (which [`Self::fits`]): copies into the writable part what the
    /// run will not put there on the way. Of a seeded view, the bytes that no receive reduces
    /// into; of a mirror, all of it where a receive writes there or a send reads part of it
    /// with other bytes.
    pub(crate) fn prepare(&mut self, schedule: &Schedule, elem_size: usize) {
        if self.mirror.is_empty() && !self.seeded {
            return;
        }
        if !self.mirror_served_alone(schedule, elem_size) {
            self.finish();
        }
        if self.seeded {
            self.seed_unreduced(schedule, elem_size);
        }
    }

    /// Whether no receive of `schedule` touches the mirror's bytes and every send that reads
    /// any of them reads only them (so from the mirror).
    fn mirror_served_alone(&self, schedule: &Schedule, elem_size: usize) -> bool {
        let m = self.mirror_at..self.mirror_at + self.mirror.len();
        let bytes = |s: &Span| s.start * elem_size..s.end * elem_size;
        let touches = |r: &Range<usize>| !r.is_empty() && r.start < m.end && m.start < r.end;
        schedule.steps.iter().all(|step| {
            step.recvs.iter().all(|r| !touches(&bytes(&r.span)))
                && step.sends.iter().all(|s| {
                    let b = bytes(&s.span);
                    !touches(&b) || (b.start >= m.start && b.end <= m.end)
                })
        })
    }

    /// Copies into the writable part the bytes that no receive of `schedule` reduces into (the
    /// buffer's values there are the read-only part's).
    fn seed_unreduced(&mut self, schedule: &Schedule, elem_size: usize) {
        let end = self.rw_at + self.rw.len();
        let recvs = self.receives_in_rw(schedule, elem_size);
        let mut next = self.rw_at;
        while next < end {
            // The first covered range from `next` on (they are disjoint), or none.
            let covered = recvs
                .clone()
                .map(|(r, _)| r)
                .filter(|r| r.end > next)
                .min_by_key(|r| r.start)
                .unwrap_or(end..end);
            if covered.start > next {
                let (to, from, n) = (next - self.rw_at, next - self.ro_at, covered.start - next);
                copy_slice(&mut self.rw[to..to + n], &self.ro[from..from + n]);
            }
            next = covered.end.max(next);
            if covered.is_empty() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Recv, Send, Step};

    fn step(send: Span, recv: Span) -> Step {
        Step {
            sends: vec![Send {
                peer: 1,
                span: send,
                forward: false,
            }],
            recvs: vec![Recv {
                peer: 1,
                span: recv,
                mode: RecvMode::Copy,
            }],
        }
    }

    #[test]
    fn ranges_map_to_the_part_that_holds_them_whole() {
        let input = [1u8, 2, 3, 4];
        let mut output = [0u8; 4];
        let mut v = WorkView::split(&input, 0, &mut output, 4);
        assert_eq!(v.read(1..3), &[2, 3]);
        assert!(v.readable(&(0..4)) && v.readable(&(4..8)));
        assert!(
            !v.readable(&(3..5)),
            "a range across both parts is served by neither"
        );
        assert!(!v.writable(&(0..1)) && v.writable(&(5..8)));
        assert!(v.writable(&(100..100)), "an empty range touches nothing");
        v.write(6..8).copy_from_slice(&[7, 8]);
        assert_eq!(v.read(4..8), &[0, 0, 7, 8]);
        assert!(v.as_whole_and_mirror().is_none());
        assert_eq!(output, [0, 0, 7, 8]);
    }

    #[test]
    fn a_schedule_fits_only_if_it_sends_from_readable_and_receives_into_writable_bytes() {
        let input = [0u8; 16];
        let mut output = [0u8; 16];
        let v = WorkView::split(&input, 0, &mut output, 16);
        let es = 4;
        let ok = Schedule {
            buf_len: 8,
            steps: vec![step(0..4, 4..8), step(4..6, 6..6)],
        };
        assert!(v.fits(&ok, es));
        let into_input = Schedule {
            buf_len: 8,
            steps: vec![step(0..2, 1..2)],
        };
        assert!(!v.fits(&into_input, es));
        let across = Schedule {
            buf_len: 8,
            steps: vec![step(3..5, 4..5)],
        };
        assert!(!v.fits(&across, es));
    }

    #[test]
    fn where_the_parts_overlap_the_writable_one_is_the_buffer() {
        let input = [1u8, 2, 3, 4];
        let mut mine = [3u8, 4];
        let mut v = WorkView::split(&input, 0, &mut mine, 2);
        v.write(2..4).copy_from_slice(&[30, 40]);
        assert_eq!(v.read(2..4), &[30, 40]);
        assert_eq!(v.read(0..2), &[1, 2]);
        assert!(
            !v.readable(&(1..3)),
            "the input's old bytes 2.. are not the buffer's"
        );
    }

    #[test]
    fn reads_inside_the_mirror_come_from_it_and_writes_still_go_to_the_buffer() {
        let mirror = [7u8, 8];
        let mut buf = [0u8; 5];
        let mut v = WorkView::whole(&mut buf).with_mirror(&mirror, 2);
        assert!(std::ptr::eq(v.read(2..4).as_ptr(), mirror.as_ptr()));
        assert!(std::ptr::eq(v.read(3..4).as_ptr(), mirror[1..].as_ptr()));
        v.write(0..1)[0] = 9;
        assert_eq!(v.read(0..2), &[9, 0]);
        v.finish();
        // Partly outside the mirror: the buffer serves it (once it holds the mirror's bytes).
        assert_eq!(v.read(1..4), &[0, 7, 8]);
        let (whole, rest, _) = v.as_whole_and_mirror().expect("a whole buffer");
        assert_eq!(
            whole,
            [9, 0, 7, 8, 0],
            "the whole buffer holds the mirror's bytes"
        );
        assert!(rest.is_empty(), "nothing left to copy in");
    }

    #[test]
    fn a_whole_buffer_hands_over_the_mirror_bytes_it_does_not_hold_yet() {
        let mirror = [7u8, 8, 9];
        let mut buf = [0u8; 6];
        let mut v = WorkView::whole(&mut buf).with_mirror(&mirror, 2);
        let (whole, rest, at) = v.as_whole_and_mirror().expect("a whole buffer");
        assert_eq!((whole.len(), rest, at), (6, &mirror[..], 2));
        assert_eq!(whole, [0; 6], "not copied in: the caller's to do");
        // Part of it sent (and so copied in) before: only the rest is handed over.
        let mut v = WorkView::whole(&mut buf).with_mirror(&mirror, 2);
        v.sent(2..3);
        let (whole, rest, at) = v.as_whole_and_mirror().expect("a whole buffer");
        assert_eq!((rest, at), (&mirror[1..], 3));
        assert_eq!(whole, [0, 0, 7, 0, 0, 0]);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not yet copied")]
    fn a_read_across_mirror_bytes_not_yet_copied_is_caught() {
        let mirror = [7u8, 8];
        let mut buf = [0u8; 5];
        let v = WorkView::whole(&mut buf).with_mirror(&mirror, 2);
        let _ = v.read(1..4);
    }

    fn recv(peer: usize, span: Span, mode: RecvMode) -> Recv {
        Recv { peer, span, mode }
    }

    #[test]
    fn a_seeded_output_takes_the_input_where_reduced_into_and_where_not() {
        // Elements of 4 bytes (u32 sums); the buffer is 4 elements, the output holds 2..4.
        let input: Vec<u8> = [1u32, 2, 3, 4]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut output = [0u8; 8];
        let mut v = WorkView::split(&input, 0, &mut output, 8).seeded_from_input();
        let schedule = Schedule {
            buf_len: 4,
            steps: vec![Step {
                sends: vec![Send {
                    peer: 1,
                    span: 0..2,
                    forward: false,
                }],
                recvs: vec![recv(1, 3..4, RecvMode::Reduce)],
            }],
        };
        assert!(v.fits(&schedule, 4));
        v.prepare(&schedule, 4);
        let reducer = Reducer::new(crate::dtype::DType::U32, crate::reduce::ReduceOp::Sum).unwrap();
        v.reduce(12..16, &40u32.to_ne_bytes(), reducer);
        let got: Vec<u32> = output
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            got,
            [3, 44],
            "element 2 copied, element 3 reduced from the input's 4"
        );
    }

    #[test]
    fn a_seeded_output_fits_only_schedules_that_reduce_into_it_once() {
        let input = [0u8; 16];
        let mut output = [0u8; 8];
        let v = WorkView::split(&input, 0, &mut output, 8).seeded_from_input();
        let with = |recvs: Vec<Recv>, send: Span| Schedule {
            buf_len: 4,
            steps: vec![Step {
                sends: vec![Send {
                    peer: 1,
                    span: send,
                    forward: false,
                }],
                recvs,
            }],
        };
        let once = with(
            vec![
                recv(1, 2..3, RecvMode::Reduce),
                recv(2, 3..4, RecvMode::Reduce),
            ],
            0..2,
        );
        assert!(v.fits(&once, 4));
        let twice = with(
            vec![
                recv(1, 2..4, RecvMode::Reduce),
                recv(2, 3..4, RecvMode::Reduce),
            ],
            0..2,
        );
        assert!(
            !v.fits(&twice, 4),
            "a byte reduced twice would take the input twice"
        );
        let copied = with(vec![recv(1, 2..4, RecvMode::Copy)], 0..2);
        assert!(!v.fits(&copied, 4), "a copy into the output is not seeded");
        let sent = with(vec![recv(1, 2..4, RecvMode::Reduce)], 1..3);
        assert!(
            !v.fits(&sent, 4),
            "a send from the output would read unseeded bytes"
        );
    }

    #[test]
    fn a_whole_buffer_is_all_writable() {
        let mut buf = [0u8; 8];
        let mut v = WorkView::whole(&mut buf);
        assert!(v.writable(&(0..8)) && !v.writable(&(0..9)));
        assert_eq!(v.as_whole_and_mirror().map(|(b, _, _)| b.len()), Some(8));
    }
}
