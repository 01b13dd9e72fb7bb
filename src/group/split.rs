//! [`crate::Group::split`]: subgroups formed through the parent's store, with their own links.

use super::core::Core;
use super::{Group, GroupOptions};
use crate::bootstrap::Store;
use crate::error::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What a group keeps to form subgroups: the store it was formed through and its options.
pub(crate) struct Splitter {
    store: Arc<dyn Store>,
    template: GroupOptions,
    /// Splits so far: every rank splits in the same order, so the same number names the same
    /// split everywhere.
    count: AtomicU64,
    /// Agreements and shrink attempts so far ([`super::ft`]), counted the same way.
    rounds: AtomicU64,
    /// The ranks this group's agreements decided failed so far, sorted: failed for good, so
    /// later agreements never wait for them (every survivor adopts the same decisions in the
    /// same order, so every survivor holds the same set).
    failed: Mutex<Vec<usize>>,
    /// The subgroups split from the group, as long as they live: revoking the group revokes
    /// them ([`Splitter::revoke_subgroups`]).
    subgroups: Mutex<Vec<Subgroup>>,
}

/// A subgroup split from a group, held weakly (dropping it is the program's business).
struct Subgroup {
    core: Weak<Core>,
    splitter: Weak<Splitter>,
}

/// For each rank: its position in its subgroup and the subgroup's size, from every rank's
/// `(color, key)` (a negative color joins no subgroup). Ordered by key, then by rank.
pub(crate) fn placement(pairs: &[(i64, i64)], rank: usize) -> Option<(usize, usize)> {
    let (color, _) = *pairs.get(rank)?;
    if color < 0 {
        return None;
    }
    let mut members: Vec<(i64, usize)> = pairs
        .iter()
        .enumerate()
        .filter(|(_, p)| p.0 == color)
        .map(|(r, p)| (p.1, r))
        .collect();
    members.sort_unstable();
    let at = members.iter().position(|m| m.1 == rank)?;
    Some((at, members.len()))
}

impl Splitter {
    pub(crate) fn new(store: Arc<dyn Store>, template: GroupOptions) -> Splitter {
        Splitter {
            store,
            template,
            count: AtomicU64::new(0),
            rounds: AtomicU64::new(0),
            failed: Mutex::default(),
            subgroups: Mutex::default(),
        }
    }

    /// Revokes every live subgroup split from the group, and theirs in turn (see
    /// [`Group::revoke`]).
    pub(crate) fn revoke_subgroups(&self) {
        let subgroups =
            std::mem::take(&mut *self.subgroups.lock().unwrap_or_else(|p| p.into_inner()));
        for sub in subgroups {
            if let Some(core) = sub.core.upgrade() {
                let _ = core.revoke();
            }
            if let Some(splitter) = sub.splitter.upgrade() {
                splitter.revoke_subgroups();
            }
        }
    }

    /// The options the group was formed with.
    pub(crate) fn template(&self) -> &GroupOptions {
        &self.template
    }

    /// The store the group was formed through.
    pub(crate) fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// The same, shared.
    pub(crate) fn store_arc(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// The number of this rank's next agreement or shrink attempt.
    pub(crate) fn next_round(&self) -> u64 {
        self.rounds.fetch_add(1, Ordering::SeqCst)
    }

    /// The ranks earlier agreements decided failed, sorted.
    pub(crate) fn failed(&self) -> Vec<usize> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Adds the ranks an agreement decided failed.
    pub(crate) fn add_failed(&self, ranks: &[usize]) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed.extend_from_slice(ranks);
        failed.sort_unstable();
        failed.dedup();
    }

    /// Forms this rank's subgroup given every rank's `(color, key)`.
    pub(crate) fn form(&self, rank: usize, pairs: &[(i64, i64)]) -> Result<Option<Group>> {
        let n = self.count.fetch_add(1, Ordering::SeqCst);
        let Some((sub_rank, sub_size)) = placement(pairs, rank) else {
            return Ok(None);
        };
        let color = pairs[rank].0;
        let options = GroupOptions {
            rank: sub_rank,
            size: sub_size,
            prefix: format!("{}/split{n}/{color}", self.template.prefix),
            ..self.template.clone()
        };
        let sub = Group::builder(options)
            .shared_store(self.store.clone())
            .build()
            .map_err(|e| e.context(format!("forming subgroup {color} of split {n}")))?;
        let mut subgroups = self.subgroups.lock().unwrap_or_else(|p| p.into_inner());
        subgroups.retain(|s| s.core.strong_count() > 0);
        subgroups.push(Subgroup {
            core: Arc::downgrade(&sub.core),
            splitter: sub.splitter.as_ref().map_or_else(Weak::new, Arc::downgrade),
        });
        Ok(Some(sub))
    }
}

#[cfg(test)]
mod tests {
    use super::placement;

    #[test]
    fn members_are_ordered_by_key_then_rank_and_negative_colors_join_nothing() {
        let pairs = [(0, 5), (1, 0), (0, 5), (0, -1), (-1, 0), (1, 3)];
        assert_eq!(placement(&pairs, 3), Some((0, 3)));
        assert_eq!(placement(&pairs, 0), Some((1, 3)));
        assert_eq!(placement(&pairs, 2), Some((2, 3)));
        assert_eq!(placement(&pairs, 1), Some((0, 2)));
        assert_eq!(placement(&pairs, 5), Some((1, 2)));
        assert_eq!(placement(&pairs, 4), None);
        assert_eq!(placement(&pairs, 9), None);
    }
}
