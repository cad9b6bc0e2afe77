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
    /// Writes a snapshot durably unless a newer one is stored (`only_if_newer`); whether it
    /// was written.
    fn store(
        &self,
        meta: &Meta<C>,
        data: &[u8],
        only_if_newer: bool,
    ) -> Result<bool, KmirrorStorageError> {
        let mut stored = self.meta.lock().map_err(|_| poisoned(&self.path))?;
        if only_if_newer
            && stored
                .as_ref()
                .is_some_and(|s| s.last_log_id > meta.last_log_id)
        {
            return Ok(false);
        }
        atomic_file::write(&self.path, &encode_snapshot::<C>(meta, data, &self.path)?)?;
        *stored = Some(meta.clone());
        Ok(true)
    }

    fn current(&self) -> Result<Option<(Meta<C>, Vec<u8>)>, KmirrorStorageError> {
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
fn read_snapshot<C: RaftTypeConfig>(
    path: &Path,
) -> Result<Option<(Meta<C>, Vec<u8>)>, KmirrorStorageError> {
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

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<C>>, StorageError<C::NodeId>> {
        let current = self.stored.current().map_err(|e| {
            StorageIOError::read_snapshot(None, AnyError::new(&e))
        })?;
        Ok(current.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
