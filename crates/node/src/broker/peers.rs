//! Connections from this broker to the other brokers for the transaction coordinator's calls
//! (AddPartitionsToTxn verification, WriteTxnMarkers): one cached connection per broker over the
//! inter-broker listener, used by one call at a time and replaced after any failure. Replication
//! has its own connections (`cluster::fetcher`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use keel_wire::kafka_protocol::messages::ApiKey;
use keel_wire::kafka_protocol::protocol::{Decodable, Encodable};

use super::Broker;
use crate::client::Connection;
use crate::net::BoxStream;

type Slot = Arc<tokio::sync::Mutex<Option<Connection<BoxStream>>>>;

/// How long a call waits for its answer (a stopped or partitioned peer must not hold the
/// calls behind it forever); markers wait up to 30 s for acks=all on the other side.
const PEER_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(40);

/// The cached connections, by broker id.
#[derive(Default)]
pub struct PeerClients {
    slots: Mutex<HashMap<i32, Slot>>,
}

impl std::fmt::Debug for PeerClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let peers: Vec<i32> = self
            .slots
            .lock()
            .map(|s| s.keys().copied().collect())
            .unwrap_or_default();
        f.debug_struct("PeerClients")
            .field("peers", &peers)
            .finish()
    }
}

impl PeerClients {
    fn slot(&self, broker: i32) -> Slot {
        self.slots
            .lock()
            .expect("peer clients lock poisoned")
            .entry(broker)
            .or_default()
            .clone()
    }
}

impl Broker {
    /// Sends `request` to broker `peer` at the highest version of `api` in `min..=max` both
    /// serve, over its inter-broker listener endpoint, reusing the cached connection.
    pub async fn call_peer<Req: Encodable, Resp: Decodable>(
        &self,
        peer: i32,
        api: ApiKey,
        (min, max): (i16, i16),
        request: &Req,
    ) -> anyhow::Result<Resp> {
        let slot = self.peers.slot(peer);
        let mut connection = slot.lock().await;
        if connection.is_none() {
            let listener = &self.config.inter_broker_listener_name;
            let (host, port) = self
                .broker_endpoint_on(peer, listener)
                .ok_or_else(|| anyhow::anyhow!("broker {peer} has no {listener} endpoint"))?;
            let client_id = format!("keel-broker-{}", self.node_id());
            *connection = Some(
                Connection::connect(
                    self.inter_broker_network().as_ref(),
                    &format!("{host}:{port}"),
                    &client_id,
                )
                .await?,
            );
        }
        let open = connection.as_mut().expect("connected above");
        let call = async {
            let version = open.version(api, min, max)?;
            open.call_version(api, version, request).await
        };
        let result = match tokio::time::timeout(PEER_CALL_TIMEOUT, call).await {
            Ok(result) => result.map_err(anyhow::Error::from),
            Err(_) => Err(anyhow::anyhow!(
                "broker {peer} did not answer {api:?} within {PEER_CALL_TIMEOUT:?}"
            )),
        };
        if result.is_err() {
            // A failed call leaves the connection in an unknown state: start over next time.
            *connection = None;
        }
        result
    }
}
