//! One call, one outcome: how a rank that gives up waiting in a call on shared memory withdraws
//! the late peer's part, so that no rank completes a call another rank failed.
//!
//! The node board ([`super::board`]) and the shared buffers' arrival lines ([`super::arrival`])
//! each have one word per rank and call that says whether the rank has joined the call: a slot's
//! `state`, an arrival line's `state`. The owner joins call `k` with a compare-and-swap of that word
//! from what it held before to `k`; a peer that gives up waiting for the owner in call `k` (its
//! deadline passed, or it found the owner dead or in another call) withdraws the owner's part
//! with a compare-and-swap of the same word, from what it held before to a *withdrawal* of `k`
//! (this module's [`Withdrawal`]: a flag, the withdrawing rank, the kind of its error and `k`).
//!
//! Both operations are compare-and-swaps on the same word from the same old value, so exactly
//! one of them succeeds, whatever the timing, on any number of cores:
//!
//! - the owner's wins: the word says `k` for good (only the owner ever changes it again, at a
//!   later call), so the peer's compare-and-swap fails, it sees `k`, forgets its error and goes
//!   on as if the owner had been on time;
//! - the peer's wins: the word says "withdrawn from `k`" for good, so the owner's
//!   compare-and-swap fails and its call fails (naming the rank that withdrew it), and every
//!   other rank waiting for the owner sees the withdrawal and fails too.
//!
//! A rank completes call `k` only once it has seen every rank's word say `k`; a rank fails in a
//! wait only after it withdrew the part it waited for, or found it withdrawn. Since a word that
//! says `k` is never withdrawn and a withdrawn word never says `k`, no rank can complete a call
//! that another failed in a wait, and a late rank cannot complete a call its peer gave up: the
//! call has one outcome on every rank. (Disagreements that every rank reads from the same words,
//! a mismatch of descriptions, fail every rank alike without a withdrawal.)
//!
//! The cost on the fast path is one compare-and-swap by the owner, on a line that readers do not
//! poll (on the node board it replaced the locked store of the futex word, a full barrier too);
//! readers only read.

/// The top bit of a joined-call word: set in a withdrawal, never in a call number.
const FLAG: u64 = 1 << 63;
/// Bits of the call number a withdrawal keeps (the words compared are always within a few calls
/// of each other, so the low bits identify the call).
const CALL_BITS: u32 = 40;
const CALL_MASK: u64 = (1 << CALL_BITS) - 1;

/// A withdrawal of one rank's part of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Withdrawal {
    /// The rank that withdrew it (the one that gave up waiting).
    pub by: usize,
    /// The executor's code of the kind of error with which that rank gave up.
    pub code: u8,
}

impl Withdrawal {
    /// The word saying that call `k` was withdrawn (a rank beyond 2^16 − 1 is stored as 65535,
    /// a code beyond 127 as 127).
    pub fn encode(self, k: u64) -> u64 {
        let by = self.by.min(0xffff) as u64;
        let code = u64::from(self.code.min(0x7f));
        FLAG | code << 56 | by << CALL_BITS | (k & CALL_MASK)
    }

    /// The withdrawal of call `k` that `word` records, if it records one.
    pub fn decode(word: u64, k: u64) -> Option<Withdrawal> {
        (word & FLAG != 0 && word & CALL_MASK == k & CALL_MASK).then_some(Withdrawal {
            by: ((word >> CALL_BITS) & 0xffff) as usize,
            code: ((word >> 56) & 0x7f) as u8,
        })
    }

    /// Whether `word` is a withdrawal (of any call).
    pub fn is_withdrawal(word: u64) -> bool {
        word & FLAG != 0
    }
}

/// How an attempt to withdraw a part ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdraw {
    /// This rank withdrew it: no rank can complete the call now.
    Withdrew,
    /// Another rank had withdrawn it already.
    Already(Withdrawal),
    /// The owner had joined the call first: it can complete, and the withdrawing rank goes on.
    Joined,
}

#[cfg(test)]
mod tests {
    use super::Withdrawal;

    #[test]
    fn a_withdrawal_names_its_call_rank_and_kind_and_is_never_a_call_number() {
        for k in [1u64, 2, 1 << 39, (1 << 40) + 3, u64::MAX >> 1] {
            for (by, code) in [(0, 0), (1, 4), (1007, 127), (70_000, 200)] {
                let w = Withdrawal { by, code };
                let word = w.encode(k);
                assert!(Withdrawal::is_withdrawal(word));
                let back = Withdrawal::decode(word, k).expect("a withdrawal of k");
                assert_eq!(back.by, by.min(0xffff));
                assert_eq!(back.code, code.min(0x7f));
                assert_eq!(Withdrawal::decode(word, k + 1), None, "another call");
                assert_eq!(Withdrawal::decode(k, k), None, "a call number");
            }
        }
    }
}
