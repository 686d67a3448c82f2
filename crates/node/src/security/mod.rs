//! Transport security, configured as Kafka configures it: which security protocol each listener
//! speaks (`listener.security.protocol.map`), the settings a listener reads (Kafka's
//! `listener.name.<name>.<config>` prefix before the plain key), TLS for listeners and for the
//! node's own outgoing connections ([`tls`]), and the principal a connection acts as
//! ([`principal`]).
//!
//! Nothing here reads a socket: [`tls`] wraps any byte stream, so the same listener code runs
//! over TCP, the in-memory network and the simulator's.

pub mod authorizer;
pub mod principal;
pub mod sasl;
pub mod tls;

use std::collections::BTreeMap;

use crate::config::{ConfigError, Listener};

pub use principal::KafkaPrincipal;

/// Kafka's security protocols (`org.apache.kafka.common.security.auth.SecurityProtocol`), with
/// their wire ids (the `SecurityProtocol` field of BrokerRegistration's listeners).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Every protocol, in id order.
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// Kafka's name (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`).
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// The protocol named `text` (any case), as Kafka's `SecurityProtocol.forName`.
    pub fn parse(text: &str) -> Option<SecurityProtocol> {
        let upper = text.trim().to_ascii_uppercase();
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name() == upper)
    }

    /// The wire id (Kafka's `SecurityProtocol.id`).
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    /// The protocol with wire id `id`.
    pub fn from_id(id: i16) -> Option<SecurityProtocol> {
        SecurityProtocol::ALL.into_iter().find(|p| p.id() == id)
    }

    /// Whether connections are encrypted with TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a listener's or an outgoing connection's security cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecurityConfigError {
    #[error(transparent)]
    Tls(#[from] tls::TlsConfigError),
    #[error(transparent)]
    Sasl(#[from] sasl::SaslConfigError),
}

/// How one listener secures its connections: its name, protocol, TLS (SSL and SASL_SSL) and
/// SASL (SASL_PLAINTEXT and SASL_SSL).
#[derive(Debug)]
pub struct ListenerSecurity {
    /// The listener's name as configured (e.g. `PLAINTEXT`, `INTERNAL`).
    pub name: String,
    pub protocol: SecurityProtocol,
    /// The listener's TLS (SSL and SASL_SSL listeners).
    pub tls: Option<std::sync::Arc<tls::TlsServer>>,
    /// The listener's SASL mechanisms (SASL_PLAINTEXT and SASL_SSL listeners).
    pub sasl: Option<std::sync::Arc<sasl::SaslListener>>,
}

impl ListenerSecurity {
    /// A PLAINTEXT listener named `name`.
    pub fn plaintext(name: &str) -> ListenerSecurity {
        ListenerSecurity {
            name: name.to_string(),
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
        }
    }

    /// Listener `name` speaking `protocol`, its TLS and SASL built from `props` now; SASL
    /// exchanges read stored credentials and time through `context`.
    pub fn new(
        props: &BTreeMap<String, String>,
        name: &str,
        protocol: SecurityProtocol,
        context: sasl::ExchangeContext,
    ) -> Result<ListenerSecurity, SecurityConfigError> {
        let tls = match protocol.uses_tls() {
            true => Some(std::sync::Arc::new(tls::TlsServer::new(
                props,
                name,
                protocol.uses_sasl(),
            )?)),
            false => None,
        };
        let sasl = match protocol.uses_sasl() {
            true => Some(std::sync::Arc::new(sasl::SaslListener::new(
                props, name, context,
            )?)),
            false => None,
        };
        Ok(ListenerSecurity {
            name: name.to_string(),
            protocol,
            tls,
            sasl,
        })
    }
}

/// Whom an outgoing connection authenticates to, which decides the SASL mechanism setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Another broker's inter-broker listener (`sasl.mechanism.inter.broker.protocol`).
    Broker,
    /// A controller's listener (`sasl.mechanism.controller.protocol`).
    Controller,
}

/// The node's outgoing connections to one kind of listener (another broker's inter-broker
/// listener, a controller's): the network underneath, then TLS when that listener speaks it.
#[derive(Debug)]
pub struct SecureNetwork {
    inner: std::sync::Arc<dyn crate::net::Network>,
    tls: Option<std::sync::Arc<tls::TlsClient>>,
    sasl: Option<std::sync::Arc<dyn sasl::ClientMechanism>>,
}

impl SecureNetwork {
    /// Connections over `inner` to `peer`s' listener `listener` speaking `protocol`, with the
    /// node's settings for that listener (`listener.name.<listener>.` first): its TLS when it
    /// uses TLS; when it uses SASL, the mechanism the node's config names for `peer` with the
    /// `username` / `password` of that mechanism's JAAS configuration on the listener.
    pub fn new(
        inner: std::sync::Arc<dyn crate::net::Network>,
        props: &BTreeMap<String, String>,
        listener: &str,
        protocol: SecurityProtocol,
        peer: Peer,
    ) -> Result<SecureNetwork, SecurityConfigError> {
        let tls = match protocol.uses_tls() {
            true => Some(std::sync::Arc::new(tls::TlsClient::new(
                props,
                Some(listener),
            )?)),
            false => None,
        };
        let sasl = match protocol.uses_sasl() {
            true => Some(sasl::client::for_peer(props, listener, peer)?),
            false => None,
        };
        Ok(SecureNetwork { inner, tls, sasl })
    }

    /// Connections with a client's settings (`security.protocol`, `ssl.*`, `sasl.mechanism`,
    /// `sasl.jaas.config`: what Kafka's tools read from `--command-config`).
    pub fn for_client(
        inner: std::sync::Arc<dyn crate::net::Network>,
        props: &BTreeMap<String, String>,
    ) -> Result<SecureNetwork, SecurityConfigError> {
        let protocol = match props.get("security.protocol") {
            None => SecurityProtocol::Plaintext,
            Some(text) => SecurityProtocol::parse(text).ok_or_else(|| {
                sasl::invalid(
                    "security.protocol",
                    format!("{text:?} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
                )
            })?,
        };
        let tls = match protocol.uses_tls() {
            true => Some(std::sync::Arc::new(tls::TlsClient::new(props, None)?)),
            false => None,
        };
        let sasl = match protocol.uses_sasl() {
            true => Some(sasl::client::from_client_props(props)?),
            false => None,
        };
        Ok(SecureNetwork { inner, tls, sasl })
    }

    /// Plain connections over `inner`.
    pub fn plaintext(inner: std::sync::Arc<dyn crate::net::Network>) -> SecureNetwork {
        SecureNetwork {
            inner,
            tls: None,
            sasl: None,
        }
    }

    /// The outgoing TLS, to reload its certificates.
    pub fn tls(&self) -> Option<&std::sync::Arc<tls::TlsClient>> {
        self.tls.as_ref()
    }
}

impl crate::net::Network for SecureNetwork {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
    ) -> crate::net::BoxFuture<'a, std::io::Result<crate::net::BoxStream>> {
        Box::pin(async move {
            let stream = self.inner.connect(addr).await?;
            match &self.tls {
                None => Ok(stream),
                Some(tls) => {
                    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
                    tls.connect(host, stream).await.map_err(|e| {
                        std::io::Error::new(
                            std::io::ErrorKind::ConnectionRefused,
                            format!("{addr}: {e}"),
                        )
                    })
                }
            }
        })
    }

    fn listen<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> crate::net::BoxFuture<'a, std::io::Result<(crate::net::BoxListener, u16)>> {
        self.inner.listen(host, port)
    }

    fn sasl(&self) -> Option<std::sync::Arc<dyn sasl::ClientMechanism>> {
        self.sasl.clone()
    }
}

/// A trigger to read every TLS keystore and truststore of a node again (certificate rotation
/// without a restart: `keel server` fires it on SIGHUP). Not a property: a handle in the
/// node's config, as its metrics registry is.
#[derive(Debug, Clone)]
pub struct TlsReload {
    sender: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for TlsReload {
    fn default() -> Self {
        TlsReload {
            sender: std::sync::Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

/// The same trigger (configs compare equal when they share it).
impl PartialEq for TlsReload {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.sender, &other.sender)
    }
}

impl Eq for TlsReload {}

impl TlsReload {
    /// Asks every node holding this trigger to reload its TLS files.
    pub fn trigger(&self) {
        self.sender.send_modify(|n| *n += 1);
    }

    /// Reloads `servers` and `clients` each time the trigger fires, until `stop`; a failed
    /// reload keeps the certificates in use and says why.
    pub async fn serve(
        &self,
        servers: Vec<std::sync::Arc<tls::TlsServer>>,
        clients: Vec<std::sync::Arc<tls::TlsClient>>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        if servers.is_empty() && clients.is_empty() {
            return;
        }
        let mut fired = self.sender.subscribe();
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                changed = fired.changed() => if changed.is_err() { return },
            }
            let mut failed = 0;
            let results = servers
                .iter()
                .map(|s| s.reload())
                .chain(clients.iter().map(|c| c.reload()));
            for result in results {
                if let Err(e) = result {
                    failed += 1;
                    tracing::error!(error = %e, "TLS reload failed: the certificates in use stay");
                }
            }
            tracing::info!(
                listeners = servers.len(),
                outgoing = clients.len(),
                failed,
                "TLS keystores and truststores reloaded"
            );
        }
    }
}

/// Whether `key` is a security setting Keel reads: `ssl.*`, `sasl.*`,
/// `connections.max.reauth.ms`, and their `listener.name.<name>.` (and, for SASL,
/// `listener.name.<name>.<mechanism>.`) forms.
pub fn is_security_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let security = |k: &str| {
        k.starts_with("ssl.") || k.starts_with("sasl.") || k == sasl::CONNECTIONS_MAX_REAUTH_MS
    };
    if security(&key) {
        return true;
    }
    match key.strip_prefix("listener.name.") {
        Some(rest) => match rest.split_once('.') {
            Some((_listener, setting)) => {
                security(setting)
                    || setting
                        .split_once('.')
                        .is_some_and(|(_mechanism, mechanism_setting)| security(mechanism_setting))
            }
            None => false,
        },
        None => false,
    }
}

/// `listener.security.protocol.map`: `NAME:PROTOCOL,...`.
pub const LISTENER_SECURITY_PROTOCOL_MAP: &str = "listener.security.protocol.map";
/// `security.inter.broker.protocol`: the inter-broker listener named by its protocol.
pub const SECURITY_INTER_BROKER_PROTOCOL: &str = "security.inter.broker.protocol";
/// `inter.broker.listener.name`.
pub const INTER_BROKER_LISTENER_NAME: &str = "inter.broker.listener.name";

/// A listener's view of the properties: `listener.name.<name>.<key>` (the name lower-cased, as
/// Kafka's `ListenerName.configPrefix`) wins over `<key>`.
#[derive(Debug, Clone, Copy)]
pub struct ListenerProps<'a> {
    props: &'a BTreeMap<String, String>,
    /// The lower-cased listener name, `None` for the plain keys only (a client's properties).
    listener: Option<&'a str>,
}

impl<'a> ListenerProps<'a> {
    /// The properties of listener `name_lower` (already lower-cased).
    pub fn of_listener(props: &'a BTreeMap<String, String>, name_lower: &'a str) -> Self {
        ListenerProps {
            props,
            listener: Some(name_lower),
        }
    }

    /// The plain keys only (a client configuration: `security.protocol`, `ssl.*`, ...).
    pub fn plain(props: &'a BTreeMap<String, String>) -> Self {
        ListenerProps {
            props,
            listener: None,
        }
    }

    /// The value of `key` for this listener, and the key it came from.
    pub fn get_with_key(&self, key: &str) -> Option<(String, &'a str)> {
        if let Some(prefixed) = self.prefixed_key(key) {
            if let Some(value) = self.props.get(&prefixed) {
                return Some((prefixed, value.as_str()));
            }
        }
        self.props
            .get(key)
            .map(|value| (key.to_string(), value.as_str()))
    }

    /// The value of `key` for this listener.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.get_with_key(key).map(|(_, value)| value)
    }

    /// The value of `key` only when set with this listener's prefix (Kafka reads some settings
    /// only per listener, e.g. `ssl.client.auth` of a SASL_SSL listener, KIP-684).
    pub fn get_prefixed(&self, key: &str) -> Option<&'a str> {
        let prefixed = self.prefixed_key(key)?;
        self.props.get(&prefixed).map(String::as_str)
    }

    /// `listener.name.<name>.<key>`, if this view is a listener's.
    pub fn prefixed_key(&self, key: &str) -> Option<String> {
        self.listener
            .map(|name| format!("listener.name.{name}.{key}"))
    }

    /// The underlying properties.
    pub fn all(&self) -> &'a BTreeMap<String, String> {
        self.props
    }
}

/// The security protocol of every listener name, upper-cased: `listener.security.protocol.map`
/// when set, else Kafka's default map (each protocol's name maps to itself) with the controller
/// listeners added as PLAINTEXT (Kafka's `effectiveListenerSecurityProtocolMap` does so only when
/// the map is not set explicitly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolMap {
    map: BTreeMap<String, SecurityProtocol>,
}

impl ProtocolMap {
    /// Reads the map from the properties; `controller_listener_names` get PLAINTEXT when the
    /// map is not set.
    pub fn from_properties(
        props: &BTreeMap<String, String>,
        controller_listener_names: &[String],
    ) -> Result<ProtocolMap, ConfigError> {
        let mut map = BTreeMap::new();
        match props.get(LISTENER_SECURITY_PROTOCOL_MAP) {
            Some(text) => {
                for entry in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let parsed = entry.split_once(':').and_then(|(name, protocol)| {
                        let name = name.trim();
                        (!name.is_empty())
                            .then_some(())
                            .and(SecurityProtocol::parse(protocol))
                            .map(|p| (name.to_ascii_uppercase(), p))
                    });
                    let (name, protocol) = parsed.ok_or_else(|| ConfigError::InvalidValue {
                        key: LISTENER_SECURITY_PROTOCOL_MAP.into(),
                        value: text.clone(),
                        reason: format!(
                            "{entry:?} is not NAME:PROTOCOL with a protocol of PLAINTEXT, SSL, \
                             SASL_PLAINTEXT or SASL_SSL"
                        ),
                    })?;
                    if map.insert(name.clone(), protocol).is_some() {
                        return Err(ConfigError::InvalidValue {
                            key: LISTENER_SECURITY_PROTOCOL_MAP.into(),
                            value: text.clone(),
                            reason: format!("listener {name} is mapped twice"),
                        });
                    }
                }
            }
            None => {
                for protocol in SecurityProtocol::ALL {
                    map.insert(protocol.name().to_string(), protocol);
                }
                for name in controller_listener_names {
                    map.entry(name.to_ascii_uppercase())
                        .or_insert(SecurityProtocol::Plaintext);
                }
            }
        }
        Ok(ProtocolMap { map })
    }

    /// Kafka's default map alone (each protocol's name maps to itself).
    pub fn kafka_default() -> ProtocolMap {
        ProtocolMap {
            map: SecurityProtocol::ALL
                .into_iter()
                .map(|p| (p.name().to_string(), p))
                .collect(),
        }
    }

    /// The protocol of listener `name`.
    pub fn protocol(&self, name: &str) -> Option<SecurityProtocol> {
        self.map.get(&name.to_ascii_uppercase()).copied()
    }

    /// The protocol of `listener`, or a config error naming `key` (the setting that named the
    /// listener) as Kafka's "No security protocol defined for listener".
    pub fn protocol_of(
        &self,
        key: &str,
        listener: &Listener,
    ) -> Result<SecurityProtocol, ConfigError> {
        self.protocol(&listener.name)
            .ok_or_else(|| ConfigError::InvalidValue {
                key: key.to_string(),
                value: format!("{}://{}:{}", listener.name, listener.host, listener.port),
                reason: format!(
                    "no security protocol defined for listener {} (add it to {LISTENER_SECURITY_PROTOCOL_MAP})",
                    listener.name
                ),
            })
    }
}

/// The inter-broker listener's name: `inter.broker.listener.name`, else the listener whose
/// protocol `security.inter.broker.protocol` names (Kafka: setting both is an error), else the
/// listener named `PLAINTEXT` (Kafka's default), else the first broker listener (where Kafka
/// refuses to start, Keel takes the only sensible choice).
pub fn inter_broker_listener_name(
    props: &BTreeMap<String, String>,
    protocols: &ProtocolMap,
    broker_listeners: &[Listener],
) -> Result<String, ConfigError> {
    let by_name = props
        .get(INTER_BROKER_LISTENER_NAME)
        .map(|s| s.trim())
        .filter(|s| !s.is_empty());
    let by_protocol = props
        .get(SECURITY_INTER_BROKER_PROTOCOL)
        .map(|s| s.trim())
        .filter(|s| !s.is_empty());
    let name = match (by_name, by_protocol) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::InvalidValue {
                key: INTER_BROKER_LISTENER_NAME.into(),
                value: by_name.unwrap_or_default().to_string(),
                reason: format!(
                    "only one of {INTER_BROKER_LISTENER_NAME} and \
                     {SECURITY_INTER_BROKER_PROTOCOL} may be set"
                ),
            })
        }
        (Some(name), None) => name.to_ascii_uppercase(),
        (None, Some(text)) => {
            let protocol =
                SecurityProtocol::parse(text).ok_or_else(|| ConfigError::InvalidValue {
                    key: SECURITY_INTER_BROKER_PROTOCOL.into(),
                    value: text.to_string(),
                    reason: "not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL".into(),
                })?;
            broker_listeners
                .iter()
                .find(|l| protocols.protocol(&l.name) == Some(protocol))
                .map(|l| l.name.to_ascii_uppercase())
                .ok_or_else(|| ConfigError::InvalidValue {
                    key: SECURITY_INTER_BROKER_PROTOCOL.into(),
                    value: text.to_string(),
                    reason: format!("no broker listener uses {protocol}"),
                })?
        }
        (None, None) => match broker_listeners
            .iter()
            .find(|l| l.name.eq_ignore_ascii_case("PLAINTEXT"))
            .or(broker_listeners.first())
        {
            Some(listener) => listener.name.to_ascii_uppercase(),
            None => return Err(ConfigError::Missing("listeners")),
        },
    };
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::props;

    // Shows: Kafka's default map serves listeners named after a protocol and controller
    // listeners as PLAINTEXT; an explicit map is taken as written, and an entry that is not
    // NAME:PROTOCOL is refused naming the key.
    #[test]
    fn protocol_map_defaults_and_explicit() {
        let default =
            ProtocolMap::from_properties(&BTreeMap::new(), &["CONTROLLER".to_string()]).unwrap();
        assert_eq!(default.protocol("ssl"), Some(SecurityProtocol::Ssl));
        assert_eq!(
            default.protocol("CONTROLLER"),
            Some(SecurityProtocol::Plaintext)
        );
        assert_eq!(default.protocol("INTERNAL"), None);

        let explicit = ProtocolMap::from_properties(
            &props(&[(
                LISTENER_SECURITY_PROTOCOL_MAP,
                "INTERNAL:SASL_SSL, external:ssl,CONTROLLER:SSL",
            )]),
            &["CONTROLLER".to_string()],
        )
        .unwrap();
        assert_eq!(
            explicit.protocol("internal"),
            Some(SecurityProtocol::SaslSsl)
        );
        assert_eq!(explicit.protocol("EXTERNAL"), Some(SecurityProtocol::Ssl));
        assert_eq!(explicit.protocol("CONTROLLER"), Some(SecurityProtocol::Ssl));
        assert_eq!(explicit.protocol("PLAINTEXT"), None);

        for bad in ["INTERNAL", "INTERNAL:TLS", ":SSL", "A:SSL,A:PLAINTEXT"] {
            let err =
                ProtocolMap::from_properties(&props(&[(LISTENER_SECURITY_PROTOCOL_MAP, bad)]), &[])
                    .unwrap_err();
            assert!(
                err.to_string().contains(LISTENER_SECURITY_PROTOCOL_MAP),
                "{err}"
            );
        }
    }

    // Shows: a listener's setting is read with Kafka's `listener.name.<lower-cased name>.`
    // prefix first, then without it.
    #[test]
    fn listener_props_prefer_the_listener_prefix() {
        let p = props(&[
            ("ssl.keystore.location", "/global"),
            ("listener.name.internal.ssl.keystore.location", "/internal"),
            ("listener.name.internal.ssl.client.auth", "required"),
            ("ssl.client.auth", "requested"),
        ]);
        let internal = ListenerProps::of_listener(&p, "internal");
        let external = ListenerProps::of_listener(&p, "external");
        assert_eq!(internal.get("ssl.keystore.location"), Some("/internal"));
        assert_eq!(external.get("ssl.keystore.location"), Some("/global"));
        assert_eq!(internal.get_prefixed("ssl.client.auth"), Some("required"));
        assert_eq!(external.get_prefixed("ssl.client.auth"), None);
        assert_eq!(
            internal.get_with_key("ssl.client.auth").unwrap().0,
            "listener.name.internal.ssl.client.auth"
        );
        assert_eq!(
            ListenerProps::plain(&p).get("ssl.keystore.location"),
            Some("/global")
        );
    }

    // Shows: the inter-broker listener comes from its name, else from the protocol, else is the
    // first broker listener; both settings at once, or a protocol no listener uses, are refused.
    #[test]
    fn inter_broker_listener_resolution() {
        let listeners = vec![
            Listener::parse("EXTERNAL://:9092").unwrap(),
            Listener::parse("INTERNAL://:9093").unwrap(),
        ];
        let map_props = props(&[(
            LISTENER_SECURITY_PROTOCOL_MAP,
            "EXTERNAL:SASL_SSL,INTERNAL:SSL",
        )]);
        let map = ProtocolMap::from_properties(&map_props, &[]).unwrap();
        let resolve =
            |extra: &[(&str, &str)]| inter_broker_listener_name(&props(extra), &map, &listeners);
        assert_eq!(resolve(&[]).unwrap(), "EXTERNAL");
        assert_eq!(
            resolve(&[(INTER_BROKER_LISTENER_NAME, "internal")]).unwrap(),
            "INTERNAL"
        );
        assert_eq!(
            resolve(&[(SECURITY_INTER_BROKER_PROTOCOL, "SSL")]).unwrap(),
            "INTERNAL"
        );
        assert!(resolve(&[(SECURITY_INTER_BROKER_PROTOCOL, "PLAINTEXT")]).is_err());
        assert!(resolve(&[
            (SECURITY_INTER_BROKER_PROTOCOL, "SSL"),
            (INTER_BROKER_LISTENER_NAME, "INTERNAL")
        ])
        .is_err());
    }

    // Shows: protocol ids are Kafka's wire ids.
    #[test]
    fn protocol_ids_are_kafkas() {
        for (protocol, id) in SecurityProtocol::ALL.into_iter().zip(0..) {
            assert_eq!(protocol.id(), id);
            assert_eq!(SecurityProtocol::from_id(id), Some(protocol));
            assert_eq!(
                SecurityProtocol::parse(&protocol.name().to_lowercase()),
                Some(protocol)
            );
        }
    }
}
