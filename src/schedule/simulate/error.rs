//! What a simulated run reports when a schedule breaks the model or the arguments do not fit.

use crate::schedule::Span;

/// Why a simulated run failed: a broken schedule, or arguments that do not fit it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The schedule could not be built (an algorithm that does not implement the collective, a
    /// root out of range).
    #[error("cannot build the schedule: {0}")]
    Build(crate::Error),
    /// A world of no ranks.
    #[error("a world needs at least one rank; got no buffers")]
    EmptyWorld,
    /// The number of buffers or inputs is not the world size.
    #[error("expected {expected} buffers (one per rank), got {got}")]
    WorldSize {
        /// The world size.
        expected: usize,
        /// How many were passed.
        got: usize,
    },
    /// A rank's buffer or input has the wrong length.
    #[error("rank {rank}: expected a buffer of {expected} elements, got {got}")]
    BufferLen {
        /// The rank.
        rank: usize,
        /// The length its schedule or layout requires.
        expected: usize,
        /// The length passed.
        got: usize,
    },
    /// A rank sends to or receives from itself.
    #[error("rank {rank}, step {step}: message to or from itself (local copies are the caller's)")]
    SelfMessage {
        /// The rank.
        rank: usize,
        /// The step index.
        step: usize,
    },
    /// A message names a rank outside the world.
    #[error("rank {rank}, step {step}: peer {peer} is outside a world of {size}")]
    PeerOutOfRange {
        /// The rank.
        rank: usize,
        /// The step index.
        step: usize,
        /// The bad peer.
        peer: usize,
        /// The world size.
        size: usize,
    },
    /// A span reaches past the end of the work buffer.
    #[error("rank {rank}, step {step}: span {span:?} is outside the buffer of {buf_len} elements")]
    SpanOutOfBounds {
        /// The rank.
        rank: usize,
        /// The step index.
        step: usize,
        /// The offending span.
        span: Span,
        /// The work-buffer length.
        buf_len: usize,
    },
    /// Two receives of one step write overlapping spans.
    #[error("rank {rank}, step {step}: receive spans {first:?} and {second:?} overlap")]
    OverlappingRecvs {
        /// The rank.
        rank: usize,
        /// The step index.
        step: usize,
        /// One receive span.
        first: Span,
        /// The other.
        second: Span,
    },
    /// A `Copy` receive overwrites what a plain send of the same step is sending.
    #[error("rank {rank}, step {step}: Copy receive {recv:?} overlaps plain send {send:?}")]
    CopyOverlapsSend {
        /// The rank.
        rank: usize,
        /// The step index.
        step: usize,
        /// The receive span.
        recv: Span,
        /// The send span.
        send: Span,
    },
    /// A forward send's span is not covered by its step's `Copy` receives.
    #[error("rank {rank}, step {step}: forward send {span:?} is not covered by Copy receives")]
    ForwardNotCovered {
        /// The rank.
        rank: usize,
        /// The step index.
        step: usize,
        /// The send span.
        span: Span,
    },
    /// The number of messages from one rank to another differs between the two schedules.
    #[error("rank {from} sends {sends} messages to rank {to}, which receives {recvs} from it")]
    Unmatched {
        /// The sending rank.
        from: usize,
        /// The receiving rank.
        to: usize,
        /// Messages `from` sends to `to`.
        sends: usize,
        /// Messages `to` receives from `from`.
        recvs: usize,
    },
    /// A send and the receive it matches have different lengths.
    #[error(
        "message #{index} from rank {from} to rank {to}: send {send:?} and receive {recv:?} \
         differ in length"
    )]
    LengthMismatch {
        /// The sending rank.
        from: usize,
        /// The receiving rank.
        to: usize,
        /// Which message of the pair (0-based).
        index: usize,
        /// The send span.
        send: Span,
        /// The receive span.
        recv: Span,
    },
    /// No rank can progress but not all have finished.
    #[error("deadlock: {report}")]
    Deadlock {
        /// Where each unfinished rank is stuck.
        report: String,
    },
}
