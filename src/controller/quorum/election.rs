//! Elections with a pre-vote (Raft's §9.6, KRaft's KIP-996): a voter raises its term only after
//! a majority of the voters said they would vote for it, so a voter that was cut off (a wrong
//! secret, a partition, a long pause) comes back without deposing a healthy active controller
//! (docs/cluster.md, "Elections").
//!
//! openraft 0.9 has no pre-vote: its own election timer is off (`enable_elect: false`) and
//! [`stand_for_election`] runs it instead, calling openraft's election once the pre-vote is won.
//!
//! Contracts:
//! - [`Contact`] is when this node last heard an active controller: an AppendEntries or a
//!   snapshot chunk openraft accepted, a vote it granted, or being the active controller itself.
//! - A voter stands once it heard no active controller for [`STAND_AFTER`] plus up to
//!   [`JITTER`] (drawn anew after each try, so voters rarely stand together); a node grants a
//!   pre-vote only when it is not the active controller, heard none for [`LEASE`] (openraft's
//!   leader lease, during which it would refuse the real vote anyway) and the candidate has
//!   applied the metadata at least as far as it has (a lagging voter's term would only depose
//!   a leader it cannot replace). The pre-vote changes nothing durable on either side: only the
//!   real election that follows does.
//! - The round ends as soon as a majority granted (a frozen voter accepts connections and never
//!   answers: waiting for it let another voter win meanwhile), and the voter stands only if it
//!   still heard no active controller since the round began.
//! - Learners (broker-only nodes) never stand.
//!
//! [`grants`] and [`won`] are pure; the loop passes them the time.

use super::auth::QuorumSecret;
use super::messages::{QuorumRequest, QuorumResponse};
use super::network::Peer;
use super::types::MetadataRaft;
use openraft::{LogId, Raft};
use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// openraft's leader lease (its longest election timeout): a node that heard the active
/// controller within it refuses a vote.
pub(super) const LEASE: Duration = Duration::from_millis(1_200);
/// The silence after which a voter stands, before its jitter: past every other voter's lease.
const STAND_AFTER: Duration = Duration::from_millis(1_800);
/// The most random delay added to [`STAND_AFTER`].
const JITTER: Duration = Duration::from_millis(600);
/// How long a pre-vote waits for each answer.
const ASK_WITHIN: Duration = Duration::from_millis(300);
/// How often the loop looks.
const TICK: Duration = Duration::from_millis(50);

/// When this node last heard an active controller (see the module doc).
#[derive(Debug, Clone)]
pub(super) struct Contact(Arc<Mutex<Instant>>);

impl Contact {
    pub(super) fn new(now: Instant) -> Contact {
        Contact(Arc::new(Mutex::new(now)))
    }

    pub(super) fn heard(&self, now: Instant) {
        let mut at = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *at = (*at).max(now);
    }

    fn at(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn since(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.at())
    }
}

/// Whether a node grants a pre-vote: it is not the active controller, heard none for
/// [`LEASE`], and the candidate is not behind it (`candidate_behind`).
pub(super) fn grants(is_leader: bool, since_contact: Duration, candidate_behind: bool) -> bool {
    !is_leader && since_contact >= LEASE && !candidate_behind
}

/// Whether `granted` pre-votes (this node's own included) are a majority of `voters`.
fn won(granted: usize, voters: usize) -> bool {
    2 * granted > voters
}

/// How long a voter waits in silence before it stands (the random part is the only one).
fn draw_patience() -> Duration {
    STAND_AFTER + Duration::from_millis(rand::thread_rng().gen_range(0..=JITTER.as_millis() as u64))
}

/// This node's answer to a pre-vote.
pub(super) fn answer(
    raft: &Raft<MetadataRaft>,
    contact: &Contact,
    candidate_applied: Option<LogId<u64>>,
) -> bool {
    let (is_leader, applied) = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        (
            metrics.current_leader == Some(metrics.id),
            metrics.last_applied,
        )
    };
    grants(
        is_leader,
        contact.since(Instant::now()),
        candidate_applied < applied,
    )
}

/// Stands for election when this voter heard no active controller for a while and a majority
/// of the voters would vote for it (see the module doc). Runs until the quorum stops.
pub(super) async fn stand_for_election(
    raft: Raft<MetadataRaft>,
    contact: Contact,
    node_id: u64,
    secret: Option<QuorumSecret>,
) {
    let mut patience = draw_patience();
    let mut tick = tokio::time::interval(TICK);
    loop {
        tick.tick().await;
        let (is_leader, voters, applied) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            let membership = metrics.membership_config.membership();
            let voters: Vec<(u64, String)> = membership
                .voter_ids()
                .filter_map(|id| Some((id, membership.get_node(&id)?.addr.clone())))
                .collect();
            (
                metrics.current_leader == Some(node_id),
                voters,
                metrics.last_applied,
            )
        };
        let now = Instant::now();
        if is_leader {
            contact.heard(now);
            continue;
        }
        if !voters.iter().any(|(id, _)| *id == node_id) || contact.since(now) < patience {
            continue;
        }
        let mut asks = tokio::task::JoinSet::new();
        for (_, address) in voters.iter().filter(|(id, _)| *id != node_id) {
            let mut peer = Peer::new(address, secret.clone());
            asks.spawn(async move {
                let ask = QuorumRequest::PreVote {
                    candidate: node_id,
                    last_applied: applied,
                };
                matches!(
                    peer.call(&ask, ASK_WITHIN).await,
                    Ok(QuorumResponse::PreVote { granted: true })
                )
            });
        }
        let heard_before = contact.at();
        let mut granted = 1;
        while !won(granted, voters.len())
            && let Some(answer) = asks.join_next().await
        {
            granted += usize::from(answer.unwrap_or(false));
        }
        asks.abort_all();
        if contact.at() > heard_before {
            tracing::debug!("an active controller was heard during the pre-vote: not standing");
        } else if won(granted, voters.len()) {
            tracing::info!(
                granted,
                voters = voters.len(),
                "no active controller heard: pre-vote won, standing for election"
            );
            if let Err(e) = raft.trigger().elect().await {
                tracing::warn!(error = %e, "standing for election");
            }
        } else {
            tracing::debug!(
                granted,
                voters = voters.len(),
                "pre-vote lost: an active controller is alive elsewhere"
            );
        }
        // Wait a whole new patience before the next try, whatever this one gave.
        contact.heard(Instant::now());
        patience = draw_patience();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_that_hears_a_controller_refuses_the_pre_vote() {
        assert!(!grants(false, LEASE - Duration::from_millis(1), false));
        assert!(grants(false, LEASE, false));
        assert!(!grants(true, Duration::from_secs(60), false));
    }

    #[test]
    fn a_candidate_behind_is_refused_the_pre_vote() {
        assert!(!grants(false, LEASE, true));
    }

    #[test]
    fn a_pre_vote_is_won_by_a_strict_majority() {
        assert!(won(1, 1));
        assert!(!won(1, 2));
        assert!(won(2, 3));
        assert!(!won(1, 3));
        assert!(!won(2, 4));
    }
}
