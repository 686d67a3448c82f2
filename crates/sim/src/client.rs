//! Simulated Kafka clients: they speak the Kafka protocol to the brokers over the simulated
//! network (as any client would — metadata, produce with `acks=all` or `acks=1`, fetch), and
//! record what they were told in the [`Oracle`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use keel_log::batch::BatchIter;
use keel_log::plain_batch::{build_batch, decode_records};
use keel_node::client::Connection;
use keel_node::net::{BoxStream, Network};
use keel_wire::kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use keel_wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use keel_wire::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

use crate::net::SimNetwork;
use crate::scenario::ElectKind;

/// A topic partition.
pub type Tp = (String, i32);

/// How long one produce request may wait for `acks=all` at the broker.
const PRODUCE_TIMEOUT_MS: i32 = 5_000;
/// Back-off between retries of a failed request.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// An acknowledged record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub value: Bytes,
    /// Acknowledged under `acks=all`.
    pub acks_all: bool,
    /// World time of the acknowledgement, microseconds.
    pub at_us: u64,
}

/// A client-side violation: something a consumer saw that must never happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientViolation {
    pub property: &'static str,
    pub detail: String,
}

/// What the clients were told.
#[derive(Debug, Default)]
pub struct Oracle {
    /// Acknowledged records by partition and offset.
    pub acked: BTreeMap<Tp, BTreeMap<i64, Acked>>,
    /// Records consumed, by partition and offset.
    pub consumed: BTreeMap<Tp, BTreeMap<i64, Bytes>>,
    /// The highest high watermark each partition reported to a consumer.
    pub hwm_seen: BTreeMap<Tp, i64>,
    pub violations: Vec<ClientViolation>,
    /// Produce requests that were not acknowledged (errors or timeouts).
    pub failed_produces: u64,
    /// What transactional producers and read_committed consumers were told.
    pub txns: crate::txn::TxnOracle,
    next_value: u64,
}

impl Oracle {
    /// Acknowledged `acks=all` records of `tp`.
    pub fn acked_all(&self, tp: &Tp) -> impl Iterator<Item = (i64, &Acked)> {
        self.acked
            .get(tp)
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(|(_, a)| a.acks_all)
            .map(|(o, a)| (*o, a))
    }
}

/// Records that a consumer read `value` at `offset` of `tp` into `read` (its reads of that
/// partition); a value other than the one read there before is a violation. `how` qualifies
/// the read in the violation (e.g. ` (read_committed)`).
pub(crate) fn note_read(
    read: &mut BTreeMap<i64, Bytes>,
    violations: &mut Vec<ClientViolation>,
    tp: &Tp,
    offset: i64,
    value: Bytes,
    how: &str,
) {
    match read.get(&offset) {
        Some(before) if *before != value => violations.push(ClientViolation {
            property: "consumed records never change",
            detail: format!(
                "{}-{} offset {offset}{how}: consumed {:?}, earlier {:?}",
                tp.0,
                tp.1,
                String::from_utf8_lossy(&value),
                String::from_utf8_lossy(before)
            ),
        }),
        Some(_) => {}
        None => {
            read.insert(offset, value);
        }
    }
}

/// The oracle shared between the client tasks and the world.
pub type SharedOracle = Arc<Mutex<Oracle>>;

pub fn lock(oracle: &SharedOracle) -> MutexGuard<'_, Oracle> {
    oracle.lock().unwrap_or_else(|e| e.into_inner())
}

/// A simulated client: connections to brokers by id, and the leaders it last learned.
pub struct Client {
    net: SimNetwork,
    /// Broker id → address, for every broker of the cluster (the bootstrap list).
    bootstrap: Vec<(i32, String)>,
    connections: BTreeMap<i32, Connection<BoxStream>>,
    leaders: BTreeMap<Tp, i32>,
    oracle: SharedOracle,
    now_us: Arc<dyn Fn() -> u64 + Send + Sync>,
    name: String,
}

impl Client {
    pub fn new(
        net: SimNetwork,
        bootstrap: Vec<(i32, String)>,
        oracle: SharedOracle,
        now_us: Arc<dyn Fn() -> u64 + Send + Sync>,
        name: &str,
    ) -> Client {
        Client {
            net,
            bootstrap,
            connections: BTreeMap::new(),
            leaders: BTreeMap::new(),
            oracle,
            now_us,
            name: name.to_string(),
        }
    }

    /// The client's name (its connections' source in the trace).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// World time, microseconds.
    pub(crate) fn now(&self) -> u64 {
        (self.now_us)()
    }

    /// The ids of the brokers in the bootstrap list.
    pub(crate) fn broker_ids(&self) -> Vec<i32> {
        self.bootstrap.iter().map(|(id, _)| *id).collect()
    }

    pub(crate) fn oracle(&self) -> &SharedOracle {
        &self.oracle
    }

    /// Forgets the leader of `tp` (it is looked up again before the next request).
    pub(crate) fn forget_leader(&mut self, tp: &Tp) {
        self.leaders.remove(tp);
    }

    async fn connection(&mut self, broker: i32) -> Option<&mut Connection<BoxStream>> {
        if !self.connections.contains_key(&broker) {
            let addr = self
                .bootstrap
                .iter()
                .find(|(id, _)| *id == broker)?
                .1
                .clone();
            let net: &dyn Network = &self.net;
            let connected = tokio::time::timeout(
                Duration::from_secs(5),
                Connection::connect(net, &addr, &self.name),
            )
            .await;
            match connected {
                Ok(Ok(c)) => {
                    self.connections.insert(broker, c);
                }
                _ => return None,
            }
        }
        self.connections.get_mut(&broker)
    }

    /// Sends a request to `broker`; on any failure the connection is dropped.
    pub(crate) async fn call<Req, Resp>(
        &mut self,
        broker: i32,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Option<Resp>
    where
        Req: keel_wire::kafka_protocol::protocol::Encodable,
        Resp: keel_wire::kafka_protocol::protocol::Decodable,
    {
        let connection = self.connection(broker).await?;
        let answer = tokio::time::timeout(
            Duration::from_millis(PRODUCE_TIMEOUT_MS as u64 + 10_000),
            connection.call_version(api_key, version, request),
        )
        .await;
        match answer {
            Ok(Ok(response)) => Some(response),
            _ => {
                self.connections.remove(&broker);
                None
            }
        }
    }

    /// Any broker that answers a metadata request for `topic`, with its answer.
    async fn metadata(&mut self, topic: &str) -> Option<MetadataResponse> {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
            ]))
            .with_allow_auto_topic_creation(false);
        let ids: Vec<i32> = self.bootstrap.iter().map(|(id, _)| *id).collect();
        // Start with a different broker each time, so a dead one is not asked first forever.
        let start = ((self.now_us)() / 1_000) as usize % ids.len().max(1);
        for i in 0..ids.len() {
            let id = ids[(start + i) % ids.len()];
            if let Some(r) = self
                .call::<_, MetadataResponse>(id, ApiKey::Metadata, 12, &request)
                .await
            {
                return Some(r);
            }
        }
        None
    }

    /// The leader of `tp` by metadata (refreshed).
    pub async fn refresh_leader(&mut self, tp: &Tp) -> Option<i32> {
        let response = self.metadata(&tp.0).await?;
        let topic = response.topics.first()?;
        let partition = topic
            .partitions
            .iter()
            .find(|p| p.partition_index == tp.1)?;
        let leader = partition.leader_id.0;
        if leader < 0 {
            self.leaders.remove(tp);
            return None;
        }
        self.leaders.insert(tp.clone(), leader);
        Some(leader)
    }

    pub(crate) async fn leader(&mut self, tp: &Tp) -> Option<i32> {
        match self.leaders.get(tp) {
            Some(l) => Some(*l),
            None => self.refresh_leader(tp).await,
        }
    }

    /// Produces one record, retrying until acknowledged or `deadline_us` (world time).
    /// Returns the offset it was acknowledged at.
    pub async fn produce(&mut self, tp: &Tp, acks_all: bool, deadline_us: u64) -> Option<i64> {
        let value = {
            let mut oracle = lock(&self.oracle);
            oracle.next_value += 1;
            Bytes::from(format!("{}/{}#{}", tp.0, tp.1, oracle.next_value))
        };
        loop {
            if (self.now_us)() >= deadline_us {
                lock(&self.oracle).failed_produces += 1;
                return None;
            }
            let Some(leader) = self.leader(tp).await else {
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            };
            let batch = Bytes::from(build_batch(
                &[(None, value.as_ref())],
                (self.now_us)() as i64 / 1_000,
            ));
            let request = ProduceRequest::default()
                .with_acks(if acks_all { -1 } else { 1 })
                .with_timeout_ms(PRODUCE_TIMEOUT_MS)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic_name(&tp.0))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(tp.1)
                        .with_records(Some(batch))])]);
            let response: Option<ProduceResponse> =
                self.call(leader, ApiKey::Produce, 9, &request).await;
            let outcome = response.and_then(|r| {
                let p = r.responses.first()?.partition_responses.first()?;
                Some((p.error_code, p.base_offset))
            });
            match outcome {
                Some((0, offset)) => {
                    let at_us = (self.now_us)();
                    let mut oracle = lock(&self.oracle);
                    oracle.acked.entry(tp.clone()).or_default().insert(
                        offset,
                        Acked {
                            value,
                            acks_all,
                            at_us,
                        },
                    );
                    return Some(offset);
                }
                _ => {
                    self.leaders.remove(tp);
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
            }
        }
    }

    /// Reads `tp` from offset 0 up to the high watermark its leader reports, recording every
    /// record and the high watermark; a record that differs from one consumed before at the
    /// same offset, or a high watermark below one seen before, is a violation. `false` if the
    /// leader could not be read before `deadline_us`.
    pub async fn consume(&mut self, tp: &Tp, deadline_us: u64) -> bool {
        let mut next = 0i64;
        let mut target: Option<i64> = None;
        loop {
            if (self.now_us)() >= deadline_us {
                return false;
            }
            let Some(leader) = self.leader(tp).await else {
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            };
            let request = fetch_request(tp, next, 0);
            let response: Option<FetchResponse> =
                self.call(leader, ApiKey::Fetch, 12, &request).await;
            let Some(response) = response else {
                self.leaders.remove(tp);
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            };
            let Some(p) = response
                .responses
                .first()
                .and_then(|t| t.partitions.first())
            else {
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            };
            if response.error_code != 0 || p.error_code != 0 {
                self.leaders.remove(tp);
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            }
            let hwm = p.high_watermark;
            let mut records = Vec::new();
            if let Some(bytes) = &p.records {
                for batch in BatchIter::new(bytes) {
                    let Ok(batch) = batch else { break };
                    if let Some(decoded) = decode_records(batch.bytes) {
                        records.extend(
                            decoded
                                .into_iter()
                                .map(|r| (r.offset, Bytes::from(r.value))),
                        );
                    }
                }
            }
            let mut oracle = lock(&self.oracle);
            let seen = oracle.hwm_seen.get(tp).copied().unwrap_or(0);
            if hwm < seen {
                oracle.violations.push(ClientViolation {
                    property: "high watermark never moves backward",
                    detail: format!(
                        "{}-{}: broker {leader} reported high watermark {hwm} after {seen} was seen",
                        tp.0, tp.1
                    ),
                });
            }
            oracle.hwm_seen.insert(tp.clone(), hwm.max(seen));
            let target_now = *target.get_or_insert(hwm);
            for (offset, value) in records {
                if offset >= hwm {
                    break;
                }
                let Oracle {
                    consumed,
                    violations,
                    ..
                } = &mut *oracle;
                note_read(
                    consumed.entry(tp.clone()).or_default(),
                    violations,
                    tp,
                    offset,
                    value,
                    "",
                );
                next = offset + 1;
            }
            drop(oracle);
            if next >= target_now.min(hwm) {
                return true;
            }
        }
    }

    /// Creates a topic (through any broker, which forwards to the controller); retries until
    /// created, already existing, or `deadline_us`.
    pub async fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        assignment: Option<Vec<Vec<i32>>>,
        configs: &[(String, String)],
        deadline_us: u64,
    ) -> anyhow::Result<()> {
        let mut topic = CreatableTopic::default()
            .with_name(topic_name(name))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.clone()))
                            .with_value(Some(StrBytes::from_string(v.clone())))
                    })
                    .collect(),
            );
        match assignment {
            Some(assignment) => {
                topic = topic
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_assignments(
                        assignment
                            .into_iter()
                            .enumerate()
                            .map(|(i, replicas)| {
                                CreatableReplicaAssignment::default()
                                    .with_partition_index(i as i32)
                                    .with_broker_ids(replicas.into_iter().map(BrokerId).collect())
                            })
                            .collect(),
                    );
            }
            None => {
                topic = topic
                    .with_num_partitions(partitions)
                    .with_replication_factor(replication_factor);
            }
        }
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(30_000);
        let mut last = String::from("no broker answered");
        while (self.now_us)() < deadline_us {
            for (id, _) in self.bootstrap.clone() {
                let response: Option<CreateTopicsResponse> =
                    self.call(id, ApiKey::CreateTopics, 5, &request).await;
                if let Some(t) = response.as_ref().and_then(|r| r.topics.first()) {
                    match t.error_code {
                        0 | 36 => return Ok(()), // created / TOPIC_ALREADY_EXISTS
                        code => {
                            last = format!(
                                "error {code}: {}",
                                t.error_message.as_ref().map_or("", |m| m.as_str())
                            );
                        }
                    }
                }
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
        anyhow::bail!("cannot create topic {name}: {last}")
    }

    /// Sets (`Some`) or deletes (`None`) a config of a topic (`Some(name)`) or of the cluster.
    pub async fn alter_config(
        &mut self,
        topic: Option<&str>,
        key: &str,
        value: Option<&str>,
        deadline_us: u64,
    ) -> anyhow::Result<()> {
        let (resource_type, resource_name) = match topic {
            Some(t) => (2i8, t.to_string()),
            None => (4i8, String::new()),
        };
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(resource_name))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_string(key.to_string()))
                    .with_config_operation(if value.is_some() { 0 } else { 1 })
                    .with_value(value.map(|v| StrBytes::from_string(v.to_string())))]),
        ]);
        let mut last = String::from("no broker answered");
        while (self.now_us)() < deadline_us {
            for (id, _) in self.bootstrap.clone() {
                let response: Option<IncrementalAlterConfigsResponse> = self
                    .call(id, ApiKey::IncrementalAlterConfigs, 1, &request)
                    .await;
                if let Some(res) = response.as_ref().and_then(|r| r.responses.first()) {
                    if res.error_code == 0 {
                        return Ok(());
                    }
                    last = format!(
                        "error {}: {}",
                        res.error_code,
                        res.error_message.as_ref().map_or("", |m| m.as_str())
                    );
                }
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
        anyhow::bail!("cannot alter config {key}: {last}")
    }
}

/// An operator's ElectLeaders (v2) for one partition, sent straight to the controller at
/// `controller` (as `kafka-leader-election.sh --bootstrap-controller` does); the partition's
/// error code and message.
pub async fn elect_leader(
    net: &SimNetwork,
    controller: &str,
    tp: &Tp,
    kind: ElectKind,
) -> anyhow::Result<(i16, Option<String>)> {
    use keel_wire::kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    use keel_wire::kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
    use keel_wire::keel_ext::{self, RecoveryModeField};
    let mut connection = Connection::connect(net, controller, "keel-sim-operator").await?;
    let mut partitions = TopicPartitions::default()
        .with_topic(topic_name(&tp.0))
        .with_partitions(vec![tp.1]);
    if let ElectKind::Leader(leader) = kind {
        // Keel's DesiredLeaders tagged field (v2): elect exactly this replica.
        partitions = partitions.with_unknown_tagged_field(
            keel_ext::DESIRED_LEADERS_TAG,
            keel_ext::encode_desired_leaders(&[leader]),
        );
    }
    // ElectionType: PREFERRED = 0, UNCLEAN = 1 (with a named leader, as `keel elect --leader`).
    let election_type = i8::from(!matches!(kind, ElectKind::Preferred));
    let mut request = ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_topic_partitions(Some(vec![partitions]))
        .with_timeout_ms(30_000);
    if kind == (ElectKind::Unclean { balanced: true }) {
        // Keel's RecoveryMode tagged field: a recovery this starts is Balanced.
        request = request.with_unknown_tagged_field(
            keel_ext::RECOVERY_MODE_TAG,
            keel_ext::encode_recovery_mode(RecoveryModeField::Balanced),
        );
    }
    let response: ElectLeadersResponse = tokio::time::timeout(
        Duration::from_secs(35),
        connection.call_version(ApiKey::ElectLeaders, 2, &request),
    )
    .await
    .map_err(|_| anyhow::anyhow!("ElectLeaders was not answered"))??;
    if response.error_code != 0 {
        return Ok((response.error_code, None));
    }
    let result = response
        .replica_election_results
        .iter()
        .flat_map(|t| t.partition_result.iter())
        .find(|p| p.partition_id == tp.1)
        .ok_or_else(|| anyhow::anyhow!("no result for {}-{}", tp.0, tp.1))?;
    Ok((
        result.error_code,
        result.error_message.as_ref().map(|m| m.to_string()),
    ))
}

/// An operator's AlterPartitionReassignments (v1) of `tp` to `replicas`, tried on each of
/// `controllers` until one is not a standby (as `kafka-reassign-partitions.sh
/// --bootstrap-controller` does); the partition's error code and message.
pub async fn reassign_partition(
    net: &SimNetwork,
    controllers: &[String],
    tp: &Tp,
    replicas: &[i32],
) -> anyhow::Result<(i16, Option<String>)> {
    use keel_wire::kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    use keel_wire::kafka_protocol::messages::{
        AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    };
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_allow_replication_factor_change(true)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(topic_name(&tp.0))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(tp.1)
                .with_replicas(Some(
                    replicas.iter().map(|b| BrokerId(*b)).collect(),
                ))])]);
    let not_controller = keel_wire::ResponseError::NotController.code();
    let mut last = anyhow::anyhow!("no controller");
    for controller in controllers {
        let answer = async {
            let mut connection = Connection::connect(net, controller, "keel-sim-operator").await?;
            let response: AlterPartitionReassignmentsResponse = tokio::time::timeout(
                Duration::from_secs(35),
                connection.call_version(ApiKey::AlterPartitionReassignments, 1, &request),
            )
            .await
            .map_err(|_| anyhow::anyhow!("AlterPartitionReassignments was not answered"))??;
            if response.error_code != 0 {
                return Ok::<_, anyhow::Error>((response.error_code, None));
            }
            let result = response
                .responses
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == tp.1)
                .ok_or_else(|| anyhow::anyhow!("no result for {}-{}", tp.0, tp.1))?;
            Ok((
                result.error_code,
                result.error_message.as_ref().map(|m| m.to_string()),
            ))
        }
        .await;
        match answer {
            Ok((code, _)) if code == not_controller => {}
            Ok(answer) => return Ok(answer),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A consumer's Fetch (v12) of `tp` from `offset`, answered at once, at `isolation_level`
/// (0 read_uncommitted, 1 read_committed).
pub(crate) fn fetch_request(tp: &Tp, offset: i64, isolation_level: i8) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(16 * 1024 * 1024)
        .with_isolation_level(isolation_level)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(&tp.0))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(tp.1)
                .with_fetch_offset(offset)
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(4 * 1024 * 1024)])])
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}
