//! The engine as its host sees it: [`EngineRuntime`] runs a [`MirrorSystem`] on its own actix
//! thread, and [`Engine`] is the handle the host's request handlers hold (plain `Send` message
//! recipients, no type of the host in it, so handlers need nothing but this module).
//!
//! Every request is an [`EngineRequest`] answered by [`Engine::ask`]: the engine's answer, or
//! COORDINATOR_NOT_AVAILABLE when the engine has stopped.

use super::describe::{DescribeMirror, DescribeMirrors};
use super::epoch_bumps::ServeBumpLeaderEpochs;
use super::lme_lookup::LookupLmes;
use super::local_writes::CountLocalWrites;
use super::shard_service::{ReadPartitionStates, ServeReadMirrorStates, ServeWriteMirrorStates};
use super::system::{LoadMirror, MirrorSystem, Settle};
use super::topic_requests::{ChangeTopics, StartTopics, TopicResult};
use super::topics::{ChangeTopic, SourceTopics, StartTopic};
use super::validate::ValidateSource;
use super::verify::VerifyTopic;
use crate::host::Host;
use crate::partition::RetryPolicy;
use crate::policy::MirrorError;
use actix::{Actor, Message, Recipient};
use kmirror_protocol::errors::ErrorCode;

/// A request the engine answers with `Ok(Answer)` or a [`MirrorError`].
pub trait EngineRequest:
    Sized + Message<Result = Result<Self::Answer, MirrorError>> + Send + 'static
{
    /// What a successful request answers.
    type Answer: Send + 'static;
    /// Where the engine takes it.
    fn recipient(engine: &Engine) -> &Recipient<Self>;
}

macro_rules! requests {
    ($($message:ty => $field:ident: $answer:ty,)+) => {
        /// The engine's requests, as its host's handlers send them.
        #[derive(Clone)]
        pub struct Engine {
            $($field: Recipient<$message>,)+
            settle: Recipient<Settle>,
        }

        impl Engine {
            fn of<H: Host>(addr: &actix::Addr<MirrorSystem<H>>) -> Engine {
                Engine {
                    $($field: addr.clone().recipient(),)+
                    settle: addr.clone().recipient(),
                }
            }
        }

        $(impl EngineRequest for $message {
            type Answer = $answer;
            fn recipient(engine: &Engine) -> &Recipient<Self> {
                &engine.$field
            }
        })+
    };
}

requests! {
    LoadMirror => load_mirror: (),
    StartTopic => start_topic: (),
    ChangeTopic => change_topic: (),
    SourceTopics => source_topics: Vec<String>,
    StartTopics => start_topics: Vec<TopicResult>,
    ChangeTopics => change_topics: Vec<TopicResult>,
    LookupLmes => lookup_lmes: Vec<super::lme_lookup::TopicLmes>,
    ServeBumpLeaderEpochs => bump_leader_epochs: kmirror_protocol::messages::BumpLeaderEpochsResponse,
    DescribeMirror => describe_mirror: Vec<super::describe::TopicSnapshot>,
    DescribeMirrors => describe_mirrors: Vec<super::describe::DescribedMirror>,
    ServeReadMirrorStates => read_states: kmirror_protocol::messages::ReadMirrorStatesResponse,
    ServeWriteMirrorStates => write_states: kmirror_protocol::messages::WriteMirrorStatesResponse,
    CountLocalWrites => count_local_writes: Vec<super::local_writes::LocalWrites>,
    ValidateSource => validate_source: Vec<super::validate::SourceCheck>,
    VerifyTopic => verify_topic: Vec<super::verify::PartitionVerified>,
    ReadPartitionStates => read_partition_states: Vec<(crate::host::TopicPartition, super::shard_service::StateAnswer)>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

impl Engine {
    /// Sends `request` and waits for the engine's answer.
    pub async fn ask<M: EngineRequest>(&self, request: M) -> Result<M::Answer, MirrorError> {
        M::recipient(self).send(request).await.map_err(|e| {
            MirrorError::new(
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                format!("the mirroring engine: {e}"),
            )
        })?
    }

    /// Resolves once every mirror partition this broker leads has read its state from
    /// `__mirror_state` and entered it, or after `timeout` ([`Settle`]); an error when the
    /// engine has stopped.
    pub async fn settle(&self, timeout: std::time::Duration) -> Result<(), MirrorError> {
        self.settle.send(Settle { timeout }).await.map_err(|e| {
            MirrorError::new(
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                format!("the mirroring engine: {e}"),
            )
        })
    }
}

/// The engine's actix system, to run on the calling thread. Its actors run there; what they
/// `tokio::spawn` (the source connections' readers and writers above all) runs on worker
/// threads of its own, one per core, so a catch-up's answers are read off the thread where
/// fetchers decide (docs/design.md §11, "Placement").
fn engine_system() -> std::io::Result<actix::SystemRunner> {
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(1, usize::from))
        .thread_name("kmirror-io")
        .enable_all()
        .build()?;
    Ok(actix::System::with_tokio_rt(move || io))
}

/// The engine running on its own actix system thread, for a host whose listener runs on tokio.
#[derive(Debug)]
pub struct EngineRuntime {
    engine: Engine,
    system: actix::System,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EngineRuntime {
    /// Starts the engine of `host` on a new thread; it resumes the mirrors the host's metadata
    /// names.
    pub fn start<H: Host>(host: H) -> std::io::Result<EngineRuntime> {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kmirror-engine".into())
            .spawn(move || {
                let runner = match engine_system() {
                    Ok(runner) => runner,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let started = runner.block_on(async move {
                    let addr = MirrorSystem::new(host, RetryPolicy::default()).start();
                    (Engine::of(&addr), actix::System::current())
                });
                if tx.send(Ok(started)).is_ok() {
                    let _ = runner.run();
                }
            })?;
        let (engine, system) = rx
            .recv()
            .map_err(|_| std::io::Error::other("the mirroring engine did not start"))??;
        Ok(EngineRuntime {
            engine,
            system,
            thread: Some(thread),
        })
    }

    /// The handle the host's request handlers use.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Stops the engine and waits for its thread.
    pub fn stop(mut self) {
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source connection's reader, spawned by a fetcher on the engine's thread, runs on a
    /// worker: on the engine's thread its reads held every actor there.
    #[test]
    fn what_the_engine_spawns_runs_off_its_thread() {
        let runner = engine_system().expect("the engine's system");
        let (engine_thread, spawned) = runner.block_on(async {
            let spawned = tokio::spawn(async {
                let here = std::thread::current();
                (here.id(), here.name().map(str::to_string))
            });
            (std::thread::current().id(), spawned.await.expect("ran"))
        });
        assert_ne!(spawned.0, engine_thread);
        assert_eq!(spawned.1.as_deref(), Some("kmirror-io"));
    }
}
