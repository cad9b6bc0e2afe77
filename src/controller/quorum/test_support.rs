//! A raft type config and a key/value [`ReplicatedState`] for the quorum storage's tests, and
//! openraft's own storage suite run over [`LogStore`] and [`StateMachine`].

use super::log_store::LogStore;
use super::state_machine::{ReplicatedState, StateMachine};
use openraft::testing::{StoreBuilder, Suite};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
