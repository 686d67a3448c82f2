//! A Kafka protocol client connection for Keel's own outgoing traffic: follower fetches and
//! broker-to-controller RPCs (in the cluster), and the `keel bench` load generator.
//!
//! One request at a time per connection, answered in order, like a Kafka broker serves a
//! connection. API versions are negotiated once with ApiVersions; callers ask for the highest
//! version both sides serve within the range they can build.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::BytesMut;
use keel_wire::client::{decode_response, encode_request, ResponseDecodeError};
use keel_wire::frame::{self, FrameError};
use keel_wire::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use keel_wire::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::net::{BoxStream, Network};
use crate::security::sasl::ClientMechanism;

/// Largest response this client accepts (a fetch can be large).
pub const CLIENT_RESPONSE_MAX_BYTES: usize = 256 * 1024 * 1024;

/// Why a call failed. Every variant leaves the connection unusable except `NoCommonVersion`.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed by the peer")]
    Closed,
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Decode(#[from] ResponseDecodeError),
    #[error("cannot encode request: {0:#}")]
    Encode(anyhow::Error),
    #[error("the peer serves no version of {api_key:?} in {min}..={max}")]
    NoCommonVersion { api_key: ApiKey, min: i16, max: i16 },
    #[error("ApiVersions failed with error code {0}")]
    ApiVersions(i16),
    #[error("SASL authentication failed: {0}")]
    Authentication(String),
    #[error("the controller refused the forwarded request: error code {0}")]
    Envelope(i16),
    #[error(
        "the peer answered with TLS: this listener is SSL or SASL_SSL (give the client \
         security.protocol=SSL or SASL_SSL and its ssl.* settings, e.g. keel --command-config FILE)"
    )]
    TlsPeer,
}

/// Kafka's `socket.connection.setup.timeout.ms` default: how long connecting and negotiating
/// versions may take.
pub const CONNECTION_SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A client connection over any byte stream.
#[derive(Debug)]
pub struct Connection<S> {
    stream: S,
    buffer: BytesMut,
    next_correlation_id: i32,
    client_id: String,
    /// The peer's served ranges, once negotiated.
    versions: BTreeMap<i16, (i16, i16)>,
    /// The SASL mechanism this connection authenticated with, and when to re-authenticate
    /// (KIP-368: before the session the server granted ends).
    sasl: Option<(Arc<dyn ClientMechanism>, Option<tokio::time::Instant>)>,
}

impl Connection<BoxStream> {
    /// Connects to `addr` (`host:port`) over `network` and negotiates versions, within
    /// [`CONNECTION_SETUP_TIMEOUT`] (a peer that accepts but never answers — a stopped process,
    /// a partitioned host — must not hold the caller forever).
    pub async fn connect(
        network: &dyn Network,
        addr: &str,
        client_id: &str,
    ) -> Result<Self, ClientError> {
        let setup = async {
            let stream = network.connect(addr).await?;
            let mut connection = Connection::new(stream, client_id);
            connection.negotiate().await?;
            if let Some(mechanism) = network.sasl() {
                connection.authenticate(mechanism).await?;
            }
            Ok(connection)
        };
        match tokio::time::timeout(CONNECTION_SETUP_TIMEOUT, setup).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("connection setup to {addr} took longer than {CONNECTION_SETUP_TIMEOUT:?}"),
            ))),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    pub fn new(stream: S, client_id: &str) -> Self {
        Connection {
            stream,
            buffer: BytesMut::with_capacity(64 * 1024),
            next_correlation_id: 0,
            client_id: client_id.to_string(),
            versions: BTreeMap::new(),
            sasl: None,
        }
    }

    /// Authenticates with `mechanism` (SaslHandshake v1, then SaslAuthenticate until the
    /// exchange completes) and remembers when to re-authenticate: at 85% of the session
    /// lifetime the server grants (Kafka's clients pick between 85% and 95%).
    pub async fn authenticate(
        &mut self,
        mechanism: Arc<dyn ClientMechanism>,
    ) -> Result<(), ClientError> {
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(mechanism.name()));
        let answer: SaslHandshakeResponse = self
            .send_version(ApiKey::SaslHandshake, 1, &handshake)
            .await?;
        if answer.error_code != 0 {
            let enabled: Vec<String> = answer.mechanisms.iter().map(ToString::to_string).collect();
            return Err(ClientError::Authentication(format!(
                "the server refused mechanism {} (error {}; it enables {})",
                mechanism.name(),
                answer.error_code,
                enabled.join(", ")
            )));
        }
        let version = self.version(ApiKey::SaslAuthenticate, 0, 2)?;
        let mut exchange = mechanism.start();
        let mut token = Some(exchange.initial().map_err(ClientError::Authentication)?);
        let mut lifetime_ms = 0;
        while let Some(bytes) = token.take() {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(bytes.into());
            let answer: SaslAuthenticateResponse = self
                .send_version(ApiKey::SaslAuthenticate, version, &request)
                .await?;
            if answer.error_code != 0 {
                return Err(ClientError::Authentication(format!(
                    "{} (error {})",
                    answer.error_message.as_deref().unwrap_or("no message"),
                    answer.error_code
                )));
            }
            lifetime_ms = answer.session_lifetime_ms;
            token = exchange
                .step(&answer.auth_bytes)
                .map_err(ClientError::Authentication)?;
        }
        let reauth_at = (lifetime_ms > 0).then(|| {
            tokio::time::Instant::now()
                + std::time::Duration::from_millis(
                    u64::try_from(lifetime_ms).unwrap_or(0) * 85 / 100,
                )
        });
        self.sasl = Some((mechanism, reauth_at));
        Ok(())
    }

    /// Re-authenticates on this connection if its session is about to end.
    async fn reauthenticate_if_due(&mut self) -> Result<(), ClientError> {
        let due = matches!(&self.sasl, Some((_, Some(at))) if tokio::time::Instant::now() >= *at);
        if due {
            let (mechanism, _) = self.sasl.take().expect("checked above");
            self.authenticate(mechanism).await?;
        }
        Ok(())
    }

    /// Asks the peer which versions it serves (ApiVersions v3, falling back to v0).
    pub async fn negotiate(&mut self) -> Result<(), ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("keel"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response: ApiVersionsResponse =
            self.call_version(ApiKey::ApiVersions, 3, &request).await?;
        if response.error_code != 0 {
            response = self.call_version(ApiKey::ApiVersions, 0, &request).await?;
        }
        if response.error_code != 0 {
            return Err(ClientError::ApiVersions(response.error_code));
        }
        self.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }

    /// The highest version of `api_key` in `min..=max` that the peer serves.
    pub fn version(&self, api_key: ApiKey, min: i16, max: i16) -> Result<i16, ClientError> {
        let (peer_min, peer_max) = self
            .versions
            .get(&(api_key as i16))
            .copied()
            .ok_or(ClientError::NoCommonVersion { api_key, min, max })?;
        let version = max.min(peer_max);
        if version < min.max(peer_min) {
            return Err(ClientError::NoCommonVersion { api_key, min, max });
        }
        Ok(version)
    }

    /// Sends `request` at `version` and waits for its response (re-authenticating first when
    /// the SASL session is about to end).
    pub async fn call_version<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.reauthenticate_if_due().await?;
        self.send_version(api_key, version, request).await
    }

    async fn send_version<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let bytes = encode_request(api_key, version, correlation_id, &self.client_id, request)
            .map_err(ClientError::Encode)?;
        self.write_frame(&bytes).await?;
        let frame = self.read_frame().await?;
        Ok(decode_response(api_key, version, correlation_id, frame)?)
    }

    /// Sends a request frame built by `build` from the next correlation id (a Keel RPC, see
    /// `keel_wire::keel_rpc`) and returns that id with the response frame (without its size
    /// prefix).
    pub async fn call_raw(
        &mut self,
        build: impl FnOnce(i32) -> bytes::Bytes,
    ) -> Result<(i32, bytes::Bytes), ClientError> {
        self.reauthenticate_if_due().await?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        self.write_frame(&build(correlation_id)).await?;
        let frame = self.read_frame().await?;
        Ok((correlation_id, frame))
    }

    /// Writes one whole request frame and flushes it. The flush is what puts it on the wire
    /// over TLS: tokio-rustls's `poll_write` answers `Ready(n)` once rustls has taken the bytes,
    /// even when the socket write under it returned `Pending` (e.g. because the task's
    /// cooperative budget was used up reading the previous, large answer), and those bytes then
    /// wait in rustls until the next write or flush. A request left there is never answered and
    /// `read_frame` waits forever: `keel bench --consumers 2` stalled over SASL_SSL (issue 21).
    async fn write_frame(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await?;
        Ok(())
    }

    async fn read_frame(&mut self) -> Result<bytes::Bytes, ClientError> {
        loop {
            if crate::security::tls::record_type(&self.buffer).is_some() {
                return Err(ClientError::TlsPeer);
            }
            if let Some(frame) = frame::take_frame(&mut self.buffer, CLIENT_RESPONSE_MAX_BYTES)? {
                return Ok(frame);
            }
            self.buffer
                .reserve(frame::missing_bytes(&self.buffer).max(64 * 1024));
            if self.stream.read_buf(&mut self.buffer).await? == 0 {
                return Err(ClientError::Closed);
            }
        }
    }

    /// Sends a request whose response is never sent (Produce with acks=0).
    pub async fn send_only<Req: Encodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<(), ClientError> {
        self.reauthenticate_if_due().await?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let bytes = encode_request(api_key, version, correlation_id, &self.client_id, request)
            .map_err(ClientError::Encode)?;
        self.write_frame(&bytes).await
    }
}
