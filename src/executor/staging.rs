//! A group's own shared buffers, for all-reduces of ordinary (private) buffers that take the
//! shared-memory pass of [`super::shared`]: canonical order's large all-reduces, where one pass
//! that folds every rank's chunk in rank order straight out of shared memory costs less than an
//! all-to-all and an all-gather through the transports (`results/reduce-order/`).
//!
//! Each rank copies its buffer into its staging segment, the shared all-reduce runs on the
//! segments, and each rank copies the result out of its own. The segments are made the first
//! time a call needs them, by every rank together ([`super::shared::allocate`]), grown (made
//! anew) when a call needs more, and kept until the group is dropped; their names are unlinked
//! as soon as every rank has mapped them, so nothing is left in `/dev/shm` even if the process
//! is killed.
//!
//! Every rank takes the same decisions in the same order: whether to stage depends on the
//! call's size (equal on every rank of an all-reduce), on whether the group may share memory
//! (settled when it formed) and on what earlier calls allocated (the same on every rank).

use super::shared::{self, Mapped, SharedScope};
use crate::dtype::Element;
use crate::error::Result;
use crate::transport::shm::segment::Segment;
use std::sync::Mutex;

/// The most bytes per rank a group stages: above it, the call goes through the transports
/// (every rank's segment counts against `/dev/shm`, a tmpfs of half the memory or less).
pub const STAGED_MAX_BYTES: usize = 256 << 20;

/// The staging buffers of a group, as far as this rank knows them.
#[derive(Default)]
pub(crate) struct Staging {
    state: Mutex<State>,
}

#[derive(Default)]
enum State {
    /// None yet.
    #[default]
    Absent,
    /// Some rank could not make or map buffers for a call of `bytes`: calls of that many or more
    /// do not try again (every rank saw the same failure, so every rank skips them).
    Refused { bytes: usize },
    /// Every rank's segment, by rank, with room for `bytes` per rank; `epoch` is the last
    /// arrival's.
    Ready {
        segments: Vec<Segment>,
        bytes: usize,
        epoch: u32,
    },
}

impl Staging {
    /// Whether a call of `bytes` per rank may be staged: the group may share memory, the call
    /// is at most [`STAGED_MAX_BYTES`], and no rank failed to make buffers for one this large.
    pub(crate) fn may_take(&self, scope: &SharedScope, bytes: usize) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let refused = matches!(*state, State::Refused { bytes: r } if bytes >= r);
        scope.allowed && bytes <= STAGED_MAX_BYTES && !refused
    }

    /// Runs `f` on staging buffers of `len` elements of `T` per rank, made (or grown) first if
    /// needed; `Ok(None)` where the group cannot share memory, the call is larger than
    /// [`STAGED_MAX_BYTES`], or some rank could not make its segment (every rank then gets
    /// `None`). `sync` is a collective every rank calls with a flag and that returns whether
    /// every rank's was true; allocating calls it.
    pub(crate) fn with_buffers<T: Element, R>(
        &self,
        scope: &SharedScope,
        rank: usize,
        size: usize,
        len: usize,
        sync: impl FnMut(bool) -> Result<bool>,
        f: impl FnOnce(&mut Mapped<T>) -> Result<R>,
    ) -> Result<Option<R>> {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        if !self.may_take(scope, bytes) {
            return Ok(None);
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let room = match &*state {
            State::Ready { bytes: room, .. } => *room,
            _ => 0,
        };
        if room < bytes {
            // Drop the old buffers first: the new ones replace them.
            *state = State::Absent;
            let want = bytes.next_power_of_two().min(STAGED_MAX_BYTES);
            *state = match shared::allocate::<u8>(scope, rank, size, want, sync)? {
                Some(segments) => State::Ready {
                    segments,
                    bytes: want,
                    epoch: 0,
                },
                None => State::Refused { bytes },
            };
        }
        let State::Ready {
            segments, epoch, ..
        } = &mut *state
        else {
            return Ok(None);
        };
        let mut mapped = match Mapped::over(rank, len, std::mem::take(segments), *epoch) {
            Ok(mapped) => mapped,
            Err(back) => {
                // Cannot happen (the room was checked above); go through the transports.
                *segments = back;
                return Ok(None);
            }
        };
        let out = f(&mut mapped);
        (*segments, *epoch) = mapped.into_parts();
        out.map(Some)
    }
}
