//! Flow control between the two ends of an RDMA link, as counters. The receiver tells the sender,
//! by RDMA-writing two monotonic counters into the sender's memory, how many ring bytes it has
//! consumed and how many receive work requests it has posted again; the sender never writes past
//! what the receiver freed nor sends more than it has receives posted. No message is needed to
//! return credit, so credit can never wait for credit.

/// The receiver's side: what it has freed and what it has told the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Credit {
    /// Ring bytes consumed.
    pub consumed: u64,
    /// Receive work requests posted again after their first posting.
    pub reposted: u64,
    /// `consumed` when last reported.
    pub reported_consumed: u64,
    /// `reposted` when last reported.
    pub reported_reposted: u64,
}

impl Credit {
    /// Whether to report now: a quarter of the ring or of the receives freed since the last
    /// report. Below that the sender still has three quarters to go on, so waiting is safe: a
    /// sender can only run out while the receiver holds three quarters unread.
    pub fn due(&self, ring: usize, depth: usize) -> bool {
        self.consumed - self.reported_consumed >= (ring / 4).max(1) as u64
            || self.reposted - self.reported_reposted >= (depth / 4).max(1) as u64
    }

    /// Whether anything freed is unreported.
    #[allow(dead_code)] // the verbs API this mirrors; no caller needs it yet (no RDMA hardware here)
    pub fn unreported(&self) -> bool {
        self.consumed != self.reported_consumed || self.reposted != self.reported_reposted
    }

    /// Marks the current counters reported and returns them (what to write to the sender).
    pub fn report(&mut self) -> [u64; 2] {
        self.reported_consumed = self.consumed;
        self.reported_reposted = self.reposted;
        [self.consumed, self.reposted]
    }
}

/// Receive work requests the sender may still consume: `depth` posted at first, plus those the
/// peer reported posted again, minus those used.
pub fn receives_left(depth: usize, used: u64, reposted: u64) -> usize {
    let posted = depth as u64 + reposted;
    usize::try_from(posted.saturating_sub(used)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_come_at_a_quarter() {
        let mut c = Credit {
            consumed: 255,
            ..Credit::default()
        };
        assert!(!c.due(1024, 64));
        c.consumed = 256;
        assert!(c.due(1024, 64));
        assert_eq!(c.report(), [256, 0]);
        assert!(!c.due(1024, 64) && !c.unreported());
        c.reposted = 16;
        assert!(c.due(1024, 64));
    }

    #[test]
    fn receives_are_counted_from_depth() {
        assert_eq!(receives_left(64, 0, 0), 64);
        assert_eq!(receives_left(64, 64, 0), 0);
        assert_eq!(receives_left(64, 70, 10), 4);
        assert_eq!(receives_left(64, 200, 0), 0);
    }
}
