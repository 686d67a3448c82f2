//! SASL authentication as Kafka does it (KIP-43, KIP-152, KIP-368): which mechanisms a listener
//! enables (`sasl.enabled.mechanisms`), each mechanism's server side ([`ServerMechanism`]) and
//! client side ([`ClientMechanism`]), the per-connection state machine ([`gate::SaslGate`]), and
//! the node's own outgoing authentication ([`client`]).
//!
//! Mechanisms: PLAIN ([`plain`]), SCRAM-SHA-256 and SCRAM-SHA-512 ([`scram`], credentials from
//! the metadata image through [`Credentials`]), OAUTHBEARER ([`oauthbearer`]). A mechanism never
//! sees the network: it turns client tokens into challenges, a principal or a failure.

pub mod client;
pub mod gate;
pub mod jaas;
pub mod oauthbearer;
pub mod plain;
pub mod scram;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use super::ListenerProps;
use crate::clock::Clock;

/// `sasl.enabled.mechanisms`.
pub const SASL_ENABLED_MECHANISMS: &str = "sasl.enabled.mechanisms";
/// `sasl.jaas.config` (read with the listener and mechanism prefix on a broker:
/// `listener.name.<listener>.<mechanism>.sasl.jaas.config`).
pub const SASL_JAAS_CONFIG: &str = "sasl.jaas.config";
/// `sasl.mechanism.inter.broker.protocol`: what brokers authenticate to each other with.
pub const SASL_MECHANISM_INTER_BROKER_PROTOCOL: &str = "sasl.mechanism.inter.broker.protocol";
/// `sasl.mechanism.controller.protocol`: what brokers and controllers authenticate to
/// controllers with.
pub const SASL_MECHANISM_CONTROLLER_PROTOCOL: &str = "sasl.mechanism.controller.protocol";
/// `connections.max.reauth.ms`: the longest a SASL session lasts before the client must
/// re-authenticate (KIP-368); 0 (default) = no limit.
pub const CONNECTIONS_MAX_REAUTH_MS: &str = "connections.max.reauth.ms";
/// `sasl.server.max.receive.size`: the largest frame accepted before authentication completes.
pub const SASL_SERVER_MAX_RECEIVE_SIZE: &str = "sasl.server.max.receive.size";
/// Kafka's default `sasl.server.max.receive.size` (512 KiB).
pub const SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT: usize = 524_288;

/// `PLAIN` (RFC 4616).
pub const PLAIN: &str = "PLAIN";
/// `SCRAM-SHA-256` (RFC 7677).
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";
/// `SCRAM-SHA-512`.
pub const SCRAM_SHA_512: &str = "SCRAM-SHA-512";
/// `OAUTHBEARER` (RFC 7628, KIP-255).
pub const OAUTHBEARER: &str = "OAUTHBEARER";
/// `GSSAPI` (Kerberos): Kafka's default mechanism, which Keel does not implement.
pub const GSSAPI: &str = "GSSAPI";

/// A SASL configuration that cannot be used, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid SASL setting {key}: {reason}")]
pub struct SaslConfigError {
    pub key: String,
    pub reason: String,
}

pub(crate) fn invalid(key: impl Into<String>, reason: impl Into<String>) -> SaslConfigError {
    SaslConfigError {
        key: key.into(),
        reason: reason.into(),
    }
}

/// A SCRAM credential as Kafka stores it (KIP-554 `UserScramCredentialRecord`): never the
/// password, only what verifies a client proof. Its `Debug` hides the salt and keys.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl From<&keel_controller::scram::ScramCredentialData> for ScramCredential {
    fn from(c: &keel_controller::scram::ScramCredentialData) -> Self {
        ScramCredential {
            salt: c.salt.clone(),
            stored_key: c.stored_key.clone(),
            server_key: c.server_key.clone(),
            iterations: c.iterations,
        }
    }
}

/// The SCRAM credentials of a metadata image (a broker's applied image, a controller's
/// committed one).
pub fn image_scram(
    image: &keel_controller::ClusterImage,
    user: &str,
    mechanism: &str,
) -> Option<ScramCredential> {
    let mechanism = keel_controller::scram::ScramMechanism::from_name(mechanism)?;
    image
        .scram_credential(user, mechanism)
        .map(ScramCredential::from)
}

/// What the server side of a mechanism needs from its node while it authenticates.
pub trait Credentials: Send + Sync + Debug {
    /// The SCRAM credential of `user` for `mechanism` (`SCRAM-SHA-256` or `SCRAM-SHA-512`).
    fn scram(&self, user: &str, mechanism: &str) -> Option<ScramCredential>;
}

/// No stored credentials (a node without a metadata image to read them from).
#[derive(Debug, Default)]
pub struct NoCredentials;

impl Credentials for NoCredentials {
    fn scram(&self, _user: &str, _mechanism: &str) -> Option<ScramCredential> {
        None
    }
}

/// Where an exchange runs: the node's stored credentials and clock.
#[derive(Debug, Clone)]
pub struct ExchangeContext {
    pub credentials: Arc<dyn Credentials>,
    pub clock: Arc<dyn Clock>,
}

/// The server side of one mechanism on one listener.
pub trait ServerMechanism: Send + Sync + Debug {
    /// The mechanism's name (`PLAIN`, ...).
    fn name(&self) -> &'static str;

    /// A new exchange with one client.
    fn start(&self, context: &ExchangeContext) -> Box<dyn ServerExchange>;
}

/// One client's exchange with a server mechanism.
pub trait ServerExchange: Send {
    /// Takes the client's next token.
    fn step(&mut self, token: &[u8]) -> Result<Step, Failure>;
}

/// What a server exchange answers a token with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A challenge; the client answers with another token.
    Challenge(Vec<u8>),
    /// Authenticated as `principal` (the principal's name, type `User`), with the last token
    /// for the client (may be empty), and when the credential itself expires (a token's
    /// expiry, wall-clock ms), if it does.
    Done {
        response: Vec<u8>,
        principal: String,
        expires_at_ms: Option<i64>,
    },
}

/// Why an exchange failed: what the client is told (Kafka's messages, which never say whether
/// a user exists) and what the log says (no secrets either).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub client_message: String,
    pub reason: String,
}

/// What Kafka's `SaslServerAuthenticator` tells a client whose mechanism failed with a
/// `SaslException` (rather than a `SaslAuthenticationException`, whose own message is sent):
/// never the exception's text, which may say too much.
const INVALID_CREDENTIALS_DURING: &str = "Authentication failed during ";
const INVALID_CREDENTIALS_DUE_TO: &str = " due to invalid credentials with SASL mechanism ";

impl Failure {
    /// A failure whose client message is also the reason.
    pub fn new(message: impl Into<String>) -> Failure {
        let message = message.into();
        Failure {
            client_message: message.clone(),
            reason: message,
        }
    }

    /// A failure the client is told only as Kafka's generic "invalid credentials" message
    /// (a `SaslException` in Kafka's mechanisms); `reason` goes to the log.
    pub fn invalid_credentials(mechanism: &str, reason: impl Into<String>) -> Failure {
        Failure {
            client_message: format!(
                "{INVALID_CREDENTIALS_DURING}authentication{INVALID_CREDENTIALS_DUE_TO}{mechanism}"
            ),
            reason: reason.into(),
        }
    }

    /// The same failure during a re-authentication (Kafka's
    /// `ReauthInfo.authenticationOrReauthenticationText` in the generic message).
    pub fn during_reauthentication(self) -> Failure {
        let generic = self
            .client_message
            .strip_prefix(INVALID_CREDENTIALS_DURING)
            .and_then(|rest| rest.strip_prefix("authentication"))
            .filter(|rest| rest.starts_with(INVALID_CREDENTIALS_DUE_TO));
        match generic {
            Some(rest) => Failure {
                client_message: format!("{INVALID_CREDENTIALS_DURING}re-authentication{rest}"),
                reason: self.reason,
            },
            None => self,
        }
    }
}

/// The client side of one mechanism: Keel's own outgoing connections (replica fetchers,
/// broker-to-controller channels, Raft, the URM, the `keel` commands).
pub trait ClientMechanism: Send + Sync + Debug {
    /// The mechanism's name.
    fn name(&self) -> &'static str;

    /// A new exchange with one server.
    fn start(&self) -> Box<dyn ClientExchange>;
}

/// One exchange with a server.
pub trait ClientExchange: Send {
    /// The first token.
    fn initial(&mut self) -> Result<Vec<u8>, String>;

    /// The server's answer to the last token: the next token, or `None` when the exchange is
    /// complete (the server's last answer verified, where the mechanism can).
    fn step(&mut self, challenge: &[u8]) -> Result<Option<Vec<u8>>, String>;
}

/// The SASL side of one listener: its enabled mechanisms in the configured order, their
/// server sides, the session limits.
#[derive(Debug)]
pub struct SaslListener {
    /// The listener's name (for logs and metrics).
    pub listener: String,
    /// `sasl.enabled.mechanisms`, in order (what SaslHandshake answers).
    pub enabled: Vec<String>,
    mechanisms: BTreeMap<String, Arc<dyn ServerMechanism>>,
    /// `connections.max.reauth.ms` per mechanism (0: sessions do not expire).
    reauth_ms: BTreeMap<String, i64>,
    /// `sasl.server.max.receive.size`.
    pub max_receive_size: usize,
    pub context: ExchangeContext,
}

impl SaslListener {
    /// Listener `listener`'s SASL settings from `props` (`listener.name.<name>.` prefix first,
    /// and `listener.name.<name>.<mechanism>.` for a mechanism's own).
    pub fn new(
        props: &BTreeMap<String, String>,
        listener: &str,
        context: ExchangeContext,
    ) -> Result<SaslListener, SaslConfigError> {
        let lower = listener.to_ascii_lowercase();
        let view = ListenerProps::of_listener(props, &lower);
        let (key, text) = view.get_with_key(SASL_ENABLED_MECHANISMS).ok_or_else(|| {
            invalid(
                format!("listener.name.{lower}.{SASL_ENABLED_MECHANISMS}"),
                format!(
                    "listener {listener} uses SASL but enables no mechanism (Kafka's default is \
                     GSSAPI, which Keel does not support): set it to one or more of {PLAIN}, \
                     {SCRAM_SHA_256}, {SCRAM_SHA_512}, {OAUTHBEARER}"
                ),
            )
        })?;
        let enabled: Vec<String> = text
            .split(',')
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .collect();
        if enabled.is_empty() {
            return Err(invalid(key, "enables no mechanism"));
        }
        let mut mechanisms = BTreeMap::new();
        let mut reauth_ms = BTreeMap::new();
        for name in &enabled {
            let mechanism = server_mechanism(props, listener, name)?;
            mechanisms.insert(name.clone(), mechanism);
            let mech_view = MechanismProps::new(props, &lower, name);
            let ms = match mech_view.get_with_key(CONNECTIONS_MAX_REAUTH_MS) {
                Some((key, v)) => v
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|ms| *ms >= 0)
                    .ok_or_else(|| invalid(key, format!("{v:?} is not a number of ms >= 0")))?,
                None => 0,
            };
            reauth_ms.insert(name.clone(), ms);
        }
        let max_receive_size = match view.get_with_key(SASL_SERVER_MAX_RECEIVE_SIZE) {
            Some((key, v)) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n >= 1024)
                .ok_or_else(|| {
                    invalid(key, format!("{v:?} is not a size of at least 1024 bytes"))
                })?,
            None => SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT,
        };
        Ok(SaslListener {
            listener: listener.to_string(),
            enabled,
            mechanisms,
            reauth_ms,
            max_receive_size,
            context,
        })
    }

    /// The server side of `mechanism`, if enabled.
    pub fn mechanism(&self, mechanism: &str) -> Option<&Arc<dyn ServerMechanism>> {
        self.mechanisms.get(mechanism)
    }

    /// `connections.max.reauth.ms` of `mechanism` (0: no limit).
    pub fn reauth_ms(&self, mechanism: &str) -> i64 {
        self.reauth_ms.get(mechanism).copied().unwrap_or(0)
    }
}

/// A mechanism's view of the properties on a listener: `listener.name.<l>.<mechanism>.<key>`
/// (Kafka's `ListenerName.saslMechanismConfigPrefix`), then `listener.name.<l>.<key>`, then
/// `<key>`.
#[derive(Debug, Clone, Copy)]
pub struct MechanismProps<'a> {
    props: &'a BTreeMap<String, String>,
    listener: &'a str,
    mechanism: &'a str,
}

impl<'a> MechanismProps<'a> {
    /// Mechanism `mechanism`'s settings on listener `listener_lower`.
    pub fn new(
        props: &'a BTreeMap<String, String>,
        listener_lower: &'a str,
        mechanism: &'a str,
    ) -> Self {
        MechanismProps {
            props,
            listener: listener_lower,
            mechanism,
        }
    }

    /// `listener.name.<l>.<mechanism>.<key>`: the key only this mechanism on this listener
    /// reads.
    pub fn mechanism_key(&self, key: &str) -> String {
        format!(
            "listener.name.{}.{}.{key}",
            self.listener,
            self.mechanism.to_ascii_lowercase()
        )
    }

    /// The value of `key` and the key it came from.
    pub fn get_with_key(&self, key: &str) -> Option<(String, &'a str)> {
        let mechanism_key = self.mechanism_key(key);
        if let Some(v) = self.props.get(&mechanism_key) {
            return Some((mechanism_key, v.as_str()));
        }
        ListenerProps::of_listener(self.props, self.listener).get_with_key(key)
    }

    /// The JAAS configuration of the mechanism on the listener, parsed: only
    /// `listener.name.<l>.<mechanism>.sasl.jaas.config` counts on a broker (Kafka's
    /// `JaasContext.loadServerContext`; Keel reads no JAAS file).
    pub fn jaas(&self) -> Result<Option<(String, Vec<jaas::JaasEntry>)>, SaslConfigError> {
        let key = format!(
            "listener.name.{}.{}.{SASL_JAAS_CONFIG}",
            self.listener,
            self.mechanism.to_ascii_lowercase()
        );
        match self.props.get(&key) {
            None => Ok(None),
            Some(text) => {
                let entries = jaas::parse(text).map_err(|e| invalid(&key, e))?;
                Ok(Some((key, entries)))
            }
        }
    }
}

/// The server side of `name` on `listener`.
fn server_mechanism(
    props: &BTreeMap<String, String>,
    listener: &str,
    name: &str,
) -> Result<Arc<dyn ServerMechanism>, SaslConfigError> {
    let lower = listener.to_ascii_lowercase();
    let view = MechanismProps::new(props, &lower, name);
    match name {
        PLAIN => Ok(Arc::new(plain::PlainServer::from_props(&view)?)),
        SCRAM_SHA_256 | SCRAM_SHA_512 => {
            let mechanism = keel_controller::scram::ScramMechanism::from_name(name)
                .expect("the two SCRAM names");
            Ok(Arc::new(scram::ScramServer::from_props(mechanism, &view)?))
        }
        OAUTHBEARER => Ok(Arc::new(oauthbearer::OAuthBearerServer::from_props(&view)?)),
        GSSAPI => Err(invalid(
            format!("listener.name.{lower}.{SASL_ENABLED_MECHANISMS}"),
            "GSSAPI (Kerberos) is not supported by Keel; use SCRAM-SHA-512, PLAIN over TLS or \
             OAUTHBEARER",
        )),
        other => Err(invalid(
            format!("listener.name.{lower}.{SASL_ENABLED_MECHANISMS}"),
            format!("unknown SASL mechanism {other:?}"),
        )),
    }
}

/// The client side of mechanism `name` with the credentials of the JAAS configuration in
/// `jaas_key`/`entries` (the broker's own `username` / `password` options).
pub fn client_mechanism(
    name: &str,
    jaas_key: &str,
    entries: &[jaas::JaasEntry],
) -> Result<Arc<dyn ClientMechanism>, SaslConfigError> {
    match name {
        PLAIN => Ok(Arc::new(plain::PlainClient::from_jaas(jaas_key, entries)?)),
        SCRAM_SHA_256 | SCRAM_SHA_512 => {
            let mechanism = keel_controller::scram::ScramMechanism::from_name(name)
                .expect("the two SCRAM names");
            Ok(Arc::new(scram::ScramClient::from_jaas(
                mechanism, jaas_key, entries,
            )?))
        }
        OAUTHBEARER => Err(invalid(
            jaas_key,
            "OAUTHBEARER is not available to Keel's own connections or the keel commands (Keel \
             fetches no tokens); its listeners accept OAUTHBEARER from clients, and use another \
             mechanism here",
        )),
        other => Err(invalid(
            jaas_key,
            format!(
                "{other} cannot be used for Keel's own connections; PLAIN, SCRAM-SHA-256 and \
                 SCRAM-SHA-512 can"
            ),
        )),
    }
}

/// Compares secrets in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}
