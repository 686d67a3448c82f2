//! `keel records delete`: delete every record below an offset of some partitions (DeleteRecords,
//! API 21), as Kafka's `kafka-delete-records.sh` (`org.apache.kafka.tools.DeleteRecordsCommand`)
//! does — one partition named on the command line, or Kafka's JSON file:
//!
//! ```json
//! {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}
//! ```
//!
//! (offset -1: everything below the high watermark). Each partition is sent to its leader
//! (Metadata); a leader that moved is asked again with back-off until `--api-timeout-ms`. The
//! answer comes once every live replica has moved its log start offset (the low watermark,
//! printed), or the request's `--timeout-ms` passed (`REQUEST_TIMED_OUT`: the leader deleted, a
//! follower has not confirmed yet). Exits non-zero when any partition failed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use keel_node::client::Connection;
use keel_wire::kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use keel_wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use keel_wire::kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, MetadataRequest, MetadataResponse,
};
use keel_wire::ResponseError;
use serde::{Deserialize, Serialize};

use crate::admin::{call, connect, error_text, name, table, Bootstrap, Conn, Retry};

/// Kafka's admin client `request.timeout.ms`: how long a DeleteRecords may wait for the
/// followers by default.
const DEFAULT_TIMEOUT_MS: i32 = 30_000;

/// The version of Kafka's offset JSON file this command reads (`DeleteRecordsCommand`).
const OFFSET_JSON_VERSION: i64 = 1;

/// The most partitions one command deletes from (each is one entry of the request; the file is
/// the operator's, but a typo must not build a request the broker refuses as too large).
const PARTITIONS_MAX: usize = 100_000;

/// `keel records ...`
#[derive(Subcommand, Debug)]
pub enum RecordsCommand {
    /// Delete every record below an offset (the log start offset moves there on every replica).
    Delete(DeleteArgs),
}

/// `keel records delete`
#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// The topic (with `--partition` and `--offset`).
    #[arg(long, requires_all = ["partition", "offset"], conflicts_with = "offset_json_file")]
    topic: Option<String>,
    /// The partition.
    #[arg(long, requires = "topic")]
    partition: Option<i32>,
    /// Delete the records below this offset (-1: below the high watermark).
    #[arg(long, requires = "topic", allow_negative_numbers = true)]
    offset: Option<i64>,
    /// Kafka's offset JSON file (`kafka-delete-records.sh --offset-json-file`):
    /// `{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}`.
    #[arg(long, value_name = "FILE", required_unless_present = "topic")]
    offset_json_file: Option<PathBuf>,
    /// How long the leader waits for its followers to confirm (DeleteRecords `timeout_ms`).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_TIMEOUT_MS)]
    timeout_ms: i32,
    #[arg(long)]
    json: bool,
}

/// Kafka's offset JSON file.
#[derive(Debug, Deserialize)]
struct OffsetFile {
    #[serde(default)]
    version: Option<i64>,
    partitions: Vec<OffsetEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffsetEntry {
    topic: String,
    partition: i32,
    offset: i64,
}

/// One partition's outcome.
#[derive(Debug, Clone, Serialize)]
struct Outcome {
    topic: String,
    partition: i32,
    /// The low watermark the leader answered (`None` on error).
    low_watermark: Option<i64>,
    /// The error, in Kafka's name.
    error: Option<String>,
}

type Targets = BTreeMap<(String, i32), i64>;

/// Reads Kafka's offset JSON: version 1 (the default when absent), no partition twice
/// (`DeleteRecordsCommand` refuses duplicates).
fn parse_offset_file(text: &str) -> anyhow::Result<Targets> {
    let file: OffsetFile =
        serde_json::from_str(text).context("the offset JSON file is not valid")?;
    let version = file.version.unwrap_or(OFFSET_JSON_VERSION);
    if version != OFFSET_JSON_VERSION {
        bail!("Not supported version field value {version}");
    }
    if file.partitions.len() > PARTITIONS_MAX {
        bail!(
            "the offset JSON file names {} partitions; at most {PARTITIONS_MAX} at once",
            file.partitions.len()
        );
    }
    let mut targets = Targets::new();
    let mut duplicates = Vec::new();
    for entry in file.partitions {
        let key = (entry.topic, entry.partition);
        if targets.contains_key(&key) {
            duplicates.push(format!("{}-{}", key.0, key.1));
        }
        targets.insert(key, entry.offset);
    }
    if !duplicates.is_empty() {
        bail!(
            "Offset json file contains duplicate topic partitions: {}",
            duplicates.join(",")
        );
    }
    Ok(targets)
}

pub async fn records(bootstrap: Bootstrap, command: RecordsCommand) -> anyhow::Result<()> {
    let RecordsCommand::Delete(args) = command;
    let targets = match (&args.offset_json_file, &args.topic) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            parse_offset_file(&text).with_context(|| format!("{}", path.display()))?
        }
        (None, Some(topic)) => {
            let partition = args.partition.context("--partition is required")?;
            let offset = args.offset.context("--offset is required")?;
            Targets::from([((topic.clone(), partition), offset)])
        }
        (None, None) => {
            bail!("name a partition (--topic, --partition, --offset) or --offset-json-file")
        }
    };
    if targets.is_empty() {
        bail!("no partition to delete records from");
    }
    let outcomes = delete(&bootstrap, &targets, args.timeout_ms).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcomes)?);
    } else {
        let mut rows = vec![vec![
            "TOPIC".to_string(),
            "PARTITION".to_string(),
            "LOW_WATERMARK".to_string(),
            "ERROR".to_string(),
        ]];
        for o in &outcomes {
            rows.push(vec![
                o.topic.clone(),
                o.partition.to_string(),
                o.low_watermark.map_or("-".to_string(), |lw| lw.to_string()),
                o.error.clone().unwrap_or_else(|| "-".to_string()),
            ]);
        }
        print!("{}", table(&rows));
    }
    let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
    if failed > 0 {
        bail!("{failed} of {} partitions failed", outcomes.len());
    }
    Ok(())
}

/// Answers that mean "ask the partition's current leader again".
fn moved(code: i16) -> bool {
    [
        ResponseError::NotLeaderOrFollower,
        ResponseError::LeaderNotAvailable,
    ]
    .iter()
    .any(|e| e.code() == code)
}

/// Sends each partition to its leader until every one has an answer that is not a moved
/// leader, or the retry budget is spent.
async fn delete(
    bootstrap: &Bootstrap,
    targets: &Targets,
    timeout_ms: i32,
) -> anyhow::Result<Vec<Outcome>> {
    let mut conn = connect(bootstrap).await?;
    let mut retry = Retry::new(bootstrap);
    let mut done: BTreeMap<(String, i32), Outcome> = BTreeMap::new();
    loop {
        let pending: Targets = targets
            .iter()
            .filter(|(k, _)| !done.contains_key(*k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if pending.is_empty() {
            break;
        }
        let (by_leader, unknown, leaderless) = route(&mut conn, &pending).await?;
        for key in unknown {
            done.insert(
                key.clone(),
                failed(&key, ResponseError::UnknownTopicOrPartition),
            );
        }
        let mut last_retriable = None;
        for key in &leaderless {
            last_retriable = Some((key.clone(), ResponseError::LeaderNotAvailable.code()));
        }
        for (leader, partitions) in by_leader {
            let answers = send(&leader, &partitions, timeout_ms).await;
            match answers {
                Ok(mut answers) => {
                    for key in partitions.keys() {
                        if !answers.contains_key(key) {
                            // Kafka's admin client fails a partition the leader left out.
                            answers.insert(
                                key.clone(),
                                (ResponseError::UnknownServerError.code(), -1),
                            );
                        }
                    }
                    for (key, (code, low_watermark)) in answers {
                        if !partitions.contains_key(&key) {
                            continue;
                        }
                        if moved(code) {
                            last_retriable = Some((key, code));
                            continue;
                        }
                        let outcome = Outcome {
                            topic: key.0.clone(),
                            partition: key.1,
                            low_watermark: (code == 0).then_some(low_watermark),
                            error: (code != 0).then(|| error_text(code, None)),
                        };
                        done.insert(key, outcome);
                    }
                }
                // The leader could not be reached: ask metadata again.
                Err(_) => {
                    if let Some(key) = partitions.keys().next() {
                        last_retriable =
                            Some((key.clone(), ResponseError::LeaderNotAvailable.code()));
                    }
                }
            }
        }
        let Some((_, code)) = last_retriable else {
            continue;
        };
        if !retry.again(code).await {
            for key in targets
                .keys()
                .filter(|k| !done.contains_key(*k))
                .cloned()
                .collect::<Vec<_>>()
            {
                let error =
                    ResponseError::try_from_code(code).unwrap_or(ResponseError::LeaderNotAvailable);
                done.insert(key.clone(), failed(&key, error));
            }
        }
    }
    Ok(done.into_values().collect())
}

fn failed(key: &(String, i32), error: ResponseError) -> Outcome {
    Outcome {
        topic: key.0.clone(),
        partition: key.1,
        low_watermark: None,
        error: Some(error_text(error.code(), None)),
    }
}

/// The partitions by their leader's address; those whose topic or partition does not exist;
/// those without a leader now.
#[allow(clippy::type_complexity)]
async fn route(
    conn: &mut Conn,
    pending: &Targets,
) -> anyhow::Result<(
    BTreeMap<String, Targets>,
    Vec<(String, i32)>,
    Vec<(String, i32)>,
)> {
    let mut topics: Vec<String> = pending.keys().map(|(t, _)| t.clone()).collect();
    topics.dedup();
    let request = MetadataRequest::default().with_topics(Some(
        topics
            .iter()
            .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
            .collect(),
    ));
    let response: MetadataResponse = call(conn, ApiKey::Metadata, 4, 12, &request).await?;
    let brokers: BTreeMap<i32, String> = response
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
        .collect();
    let mut leaders: BTreeMap<(String, i32), Option<i32>> = BTreeMap::new();
    for t in &response.topics {
        let Some(topic) = t.name.as_ref().map(|n| n.to_string()) else {
            continue;
        };
        if t.error_code != 0 {
            continue;
        }
        for p in &t.partitions {
            let leader = (p.leader_id.0 >= 0).then_some(p.leader_id.0);
            leaders.insert((topic.clone(), p.partition_index), leader);
        }
    }
    let (mut by_leader, mut unknown, mut leaderless) =
        (BTreeMap::<String, Targets>::new(), Vec::new(), Vec::new());
    for (key, offset) in pending {
        match leaders.get(key) {
            None => unknown.push(key.clone()),
            Some(leader) => match leader.and_then(|l| brokers.get(&l)) {
                Some(address) => {
                    by_leader
                        .entry(address.clone())
                        .or_default()
                        .insert(key.clone(), *offset);
                }
                None => leaderless.push(key.clone()),
            },
        }
    }
    Ok((by_leader, unknown, leaderless))
}

/// One DeleteRecords to `leader`: (error code, low watermark) per partition it answered.
async fn send(
    leader: &str,
    partitions: &Targets,
    timeout_ms: i32,
) -> anyhow::Result<BTreeMap<(String, i32), (i16, i64)>> {
    let mut conn: Conn = Connection::connect(crate::admin::network(), leader, "keel-admin")
        .await
        .with_context(|| format!("cannot reach the leader at {leader}"))?;
    let mut topics: BTreeMap<&str, Vec<DeleteRecordsPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in partitions {
        topics.entry(topic).or_default().push(
            DeleteRecordsPartition::default()
                .with_partition_index(*partition)
                .with_offset(*offset),
        );
    }
    let request = DeleteRecordsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    DeleteRecordsTopic::default()
                        .with_name(name(topic))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response: DeleteRecordsResponse =
        call(&mut conn, ApiKey::DeleteRecords, 0, 2, &request).await?;
    let mut answers = BTreeMap::new();
    for t in response.topics {
        for p in t.partitions {
            answers.insert(
                (t.name.to_string(), p.partition_index),
                (p.error_code, p.low_watermark),
            );
        }
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: Kafka's offset JSON (DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup):
    // version 1 or absent, duplicates and other versions refused with Kafka's messages.
    #[test]
    fn offset_json_as_kafka_reads_it() {
        let targets = parse_offset_file(
            r#"{"partitions": [{"topic": "foo", "partition": 1, "offset": 1},
                {"topic": "foo", "partition": 0, "offset": -1}], "version": 1}"#,
        )
        .unwrap();
        assert_eq!(
            targets,
            Targets::from([(("foo".into(), 0), -1), (("foo".into(), 1), 1)])
        );
        let no_version =
            parse_offset_file(r#"{"partitions": [{"topic": "t", "partition": 0, "offset": 5}]}"#)
                .unwrap();
        assert_eq!(no_version, Targets::from([(("t".into(), 0), 5)]));
        let duplicate = parse_offset_file(
            r#"{"partitions": [{"topic": "t", "partition": 0, "offset": 5},
                {"topic": "t", "partition": 0, "offset": 6}], "version": 1}"#,
        )
        .unwrap_err();
        assert!(
            duplicate
                .to_string()
                .contains("Offset json file contains duplicate topic partitions: t-0"),
            "{duplicate}"
        );
        let version = parse_offset_file(r#"{"partitions": [], "version": 2}"#).unwrap_err();
        assert!(version
            .to_string()
            .contains("Not supported version field value 2"));
        assert!(parse_offset_file("{not json").is_err());
        assert!(
            parse_offset_file(r#"{"version": 1}"#).is_err(),
            "missing partitions"
        );
        assert!(parse_offset_file(
            r#"{"partitions": [{"topic": "t", "partition": "zero", "offset": 5}]}"#
        )
        .is_err());
    }
}
