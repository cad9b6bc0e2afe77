//! A raft type config and a key/value [`ReplicatedState`] for the quorum storage's tests, and
//! openraft's own storage suite run over [`LogStore`] and [`StateMachine`].

use super::log_store::LogStore;
use super::state_machine::{ReplicatedState, StateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::Path;
use std::sync::{Arc, Mutex};

openraft::declare_raft_types!(
    /// The tests' raft types: key/value commands answered with the value they replaced.
    pub(crate) TestConfig: D = Set, R = Option<String>, SnapshotData = Cursor<Vec<u8>>
);

/// Sets a key to a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Set {
    pub(crate) key: String,
    pub(crate) value: String,
}

/// A key/value map.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Kv(pub(crate) BTreeMap<String, String>);

impl ReplicatedState for Kv {
    type Command = Set;
    type Response = Option<String>;

    fn apply(&mut self, command: &Set) -> Option<String> {
        self.0.insert(command.key.clone(), command.value.clone())
    }

    fn snapshot(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(&self.0).map_err(|e| e.to_string())
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = serde_json::from_slice(snapshot).map_err(|e| e.to_string())?;
        Ok(())
    }
}

pub(crate) type TestLogStore = LogStore<TestConfig>;
pub(crate) type TestStateMachine = StateMachine<TestConfig, Kv>;

/// Opens the log store and a state machine over a fresh state in `dir`; the state is returned
/// too, as readers see it.
pub(crate) fn open(dir: &Path) -> (TestLogStore, TestStateMachine, Arc<Mutex<Kv>>) {
    let state = Arc::new(Mutex::new(Kv::default()));
    let log = LogStore::open(dir).expect("log store opens");
    let machine = StateMachine::open(dir, Arc::clone(&state)).expect("state machine opens");
    (log, machine, state)
}

/// The log id at `index` of a term led by node 0.
pub(crate) fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

/// An entry setting `key` to `value`.
pub(crate) fn set(term: u64, index: u64, key: &str, value: &str) -> Entry<TestConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Set {
            key: key.to_string(),
            value: value.to_string(),
        }),
    }
}

/// A blank entry (a new leader's first).
pub(crate) fn blank(term: u64, index: u64) -> Entry<TestConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

/// A membership entry with these voters.
pub(crate) fn membership(term: u64, index: u64, voters: &[u64]) -> Entry<TestConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new(
            vec![voters.iter().copied().collect::<BTreeSet<u64>>()],
            (),
        )),
    }
}

/// What a reader sees of entries: index and, for a normal entry, `key=value`.
pub(crate) fn seen(entries: &[Entry<TestConfig>]) -> Vec<(u64, String)> {
    entries
        .iter()
        .map(|e| {
            let what = match &e.payload {
                EntryPayload::Normal(Set { key, value }) => format!("{key}={value}"),
                EntryPayload::Blank => "blank".to_string(),
                EntryPayload::Membership(m) => format!("membership {m}"),
            };
            (e.log_id.index, what)
        })
        .collect()
}

/// The map a state holds.
pub(crate) fn contents(state: &Arc<Mutex<Kv>>) -> BTreeMap<String, String> {
    state.lock().expect("state").0.clone()
}

/// Builds a fresh store in a temporary directory, removed when the suite drops it.
struct FreshStore;

impl StoreBuilder<TestConfig, TestLogStore, TestStateMachine, tempfile::TempDir> for FreshStore {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, TestLogStore, TestStateMachine), openraft::StorageError<u64>>
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, machine, _) = open(dir.path());
        Ok((dir, log, machine))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(FreshStore).expect("the openraft storage suite passes");
}
