//! The broker's channel to the controller for requests that are not the lifecycle's or the
//! metadata fetch's: AlterPartition, and admin requests forwarded from clients (CreateTopics,
//! DeleteTopics, CreatePartitions, IncrementalAlterConfigs, ElectLeaders).
//!
//! One connection, one request at a time (a Kafka connection answers in order anyway),
//! reconnected on the next call after any failure; voters are tried in turn.

use keel_wire::kafka_protocol::messages::ApiKey;
use keel_wire::kafka_protocol::protocol::{Decodable, Encodable};
use std::sync::Arc;
use tokio::sync::Mutex;

use crate::client::{ClientError, Connection};
use crate::net::{BoxStream, Network};

/// How long one controller call may take before the connection is dropped.
pub const CONTROLLER_CALL_TIMEOUT_MS: u64 = 30_000;

/// The broker-to-controller request channel.
pub struct ControllerChannel {
    network: Arc<dyn Network>,
    voters: Vec<String>,
    client_id: String,
    connection: Mutex<Option<Connection<BoxStream>>>,
}

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
        }
    }

    async fn connect(&self) -> Result<Connection<BoxStream>, ClientError> {
        let mut last = None;
        for voter in &self.voters {
            match Connection::connect(self.network.as_ref(), voter, &self.client_id).await {
                Ok(connection) => return Ok(connection),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(ClientError::Closed))
    }

    /// Sends `request` at the highest version in `min..=max` the controller serves.
    pub async fn call<Req: Encodable, Resp: Decodable>(
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
    pub async fn forward<Req: Encodable, Resp: Decodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.call_with(api_key, |c| c.version(api_key, version, version), request)
            .await
    }

    async fn call_with<Req: Encodable, Resp: Decodable>(
        &self,
        api_key: ApiKey,
        pick: impl Fn(&Connection<BoxStream>) -> Result<i16, ClientError>,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        let mut slot = self.connection.lock().await;
        if slot.is_none() {
            *slot = Some(self.connect().await?);
        }
        let connection = slot.as_mut().expect("connected above");
        let version = pick(connection)?;
        let call = connection.call_version(api_key, version, request);
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
        if result.is_err() {
            *slot = None;
        }
        result
    }
}
