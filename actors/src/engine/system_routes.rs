//! The requests the MirrorSystem passes to the [`Mirror`] they are about: a topic's start,
//! change and describe, the source's topics, a mirror's describe. A mirror not loaded here
//! answers UNKNOWN_CLUSTER_MIRROR (DescribeMirrors loads each mirror first); a mirror actor
//! that stopped answers COORDINATOR_NOT_AVAILABLE, which a client retries.
//!
//! A change of a topic (pause, resume, stop) is checked and written by the system, which needs
//! nothing of the mirror for it, and then told to the mirror's partitions here
//! ([`TellDesired`]); the other brokers' partitions see the metadata. The system handles one
//! change at a time, its mailbox held until the change is written and told: a change racing
//! another (a pause and a stop) is checked on the configs the first one wrote, so the one
//! refused never lands.

use super::describe::{DescribeMirror, DescribeMirrors, DescribedMirror, TopicSnapshot};
use super::mirror::Mirror;
use super::system::{LoadMirror, MirrorSystem};
use super::topic_requests::stopped;
use super::topics::{
    ChangeTopic, DescribeTopic, SourceTopics, StartTopic, TellDesired, desired_configs,
};
use super::verify::{PartitionVerified, VerifyTopic};
use crate::actor::PartitionSnapshot;
use crate::host::Host;
use crate::policy::MirrorError;
use actix::{
    Addr, AsyncContext, AtomicResponse, Context, Handler, Message, ResponseFuture, WrapFuture,
};
use kmirror_protocol::errors::ErrorCode;

impl<H: Host> MirrorSystem<H> {
    /// The actor of a loaded mirror.
    fn mirror(&self, name: &str) -> Result<Addr<Mirror<H>>, MirrorError> {
        self.mirrors
            .get(name)
            .map(|m| m.addr.clone())
            .ok_or_else(MirrorError::unknown_mirror)
    }

    /// Sends `msg` to the mirror `name`, and its answer back.
    fn route<M, T>(&self, name: &str, msg: M) -> ResponseFuture<Result<T, MirrorError>>
    where
        M: Message<Result = Result<T, MirrorError>> + Send + 'static,
        Mirror<H>: Handler<M>,
        <Mirror<H> as actix::Actor>::Context: actix::dev::ToEnvelope<Mirror<H>, M>,
        T: Send + 'static,
    {
        let mirror = self.mirror(name);
        Box::pin(async move { mirror?.send(msg).await.map_err(stopped)? })
    }
}

impl<H: Host> Handler<StartTopic> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<(), MirrorError>>;

    fn handle(&mut self, msg: StartTopic, _: &mut Context<Self>) -> Self::Result {
        let name = msg.mirror.clone();
        self.route(&name, msg)
    }
}

impl<H: Host> Handler<SourceTopics> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<Vec<String>, MirrorError>>;

    fn handle(&mut self, msg: SourceTopics, _: &mut Context<Self>) -> Self::Result {
        let name = msg.0.clone();
        self.route(&name, msg)
    }
}

impl<H: Host> Handler<DescribeTopic> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<Vec<PartitionSnapshot>, MirrorError>>;

    fn handle(&mut self, msg: DescribeTopic, _: &mut Context<Self>) -> Self::Result {
        let name = msg.mirror.clone();
        self.route(&name, msg)
    }
}

impl<H: Host> Handler<DescribeMirror> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<Vec<TopicSnapshot>, MirrorError>>;

    fn handle(&mut self, msg: DescribeMirror, _: &mut Context<Self>) -> Self::Result {
        let name = msg.0.clone();
        self.route(&name, msg)
    }
}

impl<H: Host> Handler<VerifyTopic> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<Vec<PartitionVerified>, MirrorError>>;

    fn handle(&mut self, msg: VerifyTopic, _: &mut Context<Self>) -> Self::Result {
        let name = msg.mirror.clone();
        self.route(&name, msg)
    }
}

impl<H: Host> Handler<ChangeTopic> for MirrorSystem<H> {
    type Result = AtomicResponse<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: ChangeTopic, _: &mut Context<Self>) -> Self::Result {
        // `mirror.name` stays set (`<mirror>.removed` for a stop), so the topic stays read-only
        // until its partition actors reach STOPPED.
        let changed = desired_configs(&self.host, &msg)
            .map(|configs| self.host.set_topic_configs(&msg.topic, configs));
        let mirror = self.mirrors.get(&msg.mirror).map(|m| m.addr.clone());
        let tell = TellDesired {
            topic: msg.topic,
            desired: msg.desired,
        };
        let change = async move {
            changed?
                .await
                .map_err(|e| MirrorError::new(e.code, e.message))?;
            match mirror {
                Some(mirror) => mirror.send(tell).await.map_err(stopped)?,
                None => Ok(()),
            }
        };
        AtomicResponse::new(Box::pin(change.into_actor(self)))
    }
}

impl<H: Host> Handler<DescribeMirrors> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<Vec<DescribedMirror>, MirrorError>>;

    fn handle(&mut self, msg: DescribeMirrors, ctx: &mut Context<Self>) -> Self::Result {
        let names = if msg.names.is_empty() {
            self.host.mirrors().into_keys().collect()
        } else {
            msg.names
        };
        let system = ctx.address();
        Box::pin(async move {
            let mut described = Vec::with_capacity(names.len());
            for name in names {
                let topics = if (msg.may_describe)(&name) {
                    match system.send(LoadMirror(name.clone())).await.map_err(stopped) {
                        Ok(Ok(())) => system
                            .send(DescribeMirror(name.clone(), msg.cut))
                            .await
                            .map_err(stopped)
                            .and_then(|r| r),
                        Ok(Err(e)) | Err(e) => Err(e),
                    }
                } else {
                    Err(MirrorError::new(
                        ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                        "DESCRIBE on the mirror is needed",
                    ))
                };
                described.push((name, topics));
            }
            Ok(described)
        })
    }
}
