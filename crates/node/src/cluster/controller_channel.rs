//! The broker's channel to the controller for requests that are not the lifecycle's or the
//! metadata fetch's: AlterPartition, and admin requests forwarded from clients (CreateTopics,
//! DeleteTopics, CreatePartitions, IncrementalAlterConfigs, ElectLeaders).
//!
//! One connection, one request at a time (a Kafka connection answers in order anyway),
//! reconnected on the next call after any failure. Voters are tried in turn, starting with the
//! last one that answered as the active controller; an answer of `NOT_CONTROLLER` (a standby,
//! or a leader that lost its quorum) moves on to the next voter and sends the request again,
//! once per voter. Lifecycle and metadata connections pick their controller through the same
//! order ([`ControllerChannel::candidates`]).

use keel_wire::kafka_protocol::messages::{
    AllocateProducerIdsResponse, AlterPartitionResponse, ApiKey, CreatePartitionsResponse,
    CreateTopicsResponse, DeleteTopicsResponse, ElectLeadersResponse, EnvelopeRequest,
    EnvelopeResponse, IncrementalAlterConfigsResponse,
};
use keel_wire::kafka_protocol::protocol::{Decodable, Encodable};
use keel_wire::ResponseError;
use std::sync::Arc;
use tokio::sync::Mutex;

use crate::client::{ClientError, Connection};
use crate::net::{BoxStream, Network};

/// How long one controller call may take before the connection is dropped (the controller
/// answers within its commit timeout, 5 s, or says NOT_CONTROLLER).
pub const CONTROLLER_CALL_TIMEOUT_MS: u64 = 10_000;

/// The broker-to-controller request channel.
pub struct ControllerChannel {
    network: Arc<dyn Network>,
    voters: Vec<String>,
    client_id: String,
    /// The connection and the index of the voter it goes to.
    connection: Mutex<Option<(usize, Connection<BoxStream>)>>,
    /// The voter to try first (the last one that acted as the active controller).
    preferred: std::sync::Mutex<usize>,
    /// When a controller's refusal of this node's credentials was last logged.
    credentials_refused_logged: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// A controller answer that may say "not the active controller".
pub trait ControllerAnswer {
    /// Whether the answer is `NOT_CONTROLLER` (at the top or for any item).
    fn not_controller(&self) -> bool;
}

const NOT_CONTROLLER: i16 = ResponseError::NotController.code();

impl ControllerAnswer for AlterPartitionResponse {
    fn not_controller(&self) -> bool {
        self.error_code == NOT_CONTROLLER
    }
}

impl ControllerAnswer for AllocateProducerIdsResponse {
    fn not_controller(&self) -> bool {
        self.error_code == NOT_CONTROLLER
    }
}

impl ControllerAnswer for CreateTopicsResponse {
    fn not_controller(&self) -> bool {
        self.topics.iter().any(|t| t.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for DeleteTopicsResponse {
    fn not_controller(&self) -> bool {
        self.responses
            .iter()
            .any(|t| t.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for CreatePartitionsResponse {
    fn not_controller(&self) -> bool {
        self.results.iter().any(|t| t.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for IncrementalAlterConfigsResponse {
    fn not_controller(&self) -> bool {
        self.responses
            .iter()
            .any(|r| r.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for ElectLeadersResponse {
    fn not_controller(&self) -> bool {
        // v0 has no top-level error code: look at the partitions too.
        self.error_code == NOT_CONTROLLER
            || self
                .replica_election_results
                .iter()
                .flat_map(|t| t.partition_result.iter())
                .any(|p| p.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for keel_wire::kafka_protocol::messages::AlterPartitionReassignmentsResponse {
    fn not_controller(&self) -> bool {
        self.error_code == NOT_CONTROLLER
    }
}

impl ControllerAnswer for keel_wire::kafka_protocol::messages::AlterClientQuotasResponse {
    fn not_controller(&self) -> bool {
        self.entries.iter().any(|e| e.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for keel_wire::kafka_protocol::messages::AlterUserScramCredentialsResponse {
    fn not_controller(&self) -> bool {
        self.results.iter().any(|r| r.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for keel_wire::kafka_protocol::messages::CreateAclsResponse {
    fn not_controller(&self) -> bool {
        self.results.iter().any(|r| r.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for keel_wire::kafka_protocol::messages::DeleteAclsResponse {
    fn not_controller(&self) -> bool {
        self.filter_results
            .iter()
            .any(|r| r.error_code == NOT_CONTROLLER)
    }
}

impl ControllerAnswer for EnvelopeResponse {
    fn not_controller(&self) -> bool {
        self.error_code == NOT_CONTROLLER
    }
}

/// The client a request is forwarded for in an Envelope.
#[derive(Debug, Clone, Copy)]
pub struct ForwardedFor<'a> {
    pub principal: &'a crate::security::KafkaPrincipal,
    pub client_id: &'a str,
    /// The client's address (`ip:port` as the connection's peer); a peer that is not an
    /// address (the in-memory network) is sent as 0.0.0.0.
    pub peer: &'a str,
}

impl ForwardedFor<'_> {
    fn address(&self) -> bytes::Bytes {
        let ip = self
            .peer
            .parse::<std::net::SocketAddr>()
            .map(|a| a.ip())
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        match ip {
            std::net::IpAddr::V4(v4) => bytes::Bytes::copy_from_slice(&v4.octets()),
            std::net::IpAddr::V6(v6) => bytes::Bytes::copy_from_slice(&v6.octets()),
        }
    }
}

/// How often a refused-credentials error is logged while it lasts.
const CREDENTIALS_REFUSED_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for ControllerChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerChannel")
            .field("voters", &self.voters)
            .finish_non_exhaustive()
    }
}

impl ControllerChannel {
    /// The controllers' addresses.
    pub fn voters(&self) -> &[String] {
        &self.voters
    }

    /// A channel to the controllers at `voters` (`host:port`).
    pub fn new(network: Arc<dyn Network>, voters: Vec<String>, client_id: String) -> Self {
        ControllerChannel {
            network,
            voters,
            client_id,
            connection: Mutex::new(None),
            preferred: std::sync::Mutex::new(0),
            credentials_refused_logged: std::sync::Mutex::new(None),
        }
    }

    /// Says (at most once a minute) that a controller refused this node's SASL credentials: the
    /// node cannot register or follow metadata until its configuration is fixed.
    fn log_refused_credentials(&self, voter: &str, reason: &str) {
        let now = tokio::time::Instant::now();
        let mut last = self
            .credentials_refused_logged
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|at| now.duration_since(at) >= CREDENTIALS_REFUSED_LOG_INTERVAL) {
            *last = Some(now);
            tracing::error!(
                controller = %voter,
                %reason,
                "the controller refused this node's credentials (check sasl.mechanism.controller.protocol \
                 and the username/password of the controller listener's JAAS configuration)"
            );
        }
    }

    /// The index of the voter tried first.
    pub fn preferred(&self) -> usize {
        self.preferred.lock().map(|p| *p).unwrap_or(0)
    }

    /// The voters in the order to try them: the preferred one first, then the rest in turn.
    pub fn candidates(&self) -> Vec<(usize, String)> {
        let n = self.voters.len();
        let first = self.preferred();
        (0..n)
            .map(|i| (first + i) % n.max(1))
            .map(|i| (i, self.voters[i].clone()))
            .collect()
    }

    /// Voter `index` acted as the active controller: try it first from now on.
    pub fn prefer(&self, index: usize) {
        if let Ok(mut p) = self.preferred.lock() {
            *p = index;
        }
    }

    /// Voter `index` is not (or no longer) the active controller: try the next one first.
    pub fn demote(&self, index: usize) {
        if let Ok(mut p) = self.preferred.lock() {
            if *p == index && !self.voters.is_empty() {
                *p = (index + 1) % self.voters.len();
            }
        }
    }

    /// Connects to the first voter of [`ControllerChannel::candidates`] that accepts, as
    /// `client_id`; returns its index with the connection.
    pub async fn connect_as(
        &self,
        client_id: &str,
    ) -> Result<(usize, Connection<BoxStream>), ClientError> {
        let mut last = None;
        for (index, voter) in self.candidates() {
            match Connection::connect(self.network.as_ref(), &voter, client_id).await {
                Ok(connection) => return Ok((index, connection)),
                Err(e) => {
                    if let ClientError::Authentication(reason) = &e {
                        self.log_refused_credentials(&voter, reason);
                    }
                    self.demote(index);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(ClientError::Closed))
    }

    /// Sends `request` at the highest version in `min..=max` the controller serves.
    pub async fn call<Req: Encodable, Resp: Decodable + ControllerAnswer>(
        &self,
        api_key: ApiKey,
        min: i16,
        max: i16,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.call_with(api_key, |c| c.version(api_key, min, max), request)
            .await
    }

    /// Sends `request` at exactly `version` (forwarding a client's request unchanged).
    pub async fn forward<Req: Encodable, Resp: Decodable + ControllerAnswer>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.call_with(api_key, |c| c.version(api_key, version, version), request)
            .await
    }

    /// Sends `request` at exactly `version` inside Kafka's Envelope (KIP-590), naming the client
    /// it is forwarded for: the controller decides it for that principal and address and
    /// charges it to the client's `controller_mutation_rate` (KIP-599).
    ///
    /// A controller that does not serve Envelope (an older one, mid rolling upgrade) gets the
    /// request forwarded as is.
    pub async fn forward_enveloped<Req: Encodable, Resp: Decodable + ControllerAnswer>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
        client: ForwardedFor<'_>,
    ) -> Result<Resp, ClientError> {
        // The inner request's correlation id only pairs it with its answer inside the envelope.
        const INNER_CORRELATION_ID: i32 = 0;
        let inner = keel_wire::client::encode_request(
            api_key,
            version,
            INNER_CORRELATION_ID,
            client.client_id,
            request,
        )
        .map_err(ClientError::Encode)?;
        let envelope = EnvelopeRequest::default()
            .with_request_data(inner.slice(4..))
            .with_request_principal(Some(client.principal.serialize()))
            .with_client_host_address(client.address());
        let answer: EnvelopeResponse = match self.call(ApiKey::Envelope, 0, 0, &envelope).await {
            Err(ClientError::NoCommonVersion { .. }) => {
                return self.forward(api_key, version, request).await
            }
            answer => answer?,
        };
        if answer.error_code != 0 {
            return Err(ClientError::Envelope(answer.error_code));
        }
        let data = answer.response_data.ok_or(ClientError::Envelope(
            ResponseError::UnknownServerError.code(),
        ))?;
        Ok(keel_wire::client::decode_response(
            api_key,
            version,
            INNER_CORRELATION_ID,
            data,
        )?)
    }

    async fn call_with<Req: Encodable, Resp: Decodable + ControllerAnswer>(
        &self,
        api_key: ApiKey,
        pick: impl Fn(&Connection<BoxStream>) -> Result<i16, ClientError>,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        let mut slot = self.connection.lock().await;
        let mut answer = None;
        // Once per voter: a NOT_CONTROLLER answer moves on to the next one.
        for _ in 0..self.voters.len().max(1) {
            // Another channel found the active controller elsewhere: follow it.
            if slot
                .as_ref()
                .is_some_and(|(index, _)| *index != self.preferred())
            {
                *slot = None;
            }
            if slot.is_none() {
                *slot = Some(self.connect_as(&self.client_id).await?);
            }
            let (index, connection) = slot.as_mut().expect("connected above");
            let index = *index;
            let version = pick(connection)?;
            let call = connection.call_version::<Req, Resp>(api_key, version, request);
            let result = match tokio::time::timeout(
                std::time::Duration::from_millis(CONTROLLER_CALL_TIMEOUT_MS),
                call,
            )
            .await
            {
                Ok(result) => result,
                Err(_) => Err(ClientError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "controller did not answer in time",
                ))),
            };
            match result {
                Ok(response) if response.not_controller() => {
                    self.demote(index);
                    *slot = None;
                    answer = Some(response);
                }
                Ok(response) => {
                    self.prefer(index);
                    return Ok(response);
                }
                Err(e) => {
                    self.demote(index);
                    *slot = None;
                    return Err(e);
                }
            }
        }
        Ok(answer.expect("at least one attempt"))
    }
}
