//! A mirror's partitions as the whole cluster reports them: DescribeMirrors asked of every broker
//! (each reports the partitions it leads) and the answers merged, shared by `--describe`,
//! `--failover` and `kmirror quickstart`.

use super::failure::{Failure, refused};
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::messages::{DescribeMirrorsRequest, DescribeMirrorsResponse};

/// DescribeMirrors of every broker of the cluster (each reports the partitions it leads),
/// merged: one entry per mirror and topic, partitions in order.
pub(crate) async fn describe_every_broker(
    bootstrap: &str,
    first: &Connection,
    request: &DescribeMirrorsRequest,
) -> Result<DescribeMirrorsResponse, Failure> {
    let unreachable =
        |e: kmirror_protocol::client::ClientError| Failure::Unreachable(e.to_string());
    let cluster = SourceClient::connect(ClientConfig::plaintext(bootstrap))
        .await
        .map_err(unreachable)?;
    let brokers = cluster
        .metadata(Some(&[]))
        .await
        .map_err(unreachable)?
        .brokers;
    let mut answers = vec![
        first
            .send("DescribeMirrors", request, 0)
            .await
            .map_err(unreachable)?
            .1,
    ];
    let first_address = first.broker().to_string();
    for address in brokers.values().filter(|a| **a != first_address) {
        // A broker that does not answer (down, not yet fenced) leaves out only its partitions.
        let answer = async {
            let connection =
                Connection::connect(address, &ClientConfig::plaintext(address), None).await?;
            connection.send("DescribeMirrors", request, 0).await
        };
        match answer.await {
            Ok((_, answer)) => answers.push(answer),
            Err(e) => eprintln!(
                "kmirror mirrors: broker {address} did not answer ({e}); the partitions it \
                 leads are not shown"
            ),
        }
    }
    merge_answers(answers)
}

/// The brokers' DescribeMirrors answers as one: one entry per mirror and topic, partitions in
/// order, each once. A broker may answer twice (reached at its bootstrap address and at a
/// different advertised one: a proxy, NAT) and a partition whose leadership just moved may be
/// reported by both leaders: the first report of a partition is kept.
fn merge_answers(
    answers: Vec<DescribeMirrorsResponse>,
) -> Result<DescribeMirrorsResponse, Failure> {
    let mut merged = DescribeMirrorsResponse::default();
    for answer in answers {
        if answer.error_code != 0 {
            return Err(refused(answer.error_code, answer.error_message));
        }
        for mirror in answer.mirrors {
            let Some(into) = merged
                .mirrors
                .iter_mut()
                .find(|m| m.mirror_name == mirror.mirror_name)
            else {
                merged.mirrors.push(mirror);
                continue;
            };
            for topic in mirror.topics {
                match into
                    .topics
                    .iter_mut()
                    .find(|t| t.topic_name == topic.topic_name)
                {
                    Some(t) => {
                        for p in topic.partitions {
                            if !t
                                .partitions
                                .iter()
                                .any(|q| q.partition_index == p.partition_index)
                            {
                                t.partitions.push(p);
                            }
                        }
                    }
                    None => into.topics.push(topic),
                }
            }
        }
    }
    for topic in merged.mirrors.iter_mut().flat_map(|m| m.topics.iter_mut()) {
        topic.partitions.sort_by_key(|p| p.partition_index);
    }
    Ok(merged)
}

/// The first mirror-level error of a describe answer (an unknown mirror, one not authorized),
/// as the command's failure.
pub(crate) fn mirror_error(answer: &DescribeMirrorsResponse) -> Result<(), Failure> {
    match answer.mirrors.iter().find(|m| m.error_code != 0) {
        Some(m) => Err(refused(
            m.error_code,
            Some(format!(
                "mirror {}: {}",
                m.mirror_name,
                m.error_message.as_deref().unwrap_or("refused")
            )),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::merge_answers;
    use kmirror_protocol::messages::DescribeMirrorsResponse;
    use kmirror_protocol::messages::describe_mirrors_response::{
        DescribedMirror, DescribedPartition, DescribedTopic,
    };

    fn answer(partitions: &[i32]) -> DescribeMirrorsResponse {
        DescribeMirrorsResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "dr".into(),
                topics: vec![DescribedTopic {
                    topic_name: "orders".into(),
                    partitions: partitions
                        .iter()
                        .map(|&p| DescribedPartition {
                            partition_index: p,
                            state: "MIRRORING".into(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// A broker reached at its bootstrap address and again at the one it advertises (the
    /// cluster nemesis's source behind its proxy listed every partition twice).
    #[test]
    fn a_broker_that_answers_twice_shows_each_partition_once() {
        let merged =
            merge_answers(vec![answer(&[1, 0]), answer(&[0, 1]), answer(&[2])]).expect("merged");
        let shown: Vec<i32> = merged.mirrors[0].topics[0]
            .partitions
            .iter()
            .map(|p| p.partition_index)
            .collect();
        assert_eq!(shown, [0, 1, 2]);
    }
}
