//! `keel groups list | describe | reset-offsets | delete`: consumer groups of a running cluster,
//! as Kafka's `kafka-consumer-groups.sh` shows and changes them. `list` asks every broker
//! (ListGroups answers only for the groups a broker coordinates); the others find the group's
//! coordinator (FindCoordinator) and talk to it. `describe` adds each partition's log end offset
//! (ListOffsets to its leader) to compute the lag. `reset-offsets` only prints the new offsets
//! unless `--execute` is given, and works only on a group without members (Kafka's rule: the
//! commit goes outside any generation).

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use clap::Subcommand;
use keel_node::client::Connection;
use keel_node::coordinator::consumer_protocol::assignment_partitions;
use keel_wire::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use keel_wire::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use keel_wire::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use keel_wire::kafka_protocol::messages::*;
use keel_wire::kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::admin::{call, check, connect, name, table, Bootstrap, Conn, Retry};

/// The state DescribeGroups gives a group the coordinator does not know (Kafka's `Dead`).
const DEAD: &str = "Dead";

/// `keel groups ...`
#[derive(Subcommand, Debug)]
pub enum GroupsCommand {
    /// Every consumer group of the cluster, with its state.
    List {
        #[arg(long)]
        json: bool,
    },
    /// A group's state and members, and per partition its committed offset, the log end offset,
    /// the lag and the member that owns it.
    Describe {
        group: String,
        #[arg(long)]
        json: bool,
    },
    /// Set a group's committed offsets for a topic (the group must have no members). Prints the
    /// plan; `--execute` commits it.
    ResetOffsets {
        group: String,
        #[arg(long)]
        topic: String,
        /// Only this partition (all of the topic's when omitted).
        #[arg(long)]
        partition: Option<i32>,
        /// The log start offset.
        #[arg(long, group = "target")]
        to_earliest: bool,
        /// The log end offset (skip everything not yet read).
        #[arg(long, group = "target")]
        to_latest: bool,
        /// A fixed offset.
        #[arg(long, group = "target", value_name = "OFFSET")]
        to_offset: Option<i64>,
        /// Commit the new offsets (without it, only print them).
        #[arg(long)]
        execute: bool,
    },
    /// Delete a group without members: its metadata and committed offsets.
    Delete { group: String },
}

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Where each broker of the cluster listens (Metadata's broker list).
async fn brokers(conn: &mut Conn) -> anyhow::Result<BTreeMap<i32, String>> {
    let response: MetadataResponse = call(
        conn,
        ApiKey::Metadata,
        4,
        12,
        &MetadataRequest::default().with_topics(Some(Vec::new())),
    )
    .await?;
    Ok(response
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
        .collect())
}

/// The partitions of `topic` and where each one's leader listens.
async fn leaders(conn: &mut Conn, topic: &str) -> anyhow::Result<BTreeMap<i32, String>> {
    let response: MetadataResponse = call(
        conn,
        ApiKey::Metadata,
        4,
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(name(topic))),
        ])),
    )
    .await?;
    let brokers: BTreeMap<i32, String> = response
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
        .collect();
    let Some(t) = response.topics.first() else {
        bail!("no metadata for topic {topic}");
    };
    check(t.error_code, None, &format!("topic {topic}"))?;
    Ok(t.partitions
        .iter()
        .filter_map(|p| Some((p.partition_index, brokers.get(&p.leader_id.0)?.clone())))
        .collect())
}

/// The log start (`timestamp` -2) or end (-1) offset of each partition, from its leader.
async fn log_offsets(
    conn: &mut Conn,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let leaders = leaders(conn, topic).await?;
    let mut out = BTreeMap::new();
    for p in partitions {
        let leader = leaders
            .get(p)
            .with_context(|| format!("{topic}-{p} has no leader"))?;
        let mut lc = Connection::connect(crate::admin::network(), leader, "keel-admin").await?;
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(*p)
                    .with_timestamp(timestamp)])]);
        let response: ListOffsetsResponse =
            call(&mut lc, ApiKey::ListOffsets, 1, 9, &request).await?;
        let answer = response
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .with_context(|| format!("no ListOffsets answer for {topic}-{p}"))?;
        check(answer.error_code, None, &format!("ListOffsets {topic}-{p}"))?;
        out.insert(*p, answer.offset);
    }
    Ok(out)
}

/// A connection to `group`'s coordinator.
async fn coordinator(conn: &mut Conn, group: &str) -> anyhow::Result<Conn> {
    let response: FindCoordinatorResponse = call(
        conn,
        ApiKey::FindCoordinator,
        1,
        3,
        &FindCoordinatorRequest::default()
            .with_key(s(group))
            .with_key_type(0),
    )
    .await?;
    check(
        response.error_code,
        response.error_message.as_ref(),
        &format!("the coordinator of group {group}"),
    )?;
    let address = format!("{}:{}", response.host.as_str(), response.port);
    Connection::connect(crate::admin::network(), &address, "keel-admin")
        .await
        .with_context(|| format!("cannot reach the coordinator at {address}"))
}

/// The group's committed offsets: topic → partition → offset.
async fn committed(
    conn: &mut Conn,
    group: &str,
) -> anyhow::Result<BTreeMap<String, BTreeMap<i32, i64>>> {
    let request =
        OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(None)]); // null: every partition the group has offsets for
    let response: OffsetFetchResponse = call(conn, ApiKey::OffsetFetch, 8, 9, &request).await?;
    let g = response.groups.first().context("no OffsetFetch answer")?;
    check(g.error_code, None, &format!("offsets of group {group}"))?;
    let mut out: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for t in &g.topics {
        for p in &t.partitions {
            if p.committed_offset >= 0 {
                out.entry(t.name.to_string())
                    .or_default()
                    .insert(p.partition_index, p.committed_offset);
            }
        }
    }
    Ok(out)
}

#[derive(Serialize)]
struct ListedGroupJson {
    group: String,
    state: String,
    protocol_type: String,
    coordinator: i32,
}

#[derive(Serialize)]
struct PartitionRow {
    topic: String,
    partition: i32,
    committed_offset: Option<i64>,
    log_end_offset: i64,
    lag: Option<i64>,
    member: Option<String>,
    host: Option<String>,
    client_id: Option<String>,
}

#[derive(Serialize)]
struct DescribedJson {
    group: String,
    state: String,
    protocol: String,
    members: usize,
    partitions: Vec<PartitionRow>,
}

/// A group's state, members and per-partition offsets and lag (`keel groups describe`); Kafka's
/// "Consumer group 'x' does not exist." for a group the coordinator has no trace of (state Dead,
/// no members, no committed offsets).
async fn describe_group(conn: &mut Conn, group: &str) -> anyhow::Result<DescribedJson> {
    let mut cc = coordinator(conn, group).await?;
    let response: DescribeGroupsResponse = call(
        &mut cc,
        ApiKey::DescribeGroups,
        0,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]),
    )
    .await?;
    let described = response
        .groups
        .first()
        .context("no DescribeGroups answer")?;
    check(described.error_code, None, &format!("group {group}"))?;
    let offsets = committed(&mut cc, group).await?;
    if described.group_state.as_str() == DEAD && described.members.is_empty() && offsets.is_empty()
    {
        bail!("Consumer group '{group}' does not exist.");
    }
    // Who owns each partition (consumer protocol assignments).
    let mut owners: BTreeMap<(String, i32), (String, String, String)> = BTreeMap::new();
    for m in &described.members {
        for (topic, partitions) in assignment_partitions(&m.member_assignment) {
            for p in partitions {
                owners.insert(
                    (topic.clone(), p),
                    (
                        m.member_id.to_string(),
                        m.client_host.to_string(),
                        m.client_id.to_string(),
                    ),
                );
            }
        }
    }
    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, partitions) in &offsets {
        topics
            .entry(topic.clone())
            .or_default()
            .extend(partitions.keys());
    }
    for (topic, p) in owners.keys() {
        topics.entry(topic.clone()).or_default().push(*p);
    }
    let mut rows = Vec::new();
    for (topic, mut partitions) in topics {
        partitions.sort_unstable();
        partitions.dedup();
        let ends = log_offsets(conn, &topic, &partitions, -1).await?;
        for p in partitions {
            let committed = offsets.get(&topic).and_then(|o| o.get(&p)).copied();
            let end = ends.get(&p).copied().unwrap_or(-1);
            let owner = owners.get(&(topic.clone(), p));
            rows.push(PartitionRow {
                topic: topic.clone(),
                partition: p,
                committed_offset: committed,
                log_end_offset: end,
                lag: committed.map(|c| (end - c).max(0)),
                member: owner.map(|o| o.0.clone()),
                host: owner.map(|o| o.1.clone()),
                client_id: owner.map(|o| o.2.clone()),
            });
        }
    }
    Ok(DescribedJson {
        group: group.to_string(),
        state: described.group_state.to_string(),
        protocol: described.protocol_data.to_string(),
        members: described.members.len(),
        partitions: rows,
    })
}

pub async fn groups(bootstrap: Bootstrap, command: GroupsCommand) -> anyhow::Result<()> {
    let mut conn = connect(&bootstrap).await?;
    match command {
        GroupsCommand::List { json } => {
            let mut listed = Vec::new();
            for (id, address) in brokers(&mut conn).await? {
                let mut bc = Connection::connect(crate::admin::network(), &address, "keel-admin")
                    .await
                    .with_context(|| format!("cannot reach broker {id} at {address}"))?;
                let response: ListGroupsResponse = call(
                    &mut bc,
                    ApiKey::ListGroups,
                    4,
                    5,
                    &ListGroupsRequest::default(),
                )
                .await?;
                check(
                    response.error_code,
                    None,
                    &format!("ListGroups on broker {id}"),
                )?;
                listed.extend(response.groups.iter().map(|g| ListedGroupJson {
                    group: g.group_id.to_string(),
                    state: g.group_state.to_string(),
                    protocol_type: g.protocol_type.to_string(),
                    coordinator: id,
                }));
            }
            listed.sort_by(|a, b| a.group.cmp(&b.group));
            if json {
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                let mut rows = vec![vec![
                    "GROUP".into(),
                    "STATE".into(),
                    "PROTOCOL-TYPE".into(),
                    "COORDINATOR".into(),
                ]];
                rows.extend(listed.iter().map(|g| {
                    vec![
                        g.group.clone(),
                        g.state.clone(),
                        g.protocol_type.clone(),
                        g.coordinator.to_string(),
                    ]
                }));
                print!("{}", table(&rows));
            }
        }
        GroupsCommand::Describe { group, json } => {
            let mut retry = Retry::new(&bootstrap);
            let out = loop {
                match describe_group(&mut conn, &group).await {
                    Err(e) if retry.again_after(&e).await => continue,
                    other => break retry.finish(other)?,
                }
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!(
                    "group {} is {} with {} member(s), protocol {}",
                    out.group,
                    out.state,
                    out.members,
                    if out.protocol.is_empty() {
                        "-"
                    } else {
                        &out.protocol
                    }
                );
                let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
                let num = |v: Option<i64>| v.map_or("-".into(), |v| v.to_string());
                let mut table_rows = vec![[
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID",
                ]
                .iter()
                .map(|h| h.to_string())
                .collect::<Vec<_>>()];
                table_rows.extend(out.partitions.iter().map(|r| {
                    vec![
                        r.topic.clone(),
                        r.partition.to_string(),
                        num(r.committed_offset),
                        r.log_end_offset.to_string(),
                        num(r.lag),
                        dash(&r.member),
                        dash(&r.host),
                        dash(&r.client_id),
                    ]
                }));
                print!("{}", table(&table_rows));
            }
        }
        GroupsCommand::ResetOffsets {
            group,
            topic,
            partition,
            to_earliest,
            to_latest,
            to_offset,
            execute,
        } => {
            if !to_earliest && !to_latest && to_offset.is_none() {
                bail!("say where to: --to-earliest, --to-latest or --to-offset N");
            }
            let partitions: Vec<i32> = match partition {
                Some(p) => vec![p],
                None => leaders(&mut conn, &topic).await?.keys().copied().collect(),
            };
            if partitions.is_empty() {
                bail!("topic {topic} has no partitions with a leader");
            }
            let starts = log_offsets(&mut conn, &topic, &partitions, -2).await?;
            let ends = log_offsets(&mut conn, &topic, &partitions, -1).await?;
            let target: BTreeMap<i32, i64> = partitions
                .iter()
                .map(|p| {
                    let (start, end) = (starts[p], ends[p]);
                    let offset = if to_earliest {
                        start
                    } else if to_latest {
                        end
                    } else {
                        to_offset.unwrap_or(start).clamp(start, end)
                    };
                    (*p, offset)
                })
                .collect();
            let mut rows = vec![vec![
                "TOPIC".into(),
                "PARTITION".into(),
                "NEW-OFFSET".into(),
            ]];
            rows.extend(
                target
                    .iter()
                    .map(|(p, o)| vec![topic.clone(), p.to_string(), o.to_string()]),
            );
            print!("{}", table(&rows));
            if !execute {
                println!("(dry run: add --execute to commit these offsets)");
                return Ok(());
            }
            let request = OffsetCommitRequest::default()
                .with_group_id(GroupId(s(group.clone())))
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(s(""))
                .with_retention_time_ms(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(name(&topic))
                    .with_partitions(
                        target
                            .iter()
                            .map(|(p, o)| {
                                OffsetCommitRequestPartition::default()
                                    .with_partition_index(*p)
                                    .with_committed_offset(*o)
                                    .with_committed_leader_epoch(-1)
                            })
                            .collect(),
                    )]);
            let mut retry = Retry::new(&bootstrap);
            loop {
                let attempt = async {
                    let mut cc = coordinator(&mut conn, &group).await?;
                    let response: OffsetCommitResponse =
                        call(&mut cc, ApiKey::OffsetCommit, 2, 9, &request).await?;
                    for t in &response.topics {
                        for p in &t.partitions {
                            if p.error_code == keel_wire::ResponseError::UnknownMemberId.code() {
                                bail!("group {group} has active members: stop its consumers first");
                            }
                            check(
                                p.error_code,
                                None,
                                &format!("commit {}-{}", t.name.as_str(), p.partition_index),
                            )?;
                        }
                    }
                    Ok(())
                }
                .await;
                match attempt {
                    Err(e) if retry.again_after(&e).await => continue,
                    other => break retry.finish(other)?,
                }
            }
            println!("committed the new offsets of group {group}");
        }
        GroupsCommand::Delete { group } => {
            let mut retry = Retry::new(&bootstrap);
            loop {
                let attempt = async {
                    let mut cc = coordinator(&mut conn, &group).await?;
                    let request = DeleteGroupsRequest::default()
                        .with_groups_names(vec![GroupId(s(group.clone()))]);
                    let response: DeleteGroupsResponse =
                        call(&mut cc, ApiKey::DeleteGroups, 0, 2, &request).await?;
                    let result = response.results.first().context("no DeleteGroups answer")?;
                    check(result.error_code, None, &format!("delete group {group}"))
                }
                .await;
                match attempt {
                    Err(e) if retry.again_after(&e).await => continue,
                    other => break retry.finish(other)?,
                }
            }
            println!("deleted group {group}");
        }
    }
    Ok(())
}
