//! This node's [`Controller`] image as the quorum's replicated state: entries are applied with
//! [`Controller::execute`] and snapshots are the image's records ([`Controller::image_records`]).

use super::state_machine::ReplicatedState;
use super::types::Reply;
use crate::controller::{Controller, MetadataCommand, MetadataRecord};

impl ReplicatedState for Controller {
    type Command = MetadataCommand;
    type Response = Reply;

    fn apply(&mut self, command: &MetadataCommand) -> Reply {
        Reply(self.execute(command))
    }

    fn snapshot(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(&self.image_records()).map_err(|e| e.to_string())
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let records: Vec<MetadataRecord> =
            serde_json::from_slice(snapshot).map_err(|e| format!("a damaged snapshot: {e}"))?;
        Controller::restore(self, &records);
        Ok(())
    }
}
