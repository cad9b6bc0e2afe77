//! The connections a mirror's Fetches travel on (docs/design.md §4, "Fetching across a WAN").
//!
//! A connection to a distant source carries at most its window per round trip, so Fetches in
//! flight together each need a connection of their own: a lane is one source client (one
//! connection per source broker, and its own fetch sessions). Lane 0 always exists; the others
//! are made the first time a fetcher needs that many in flight, and kept (an idle connection
//! costs the source little, and a distant source's catch-up often comes back).
//!
//! A change of the mirror's connection or security configs reaches every lane made so far and
//! the lanes made after it.

use crate::host::{Host, Source};
use kmirror_protocol::client::{ClientConfig, ClientError};
use std::sync::{Arc, Mutex, MutexGuard};

/// The lanes of one mirror, shared by its fetchers (each source broker is a connection of its
/// own within a lane).
pub struct FetchLanes<H: Host> {
    host: H,
    lanes: Mutex<Lanes<H::Source>>,
}

struct Lanes<S> {
    config: ClientConfig,
    made: Vec<Arc<S>>,
}

impl<H: Host> std::fmt::Debug for FetchLanes<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchLanes")
            .field("made", &self.lock().made.len())
            .finish_non_exhaustive()
    }
}

impl<H: Host> FetchLanes<H> {
    /// The lanes of a mirror whose source is reached with `config`; lane 0 is made now.
    pub fn new(host: H, config: ClientConfig) -> Result<FetchLanes<H>, ClientError> {
        let first = Arc::new(host.connect_source(config.clone())?);
        Ok(FetchLanes {
            host,
            lanes: Mutex::new(Lanes {
                config,
                made: vec![first],
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Lanes<H::Source>> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lane `lane`, made (with every lane below it) if it is not yet.
    pub fn lane(&self, lane: usize) -> Result<Arc<H::Source>, ClientError> {
        let mut lanes = self.lock();
        while lanes.made.len() <= lane {
            let source = Arc::new(self.host.connect_source(lanes.config.clone())?);
            lanes.made.push(source);
        }
        Ok(lanes.made[lane].clone())
    }

    /// Lane 0.
    pub fn first(&self) -> Arc<H::Source> {
        self.lock().made[0].clone()
    }

    /// Takes new connection and security settings on every lane (the first error, after
    /// trying them all).
    pub fn reconfigure(&self, config: ClientConfig) -> Result<(), ClientError> {
        let mut lanes = self.lock();
        lanes.config = config.clone();
        let mut result = Ok(());
        for source in &lanes.made {
            if let Err(e) = source.reconfigure(config.clone()) {
                result = result.and(Err(e));
            }
        }
        result
    }
}
