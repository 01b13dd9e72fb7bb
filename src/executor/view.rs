//! The work buffer as the step engine sees it: one writable buffer, or the caller's own input
//! and output placed where a schedule's layout puts them, so that no copy is made.
//!
//! A schedule addresses one work buffer ([`crate::schedule::Layout`]). Most collectives need it
//! whole: they reduce into their input, or forward what they receive. But where a rank only sends
//! from its input and only receives into its output (all-to-all, linear scatter and
//! gather, the leaves of a reduce tree, a send), the caller's two slices can stand in for the
//! buffer. Copying them in and out would otherwise cost two more passes over memory: at 64 MiB,
//! more than the transfer itself ([`WorkView::fits`] decides, per call).

use crate::schedule::{Schedule, Span};
use std::ops::Range;

/// A schedule's work buffer: `ro` holds its bytes from `ro_at` on (read only), `rw` its bytes
/// from `rw_at` on (read and written). A byte range is served by the writable part if it holds
/// the range whole, else by the read-only part if that does (so where the two overlap, the
/// writable part is the buffer, and a range that overlaps it only partly is served by neither);
/// the bytes in neither part are never touched.
///
/// A *mirror* ([`WorkView::with_mirror`]) is a read-only copy of some of the buffer's bytes that
/// reads take instead when it holds the range whole: the caller's input, which it has also copied
/// into the buffer. A peer that pulls a send straight out of this process's memory then reads
/// lines that no core has just written, instead of ones dirty in this core's cache (an all-gather
/// of 1 MiB on 2 ranks took 72 µs from the fresh copy, 40 µs from the input, pulls on in both,
/// measured by hand and not kept; `results/shm-pulls` has the session before and after: 75 → 44).
pub(crate) struct WorkView<'a> {
    ro: &'a [u8],
    ro_at: usize,
    rw: &'a mut [u8],
    rw_at: usize,
    mirror: &'a [u8],
    mirror_at: usize,
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
        }
    }

    /// This view, with reads of bytes `at..at + mirror.len()` served from `mirror`, which holds
    /// the same bytes as the buffer there and is not written during the call.
    pub(crate) fn with_mirror(self, mirror: &'a [u8], at: usize) -> Self {
        WorkView {
            mirror,
            mirror_at: at,
            ..self
        }
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
        }
    }

    /// The writable buffer, when this view is one whole buffer.
    pub(crate) fn as_whole(&mut self) -> Option<&mut [u8]> {
        (self.ro.is_empty() && self.rw_at == 0).then_some(&mut *self.rw)
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

    /// Whether every send of `schedule` (elements of `elem_size` bytes) reads only readable
    /// bytes and every receive writes only writable ones.
    pub(crate) fn fits(&self, schedule: &Schedule, elem_size: usize) -> bool {
        let bytes = |s: &Span| s.start * elem_size..s.end * elem_size;
        schedule.steps.iter().all(|step| {
            step.sends.iter().all(|s| self.readable(&bytes(&s.span)))
                && step.recvs.iter().all(|r| self.writable(&bytes(&r.span)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Recv, RecvMode, Send, Step};

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
        assert!(v.as_whole().is_none());
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
        let mut buf = [0u8, 0, 7, 8, 0];
        let mut v = WorkView::whole(&mut buf).with_mirror(&mirror, 2);
        assert!(std::ptr::eq(v.read(2..4).as_ptr(), mirror.as_ptr()));
        assert!(std::ptr::eq(v.read(3..4).as_ptr(), mirror[1..].as_ptr()));
        // Partly outside the mirror: the buffer serves it.
        assert_eq!(v.read(1..4), &[0, 7, 8]);
        v.write(0..1)[0] = 9;
        assert_eq!(v.read(0..2), &[9, 0]);
        assert!(
            v.as_whole().is_some(),
            "a mirror does not change what the buffer is"
        );
    }

    #[test]
    fn a_whole_buffer_is_all_writable() {
        let mut buf = [0u8; 8];
        let mut v = WorkView::whole(&mut buf);
        assert!(v.writable(&(0..8)) && !v.writable(&(0..9)));
        assert_eq!(v.as_whole().map(|b| b.len()), Some(8));
    }
}
