//! The quorum's state machine: applies committed entries to a [`ReplicatedState`] shared with
//! its readers, and keeps its snapshot durable in `<dir>/snapshot`.
//!
//! Contract:
//! - [`RaftStateMachine::apply`] answers one response per entry, in order: a normal entry gets
//!   what the state answers for its command, a blank or membership entry the default response.
//!   It tracks the last applied log id and the last membership. Applying does not touch the disk:
//!   what was applied after the last snapshot is rebuilt at start by openraft, which re-applies
//!   the log up to the committed log id the log store saved.
//! - A snapshot is the state's bytes plus its [`SnapshotMeta`] (last applied log id, last
//!   membership, snapshot id). Building one or installing one received from the leader writes
//!   it durably (see [`super::atomic_file`]) before returning; `get_current_snapshot` reads it
//!   back. A snapshot built while a newer one was installed is returned but not stored, so the
//!   stored snapshot never goes back.
//! - [`StateMachine::open`] restores the state from the stored snapshot, so a restart replays
//!   only the log after it.
//!
//! File `<dir>/snapshot` (inside the checksummed file of [`super::atomic_file`]):
//! `u32 length of the meta | meta as JSON | the state's snapshot bytes`.

use super::atomic_file;
use crate::storage::StorageError as KmirrorStorageError;
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, RaftTypeConfig,
    Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the quorum replicates: a deterministic state changed only by applying commands in
/// log order, serialisable as a snapshot.
pub(crate) trait ReplicatedState: Send + Sync + 'static {
    /// A change, the data of a normal raft entry.
    type Command;
    /// What applying a command answers; the default for blank and membership entries.
    type Response: Default;
    /// Applies one committed command. Deterministic: every node answers and ends the same.
    fn apply(&mut self, command: &Self::Command) -> Self::Response;
    /// The whole state as bytes [`ReplicatedState::restore`] reads back.
    fn snapshot(&self) -> Result<Vec<u8>, String>;
    /// Replaces the whole state with a snapshot's; on error the state is left as it was.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;
}

/// The snapshot's metadata for a type config.
type Meta<C> = SnapshotMeta<<C as RaftTypeConfig>::NodeId, <C as RaftTypeConfig>::Node>;

/// A stored snapshot: its meta and the state's bytes.
type Stored<C> = (Meta<C>, Vec<u8>);

/// The state machine of one node (see the module docs).
pub(crate) struct StateMachine<C: RaftTypeConfig, S> {
    state: Arc<Mutex<S>>,
    last_applied: Option<LogId<C::NodeId>>,
    last_membership: StoredMembership<C::NodeId, C::Node>,
    stored: StoredSnapshot<C>,
    /// Snapshots built by this process, for their ids.
    built: u64,
}

/// The `snapshot` file and the meta of the snapshot it holds. Its lock serialises writing the
/// file between snapshot building (openraft runs it in a task of its own) and installing.
struct StoredSnapshot<C: RaftTypeConfig> {
    path: PathBuf,
    meta: Arc<Mutex<Option<Meta<C>>>>,
}

impl<C: RaftTypeConfig> Clone for StoredSnapshot<C> {
    fn clone(&self) -> Self {
        StoredSnapshot {
            path: self.path.clone(),
            meta: Arc::clone(&self.meta),
        }
    }
}

/// A snapshot of the state taken when openraft asked for a builder, stored when built.
pub(crate) struct SnapshotBuilder<C: RaftTypeConfig> {
    meta: Meta<C>,
    data: Result<Vec<u8>, String>,
    stored: StoredSnapshot<C>,
}

impl<C, S> StateMachine<C, S>
where
    C: RaftTypeConfig<Entry = Entry<C>, SnapshotData = Cursor<Vec<u8>>>,
    S: ReplicatedState<Command = C::D, Response = C::R>,
{
    /// Opens the state machine in `dir` over `state`, which readers share: restores the state
    /// from `<dir>/snapshot` if one was stored, and starts applying after it.
    pub(crate) fn open(
        dir: &Path,
        state: Arc<Mutex<S>>,
    ) -> Result<StateMachine<C, S>, KmirrorStorageError> {
        std::fs::create_dir_all(dir).map_err(crate::storage::error::io("create directory", dir))?;
        let path = dir.join("snapshot");
        let mut machine = StateMachine {
            state,
            last_applied: None,
            last_membership: StoredMembership::default(),
            stored: StoredSnapshot {
                path: path.clone(),
                meta: Arc::new(Mutex::new(None)),
            },
            built: 0,
        };
        if let Some((meta, data)) = read_snapshot::<C>(&path)? {
            let invalid = |why: String| KmirrorStorageError::Io {
                op: "restore the state from",
                path: path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
            };
            machine
                .state
                .lock()
                .map_err(|_| invalid("the state was poisoned by a panic".to_string()))?
                .restore(&data)
                .map_err(invalid)?;
            machine.last_applied = meta.last_log_id.clone();
            machine.last_membership = meta.last_membership.clone();
            *machine.stored.meta.lock().map_err(|_| poisoned(&path))? = Some(meta);
        }
        Ok(machine)
    }
}

impl<C: RaftTypeConfig> StoredSnapshot<C> {
    /// Writes a snapshot durably, unless `only_if_newer` and a newer one is stored.
    fn store(
        &self,
        meta: &Meta<C>,
        data: &[u8],
        only_if_newer: bool,
    ) -> Result<(), KmirrorStorageError> {
        let mut stored = self.meta.lock().map_err(|_| poisoned(&self.path))?;
        if only_if_newer
            && stored
                .as_ref()
                .is_some_and(|s| s.last_log_id > meta.last_log_id)
        {
            return Ok(());
        }
        atomic_file::write(&self.path, &encode_snapshot::<C>(meta, data, &self.path)?)?;
        *stored = Some(meta.clone());
        Ok(())
    }

    fn current(&self) -> Result<Option<Stored<C>>, KmirrorStorageError> {
        let stored = self.meta.lock().map_err(|_| poisoned(&self.path))?;
        if stored.is_none() {
            return Ok(None);
        }
        read_snapshot::<C>(&self.path)
    }
}

/// `u32 meta length | meta JSON | data`.
fn encode_snapshot<C: RaftTypeConfig>(
    meta: &Meta<C>,
    data: &[u8],
    path: &Path,
) -> Result<Vec<u8>, KmirrorStorageError> {
    let meta = serde_json::to_vec(meta).map_err(|e| KmirrorStorageError::Io {
        op: "encode the snapshot meta of",
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    let mut body = Vec::with_capacity(4 + meta.len() + data.len());
    body.extend_from_slice(&(meta.len() as u32).to_be_bytes());
    body.extend_from_slice(&meta);
    body.extend_from_slice(data);
    Ok(body)
}

/// The snapshot stored at `path`, if any.
fn read_snapshot<C: RaftTypeConfig>(path: &Path) -> Result<Option<Stored<C>>, KmirrorStorageError> {
    let Some(body) = atomic_file::read(path)? else {
        return Ok(None);
    };
    let invalid = |why: String| KmirrorStorageError::Io {
        op: "decode the snapshot",
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
    };
    let meta_len = body
        .get(..4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as usize)
        .ok_or_else(|| invalid(format!("{} bytes, no meta length", body.len())))?;
    let meta = body
        .get(4..4 + meta_len)
        .ok_or_else(|| invalid(format!("a meta of {meta_len} bytes runs past the end")))?;
    let meta: Meta<C> = serde_json::from_slice(meta).map_err(|e| invalid(e.to_string()))?;
    Ok(Some((meta, body[4 + meta_len..].to_vec())))
}

/// The response to a blank or membership entry. (Spelled through `S` alone: where
/// `S::Response` is also `C::R`, the compiler looks its `Default` up on `C::R`.)
fn no_response<S: ReplicatedState>() -> S::Response {
    S::Response::default()
}

/// The error for a lock a panic poisoned.
fn poisoned(path: &Path) -> KmirrorStorageError {
    KmirrorStorageError::Io {
        op: "lock the snapshot",
        path: path.to_path_buf(),
        source: std::io::Error::other("poisoned by a panic while it was held"),
    }
}

/// The openraft error for a state whose lock a panic poisoned: it may be half-changed.
fn state_poisoned<NID: openraft::NodeId>() -> StorageError<NID> {
    StorageIOError::write_state_machine(AnyError::error(
        "the replicated state was poisoned by a panic while it was held",
    ))
    .into()
}

impl<C: RaftTypeConfig<SnapshotData = Cursor<Vec<u8>>>> RaftSnapshotBuilder<C>
    for SnapshotBuilder<C>
{
    async fn build_snapshot(&mut self) -> Result<Snapshot<C>, StorageError<C::NodeId>> {
        let signature = Some(self.meta.signature());
        let data = self.data.clone().map_err(|e| {
            StorageIOError::read_state_machine(AnyError::error(format!(
                "the state could not be serialised: {e}"
            )))
        })?;
        self.stored
            .store(&self.meta, &data, true)
            .map_err(|e| StorageIOError::write_snapshot(signature, AnyError::new(&e)))?;
        Ok(Snapshot {
            meta: self.meta.clone(),
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl<C, S> RaftStateMachine<C> for StateMachine<C, S>
where
    C: RaftTypeConfig<Entry = Entry<C>, SnapshotData = Cursor<Vec<u8>>>,
    S: ReplicatedState<Command = C::D, Response = C::R>,
{
    type SnapshotBuilder = SnapshotBuilder<C>;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<C::NodeId>>,
            StoredMembership<C::NodeId, C::Node>,
        ),
        StorageError<C::NodeId>,
    > {
        Ok((self.last_applied.clone(), self.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<C::R>, StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut state = self.state.lock().map_err(|_| state_poisoned())?;
        let mut responses = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id.clone());
            responses.push(match entry.payload {
                EntryPayload::Blank => no_response::<S>(),
                EntryPayload::Normal(command) => state.apply(&command),
                EntryPayload::Membership(membership) => {
                    self.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                    no_response::<S>()
                }
            });
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder<C> {
        self.built += 1;
        let data = match self.state.lock() {
            Ok(state) => state.snapshot(),
            Err(_) => Err("the replicated state was poisoned by a panic".to_string()),
        };
        let index = self.last_applied.as_ref().map_or(0, |id| id.index);
        SnapshotBuilder {
            meta: SnapshotMeta {
                last_log_id: self.last_applied.clone(),
                last_membership: self.last_membership.clone(),
                snapshot_id: format!("{index}-{}", self.built),
            },
            data,
            stored: self.stored.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<C::NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta<C>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        let signature = Some(meta.signature());
        let data = snapshot.into_inner();
        // Restored first: a snapshot the state cannot read is never stored to be restored at
        // the next start.
        self.state
            .lock()
            .map_err(|_| state_poisoned())?
            .restore(&data)
            .map_err(|e| {
                StorageIOError::write_snapshot(
                    signature.clone(),
                    AnyError::error(format!("the state could not be restored from it: {e}")),
                )
            })?;
        self.last_applied = meta.last_log_id.clone();
        self.last_membership = meta.last_membership.clone();
        self.stored
            .store(meta, &data, false)
            .map_err(|e| StorageIOError::write_snapshot(signature, AnyError::new(&e)))?;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<C>>, StorageError<C::NodeId>> {
        let current = self
            .stored
            .current()
            .map_err(|e| StorageIOError::read_snapshot(None, AnyError::new(&e)))?;
        Ok(current.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{
        Kv, TestStateMachine, blank, contents, log_id, membership, open, set,
    };
    use super::*;
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::{Membership, StorageHelper};
    use std::collections::BTreeMap;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn fresh(dir: &Path) -> (TestStateMachine, Arc<Mutex<Kv>>) {
        let state = Arc::new(Mutex::new(Kv::default()));
        let machine = StateMachine::open(dir, Arc::clone(&state)).expect("opens");
        (machine, state)
    }

    #[tokio::test]
    async fn apply_answers_each_entry_and_tracks_applied_and_membership() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut machine, state) = fresh(dir.path());
        let responses = machine
            .apply([
                membership(1, 1, &[1, 2, 3]),
                set(1, 2, "a", "1"),
                blank(2, 3),
                set(2, 4, "a", "2"),
            ])
            .await
            .expect("applied");
        assert_eq!(responses, [None, None, None, Some("1".to_string())]);
        assert_eq!(contents(&state), map(&[("a", "2")]));
        let (applied, members) = machine.applied_state().await.expect("applied state");
        assert_eq!(applied, Some(log_id(2, 4)));
        assert_eq!(members.log_id(), &Some(log_id(1, 1)));
        assert_eq!(
            members.membership(),
            &Membership::new(vec![[1, 2, 3].into()], ())
        );
    }

    #[tokio::test]
    async fn a_snapshot_survives_reopening_and_restores_the_state() {
        let dir = tempfile::tempdir().expect("temp dir");
        let built = {
            let (mut machine, _) = fresh(dir.path());
            machine
                .apply([
                    membership(1, 1, &[1]),
                    set(1, 2, "a", "1"),
                    set(1, 3, "b", "2"),
                ])
                .await
                .expect("applied");
            let built = machine
                .get_snapshot_builder()
                .await
                .build_snapshot()
                .await
                .expect("built");
            assert_eq!(built.meta.last_log_id, Some(log_id(1, 3)));
            built
        };
        let (mut machine, state) = fresh(dir.path());
        assert_eq!(contents(&state), map(&[("a", "1"), ("b", "2")]));
        let (applied, members) = machine.applied_state().await.expect("applied state");
        assert_eq!(applied, Some(log_id(1, 3)));
        assert_eq!(members, built.meta.last_membership);
        let current = machine
            .get_current_snapshot()
            .await
            .expect("read")
            .expect("a snapshot");
        assert_eq!(current.meta, built.meta);
        assert_eq!(current.snapshot.into_inner(), built.snapshot.into_inner());
    }

    #[tokio::test]
    async fn an_installed_snapshot_survives_reopening() {
        let (leader_dir, follower_dir) = (
            tempfile::tempdir().expect("temp dir"),
            tempfile::tempdir().expect("temp dir"),
        );
        let (mut leader, _) = fresh(leader_dir.path());
        leader
            .apply([membership(1, 1, &[1, 2]), set(1, 2, "a", "1")])
            .await
            .expect("applied");
        let sent = leader
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("built");
        {
            let (mut follower, state) = fresh(follower_dir.path());
            let mut received = follower.begin_receiving_snapshot().await.expect("begun");
            received
                .get_mut()
                .extend_from_slice(sent.snapshot.get_ref());
            follower
                .install_snapshot(&sent.meta, received)
                .await
                .expect("installed");
            assert_eq!(contents(&state), map(&[("a", "1")]));
        }
        let (mut follower, state) = fresh(follower_dir.path());
        assert_eq!(contents(&state), map(&[("a", "1")]));
        let current = follower
            .get_current_snapshot()
            .await
            .expect("read")
            .expect("a snapshot");
        assert_eq!(current.meta, sent.meta);
        assert_eq!(
            follower.applied_state().await.expect("applied").0,
            Some(log_id(1, 2))
        );
    }

    #[tokio::test]
    async fn a_snapshot_the_state_cannot_restore_is_refused_and_the_stored_one_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut machine, state) = fresh(dir.path());
        machine.apply([set(1, 1, "a", "1")]).await.expect("applied");
        let kept = machine
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("built");
        let mut meta = kept.meta.clone();
        meta.last_log_id = Some(log_id(1, 9));
        meta.snapshot_id = "9-1".to_string();
        let err = machine
            .install_snapshot(&meta, Box::new(Cursor::new(b"not a map".to_vec())))
            .await
            .expect_err("refused");
        assert!(err.to_string().contains("could not be restored"), "{err}");
        assert_eq!(contents(&state), map(&[("a", "1")]));
        let current = machine.get_current_snapshot().await.expect("read");
        assert_eq!(current.expect("a snapshot").meta, kept.meta);
    }

    #[tokio::test]
    async fn a_snapshot_built_before_a_newer_one_was_installed_is_not_stored() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut machine, _) = fresh(dir.path());
        machine.apply([set(1, 1, "a", "1")]).await.expect("applied");
        let mut older = machine.get_snapshot_builder().await;

        let newer_dir = tempfile::tempdir().expect("temp dir");
        let (mut leader, _) = fresh(newer_dir.path());
        leader
            .apply([set(1, 1, "a", "1"), set(1, 2, "b", "2")])
            .await
            .expect("applied");
        let newer = leader
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("built");
        machine
            .install_snapshot(&newer.meta, newer.snapshot)
            .await
            .expect("installed");

        let built = older.build_snapshot().await.expect("built");
        assert_eq!(built.meta.last_log_id, Some(log_id(1, 1)));
        let current = machine.get_current_snapshot().await.expect("read");
        assert_eq!(current.expect("a snapshot").meta, newer.meta);
    }

    #[tokio::test]
    async fn a_damaged_snapshot_is_refused_at_open_naming_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let (mut machine, _) = fresh(dir.path());
            machine.apply([set(1, 1, "a", "1")]).await.expect("applied");
            machine
                .get_snapshot_builder()
                .await
                .build_snapshot()
                .await
                .expect("built");
        }
        let path = dir.path().join("snapshot");
        let mut raw = std::fs::read(&path).expect("snapshot");
        raw[10] ^= 0x01;
        std::fs::write(&path, &raw).expect("damaged");
        let state = Arc::new(Mutex::new(Kv::default()));
        let err = match TestStateMachine::open(dir.path(), state) {
            Ok(_) => panic!("a damaged snapshot opened"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(&path.display().to_string()) && err.contains("checksum mismatch"),
            "{err}"
        );
    }

    /// What the Controller relies on: after a restart, before any leader exists, openraft's
    /// start-up restores the snapshot and re-applies the committed entries after it (and none
    /// that were not committed), so the metadata is readable at once.
    #[tokio::test]
    async fn a_restarted_node_has_its_committed_state_before_a_leader_exists() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let (mut log, mut machine, _) = open(dir.path());
            log.save_vote(&openraft::Vote::new(1, 0))
                .await
                .expect("vote");
            let first = [membership(1, 1, &[0]), set(1, 2, "a", "1")];
            log.blocking_append(first.clone()).await.expect("appended");
            machine.apply(first).await.expect("applied");
            machine
                .get_snapshot_builder()
                .await
                .build_snapshot()
                .await
                .expect("built");
            log.purge(log_id(1, 2)).await.expect("purged");
            log.blocking_append([
                set(1, 3, "b", "2"),
                set(1, 4, "a", "3"),
                set(1, 5, "c", "4"),
            ])
            .await
            .expect("appended");
            log.save_committed(Some(log_id(1, 4)))
                .await
                .expect("committed");
            // Entries 3 and 4 were committed but not applied when the node stopped.
        }
        let (mut log, mut machine, state) = open(dir.path());
        assert_eq!(
            contents(&state),
            map(&[("a", "1")]),
            "the snapshot restored"
        );
        let initial = StorageHelper::new(&mut log, &mut machine)
            .get_initial_state()
            .await
            .expect("initial state");
        assert_eq!(initial.committed, Some(log_id(1, 4)));
        assert_eq!(contents(&state), map(&[("a", "3"), ("b", "2")]));
        assert_eq!(
            machine.applied_state().await.expect("applied").0,
            Some(log_id(1, 4))
        );
    }
}
