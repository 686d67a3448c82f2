//! TLS with Kafka's `ssl.*` settings, on rustls (no OpenSSL): a listener's server side
//! ([`TlsServer`]) and the node's outgoing connections ([`TlsClient`]).
//!
//! Keystores and truststores are PEM as Kafka accepts them (`ssl.keystore.type=PEM` with
//! `ssl.keystore.location`, or inline `ssl.keystore.certificate.chain` / `ssl.keystore.key`;
//! `ssl.key.password` for an encrypted PKCS #8 key; `ssl.truststore.type=PEM` with
//! `ssl.truststore.location` or inline `ssl.truststore.certificates`). A store whose type is
//! not set is read as PEM when it is PEM; JKS and PKCS12 stores are refused with the command
//! that converts them.
//!
//! Certificates rotate without a restart: [`TlsServer::reload`] and [`TlsClient::reload`] read
//! the files again (the broker does on SIGHUP); connections made after a reload use the new
//! certificates, open ones keep theirs.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedCipherSuite};
use tokio::io::{AsyncRead, AsyncWrite};

use super::principal::{subject_name, KafkaPrincipal, PrincipalError, SslPrincipalMapper};
use super::ListenerProps;
use crate::net::BoxStream;

/// `ssl.keystore.type`.
pub const SSL_KEYSTORE_TYPE: &str = "ssl.keystore.type";
/// `ssl.keystore.location`.
pub const SSL_KEYSTORE_LOCATION: &str = "ssl.keystore.location";
/// `ssl.keystore.password` (protects a JKS/PKCS12 store; a PEM file needs none).
pub const SSL_KEYSTORE_PASSWORD: &str = "ssl.keystore.password";
/// `ssl.keystore.certificate.chain`: the PEM certificate chain inline.
pub const SSL_KEYSTORE_CERTIFICATE_CHAIN: &str = "ssl.keystore.certificate.chain";
/// `ssl.keystore.key`: the PEM private key inline.
pub const SSL_KEYSTORE_KEY: &str = "ssl.keystore.key";
/// `ssl.key.password`: decrypts an `ENCRYPTED PRIVATE KEY`.
pub const SSL_KEY_PASSWORD: &str = "ssl.key.password";
/// `ssl.truststore.type`.
pub const SSL_TRUSTSTORE_TYPE: &str = "ssl.truststore.type";
/// `ssl.truststore.location`.
pub const SSL_TRUSTSTORE_LOCATION: &str = "ssl.truststore.location";
/// `ssl.truststore.password`.
pub const SSL_TRUSTSTORE_PASSWORD: &str = "ssl.truststore.password";
/// `ssl.truststore.certificates`: trusted PEM certificates inline.
pub const SSL_TRUSTSTORE_CERTIFICATES: &str = "ssl.truststore.certificates";
/// `ssl.client.auth`: `none` (default), `requested` or `required`.
pub const SSL_CLIENT_AUTH: &str = "ssl.client.auth";
/// `ssl.enabled.protocols`: default `TLSv1.2,TLSv1.3`.
pub const SSL_ENABLED_PROTOCOLS: &str = "ssl.enabled.protocols";
/// `ssl.protocol`: the protocol the client starts with; rustls negotiates the best of the
/// enabled ones, so only its validity is checked.
pub const SSL_PROTOCOL: &str = "ssl.protocol";
/// `ssl.cipher.suites`: IANA names; empty = every suite rustls offers.
pub const SSL_CIPHER_SUITES: &str = "ssl.cipher.suites";
/// `ssl.endpoint.identification.algorithm`: `https` (default) checks the server's host name on
/// outgoing connections; empty does not.
pub const SSL_ENDPOINT_IDENTIFICATION_ALGORITHM: &str = "ssl.endpoint.identification.algorithm";
/// `ssl.principal.mapping.rules`: default `DEFAULT`.
pub const SSL_PRINCIPAL_MAPPING_RULES: &str = "ssl.principal.mapping.rules";

/// Java-only `ssl.*` settings Keel accepts and has no use for (the JVM's providers and key
/// managers); listed in docs/security.md.
pub const SSL_INERT_KEYS: &[&str] = &[
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
    "ssl.provider",
    "ssl.engine.factory.class",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
];

/// How long a TLS handshake may take before the connection is closed (a client that connects
/// and sends nothing must not hold a task forever).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The content type of a TLS handshake record (the ClientHello and ServerHello).
pub const HANDSHAKE_RECORD: u8 = 0x16;

/// The content type of the TLS record `buffer` starts with, if its first bytes are a TLS 1.x
/// record header (content type 20–23, protocol version 3.0–3.4). A Kafka frame cannot start so:
/// its size would be more than 335 MB. What a plaintext peer on a TLS port or a TLS peer on a
/// plaintext port receives first — a handshake record or an alert.
pub fn record_type(buffer: &[u8]) -> Option<u8> {
    match buffer {
        [content @ 0x14..=0x17, 0x03, 0x00..=0x04, ..] => Some(*content),
        _ => None,
    }
}

/// A TLS setting that cannot be used, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid TLS setting {key}: {reason}")]
pub struct TlsConfigError {
    pub key: String,
    pub reason: String,
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> TlsConfigError {
    TlsConfigError {
        key: key.into(),
        reason: reason.into(),
    }
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// The certificate chain and key a side presents.
#[derive(Debug)]
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// The `ring` provider restricted to `ssl.cipher.suites`.
fn provider(
    props: &ListenerProps<'_>,
) -> Result<Arc<rustls::crypto::CryptoProvider>, TlsConfigError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some((key, text)) = props.get_with_key(SSL_CIPHER_SUITES) {
        let wanted: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if !wanted.is_empty() {
            let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
            for name in &wanted {
                let suite = provider
                    .cipher_suites
                    .iter()
                    .find(|s| iana_name(s).eq_ignore_ascii_case(name))
                    .ok_or_else(|| {
                        invalid(
                            &key,
                            format!(
                                "unsupported cipher suite {name}; supported: {}",
                                provider
                                    .cipher_suites
                                    .iter()
                                    .map(iana_name)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?;
                chosen.push(*suite);
            }
            provider.cipher_suites = chosen;
        }
    }
    Ok(Arc::new(provider))
}

/// A suite's IANA name (`TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`), the
/// names Java and so Kafka's `ssl.cipher.suites` use.
fn iana_name(suite: &SupportedCipherSuite) -> String {
    let name = format!("{:?}", suite.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

/// `ssl.enabled.protocols` as rustls versions; TLSv1 and TLSv1.1 are refused (rustls does not
/// speak them; Kafka dropped them from its defaults in 2.x).
fn protocol_versions(
    props: &ListenerProps<'_>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsConfigError> {
    let (key, text) = props
        .get_with_key(SSL_ENABLED_PROTOCOLS)
        .unwrap_or((SSL_ENABLED_PROTOCOLS.to_string(), "TLSv1.2,TLSv1.3"));
    let mut versions = Vec::new();
    for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let version = match name {
            "TLSv1.2" => &rustls::version::TLS12,
            "TLSv1.3" => &rustls::version::TLS13,
            other => {
                return Err(invalid(
                    &key,
                    format!("{other} is not supported; use TLSv1.2 and/or TLSv1.3"),
                ))
            }
        };
        if !versions.contains(&version) {
            versions.push(version);
        }
    }
    if versions.is_empty() {
        return Err(invalid(&key, "names no protocol"));
    }
    if let Some((key, text)) = props.get_with_key(SSL_PROTOCOL) {
        if !matches!(text.trim(), "TLSv1.2" | "TLSv1.3" | "TLS") {
            return Err(invalid(
                &key,
                format!("{text} is not TLSv1.2, TLSv1.3 or TLS"),
            ));
        }
    }
    Ok(versions)
}

/// The PEM text of a store: the inline setting, else the file at the location; `None` when
/// neither is set. A store type other than PEM is refused.
fn store_text(
    props: &ListenerProps<'_>,
    type_key: &str,
    location_key: &str,
    inline_key: Option<&str>,
) -> Result<Option<(String, String)>, TlsConfigError> {
    if let Some((key, inline)) = inline_key.and_then(|k| props.get_with_key(k)) {
        check_pem_type(props, type_key, true)?;
        return Ok(Some((key, inline.to_string())));
    }
    let Some((key, location)) = props.get_with_key(location_key) else {
        return Ok(None);
    };
    let bytes = std::fs::read(location)
        .map_err(|e| invalid(&key, format!("cannot read {location}: {e}")))?;
    let is_pem = bytes.windows(11).any(|w| w == b"-----BEGIN ");
    check_pem_type(props, type_key, is_pem)?;
    if !is_pem {
        return Err(invalid(
            &key,
            format!("{location} is not a PEM file (no -----BEGIN line)"),
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| invalid(&key, format!("{location} is not text")))?;
    Ok(Some((key, text)))
}

/// Refuses a store type Keel does not read, saying how to convert it.
fn check_pem_type(
    props: &ListenerProps<'_>,
    type_key: &str,
    looks_pem: bool,
) -> Result<(), TlsConfigError> {
    match props.get_with_key(type_key) {
        Some((_, t)) if t.trim().eq_ignore_ascii_case("PEM") => Ok(()),
        // Kafka's default type is JKS; a PEM file without a type is read as PEM.
        None if looks_pem => Ok(()),
        Some((key, t)) => Err(invalid(
            key,
            format!(
                "{t} stores are not supported; use PEM (e.g. `keytool -importkeystore -srckeystore \
                 store.jks -destkeystore store.p12 -deststoretype PKCS12` then `openssl pkcs12 -in \
                 store.p12 -out store.pem`) and set {type_key}=PEM"
            ),
        )),
        None => Err(invalid(
            type_key,
            "the store is not PEM (Kafka's default type is JKS); convert it to PEM and set the \
             type to PEM",
        )),
    }
}

/// The PEM sections of `text`: `(label, der)`; the text of each must decode.
fn pem_sections(key: &str, text: &str) -> Result<Vec<(String, Vec<u8>)>, TlsConfigError> {
    let mut sections = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + 11..];
        let label_end = after
            .find("-----")
            .ok_or_else(|| invalid(key, "a -----BEGIN line is not closed"))?;
        let label = after[..label_end].to_string();
        let end_marker = format!("-----END {label}-----");
        let end = rest
            .find(&end_marker)
            .ok_or_else(|| invalid(key, format!("no {end_marker} line")))?;
        let block = &rest[start..end + end_marker.len()];
        let (_, der) = pkcs8::der::pem::decode_vec(block.as_bytes())
            .map_err(|e| invalid(key, format!("bad PEM block {label}: {e}")))?;
        sections.push((label, der));
        rest = &rest[end + end_marker.len()..];
    }
    Ok(sections)
}

/// The identity in the keystore settings, if any (`None`: no keystore configured).
fn identity(props: &ListenerProps<'_>) -> Result<Option<Identity>, TlsConfigError> {
    let (chain_key, chain_text, key_key, key_text) =
        match props.get_with_key(SSL_KEYSTORE_CERTIFICATE_CHAIN) {
            Some((chain_key, chain)) => {
                check_pem_type(props, SSL_KEYSTORE_TYPE, true)?;
                let (key_key, key) = props.get_with_key(SSL_KEYSTORE_KEY).ok_or_else(|| {
                    invalid(SSL_KEYSTORE_KEY, format!("must be set with {chain_key}"))
                })?;
                (chain_key, chain.to_string(), key_key, key.to_string())
            }
            None => match store_text(props, SSL_KEYSTORE_TYPE, SSL_KEYSTORE_LOCATION, None)? {
                Some((key, text)) => (key.clone(), text.clone(), key, text),
                None => {
                    if let Some((key, _)) = props.get_with_key(SSL_KEYSTORE_KEY) {
                        return Err(invalid(
                            key,
                            format!("must be set with {SSL_KEYSTORE_CERTIFICATE_CHAIN}"),
                        ));
                    }
                    return Ok(None);
                }
            },
        };
    let chain: Vec<CertificateDer<'static>> = pem_sections(&chain_key, &chain_text)?
        .into_iter()
        .filter(|(label, _)| label == "CERTIFICATE")
        .map(|(_, der)| CertificateDer::from(der))
        .collect();
    if chain.is_empty() {
        return Err(invalid(chain_key, "holds no CERTIFICATE"));
    }
    let password = props.get(SSL_KEY_PASSWORD);
    let mut keys = Vec::new();
    for (label, der) in pem_sections(&key_key, &key_text)? {
        let key = match label.as_str() {
            "PRIVATE KEY" => PrivateKeyDer::Pkcs8(der.into()),
            "RSA PRIVATE KEY" => PrivateKeyDer::Pkcs1(der.into()),
            "EC PRIVATE KEY" => PrivateKeyDer::Sec1(der.into()),
            "ENCRYPTED PRIVATE KEY" => {
                let password = password.ok_or_else(|| {
                    invalid(
                        SSL_KEY_PASSWORD,
                        format!("{key_key} holds an encrypted key"),
                    )
                })?;
                let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice())
                    .map_err(|e| invalid(&key_key, format!("bad encrypted key: {e}")))?;
                let plain = info.decrypt(password).map_err(|e| {
                    invalid(SSL_KEY_PASSWORD, format!("cannot decrypt the key: {e}"))
                })?;
                PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into())
            }
            _ => continue,
        };
        keys.push(key);
    }
    let key = match keys.len() {
        1 => keys.remove(0),
        0 => return Err(invalid(key_key, "holds no private key")),
        n => {
            return Err(invalid(
                key_key,
                format!("holds {n} private keys; one is expected"),
            ))
        }
    };
    Ok(Some(Identity { chain, key }))
}

/// The trusted certificates, if a truststore is configured.
fn trust_roots(props: &ListenerProps<'_>) -> Result<Option<RootCertStore>, TlsConfigError> {
    let Some((key, text)) = store_text(
        props,
        SSL_TRUSTSTORE_TYPE,
        SSL_TRUSTSTORE_LOCATION,
        Some(SSL_TRUSTSTORE_CERTIFICATES),
    )?
    else {
        return Ok(None);
    };
    let mut roots = RootCertStore::empty();
    for (label, der) in pem_sections(&key, &text)? {
        if label == "CERTIFICATE" {
            roots
                .add(CertificateDer::from(der))
                .map_err(|e| invalid(&key, format!("cannot trust a certificate: {e}")))?;
        }
    }
    if roots.is_empty() {
        return Err(invalid(key, "holds no CERTIFICATE"));
    }
    Ok(Some(roots))
}

/// `ssl.client.auth` of a listener: for SASL_SSL only the listener-prefixed setting counts
/// (Kafka, KIP-684: client certificates are not asked for on SASL listeners unless that
/// listener says so).
fn client_auth(props: &ListenerProps<'_>, sasl: bool) -> Result<ClientAuth, TlsConfigError> {
    let value = if sasl {
        props
            .get_prefixed(SSL_CLIENT_AUTH)
            .map(|v| (props.prefixed_key(SSL_CLIENT_AUTH).unwrap_or_default(), v))
    } else {
        props.get_with_key(SSL_CLIENT_AUTH)
    };
    match value {
        None => Ok(ClientAuth::None),
        Some((key, v)) => match v.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(invalid(
                key,
                format!("{v} is not none, requested or required"),
            )),
        },
    }
}

/// A rustls config that a reload swaps; a handshake uses the one current when it starts, and
/// connections made before keep theirs.
#[derive(Debug)]
struct Current<T>(RwLock<Arc<T>>);

impl<T> Current<T> {
    fn new(config: Arc<T>) -> Current<T> {
        Current(RwLock::new(config))
    }

    fn get(&self) -> Arc<T> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, config: Arc<T>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = config;
    }
}

/// Runs a handshake within [`HANDSHAKE_TIMEOUT`].
async fn handshake<T>(
    handshake: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, TlsError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| TlsError::Timeout)?
        .map_err(TlsError::Handshake)
}

/// A listener's TLS: the current rustls config (swapped by [`reload`](TlsServer::reload)), how
/// client certificates become principals.
#[derive(Debug)]
pub struct TlsServer {
    /// The listener name, for logs.
    listener: String,
    /// Whether the listener is SASL_SSL (its `ssl.client.auth` is read only with its prefix).
    sasl: bool,
    /// The properties it was built from (re-read on reload).
    props: std::collections::BTreeMap<String, String>,
    config: Current<ServerConfig>,
    client_auth: ClientAuth,
    mapper: SslPrincipalMapper,
}

impl TlsServer {
    /// Builds listener `listener`'s TLS from `props` (Kafka's `listener.name.<name>.` prefix
    /// first); loads the keystore and truststore now.
    pub fn new(
        props: &std::collections::BTreeMap<String, String>,
        listener: &str,
        sasl: bool,
    ) -> Result<TlsServer, TlsConfigError> {
        let lower = listener.to_ascii_lowercase();
        let view = ListenerProps::of_listener(props, &lower);
        let (config, client_auth) = server_config(&view, sasl)?;
        let mapper = match view.get_with_key(SSL_PRINCIPAL_MAPPING_RULES) {
            Some((key, rules)) => SslPrincipalMapper::parse(rules).map_err(|e| invalid(key, e))?,
            None => SslPrincipalMapper::default(),
        };
        Ok(TlsServer {
            listener: listener.to_string(),
            sasl,
            props: props.clone(),
            config: Current::new(config),
            client_auth,
            mapper,
        })
    }

    /// Reads the keystore and truststore again; connections accepted afterwards use them. On
    /// error the old ones stay in use.
    pub fn reload(&self) -> Result<(), TlsConfigError> {
        let lower = self.listener.to_ascii_lowercase();
        let view = ListenerProps::of_listener(&self.props, &lower);
        let (config, _) = server_config(&view, self.sasl)?;
        self.config.set(config);
        Ok(())
    }

    /// Whether client certificates are asked for.
    pub fn client_auth(&self) -> ClientAuth {
        self.client_auth
    }

    /// Runs the server side of a handshake on `stream` (within [`HANDSHAKE_TIMEOUT`]); returns
    /// the encrypted stream and the client certificate's principal (`None`: no certificate).
    pub async fn accept<S>(
        &self,
        stream: S,
    ) -> Result<(BoxStream, Option<KafkaPrincipal>), TlsError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.get());
        let tls = handshake(acceptor.accept(stream)).await?;
        let principal = match tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
            Some(leaf) => {
                let dn = subject_name(leaf)?;
                Some(KafkaPrincipal::user(self.mapper.name_for(&dn)?))
            }
            None => None,
        };
        Ok((Box::new(tls), principal))
    }
}

/// Why a TLS connection failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the TLS handshake took longer than {HANDSHAKE_TIMEOUT:?}")]
    Timeout,
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error(transparent)]
    Principal(#[from] PrincipalError),
    #[error("{0:?} is not a valid TLS server name")]
    BadServerName(String),
}

fn server_config(
    props: &ListenerProps<'_>,
    sasl: bool,
) -> Result<(Arc<ServerConfig>, ClientAuth), TlsConfigError> {
    let identity = identity(props)?.ok_or_else(|| {
        invalid(
            props
                .prefixed_key(SSL_KEYSTORE_LOCATION)
                .unwrap_or_else(|| SSL_KEYSTORE_LOCATION.into()),
            "a TLS listener needs a keystore (ssl.keystore.location, or \
             ssl.keystore.certificate.chain with ssl.keystore.key)",
        )
    })?;
    let provider = provider(props)?;
    let versions = protocol_versions(props)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| invalid(SSL_ENABLED_PROTOCOLS, e.to_string()))?;
    let auth = client_auth(props, sasl)?;
    let roots = trust_roots(props)?;
    let builder = match auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let roots = roots.ok_or_else(|| {
                invalid(
                    SSL_TRUSTSTORE_LOCATION,
                    "ssl.client.auth asks for client certificates but no truststore is set to \
                     verify them",
                )
            })?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            }
            .build()
            .map_err(|e| invalid(SSL_TRUSTSTORE_LOCATION, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(identity.chain, identity.key)
        .map_err(|e| {
            invalid(
                SSL_KEYSTORE_LOCATION,
                format!("the key does not fit the certificate: {e}"),
            )
        })?;
    Ok((Arc::new(config), auth))
}

/// The node's outgoing TLS (to another broker's or a controller's listener), from the same
/// settings as a client's: truststore, optional keystore (mutual TLS), protocols, suites, and
/// whether the server's host name is checked.
#[derive(Debug)]
pub struct TlsClient {
    props: std::collections::BTreeMap<String, String>,
    listener: Option<String>,
    config: Current<ClientConfig>,
}

impl TlsClient {
    /// From listener `listener`'s settings (`Some`: `listener.name.<name>.` first) or from plain
    /// client settings (`None`).
    pub fn new(
        props: &std::collections::BTreeMap<String, String>,
        listener: Option<&str>,
    ) -> Result<TlsClient, TlsConfigError> {
        let listener = listener.map(str::to_ascii_lowercase);
        let config = client_config(&ListenerProps {
            props,
            listener: listener.as_deref(),
        })?;
        Ok(TlsClient {
            props: props.clone(),
            listener,
            config: Current::new(config),
        })
    }

    /// Reads the keystore and truststore again.
    pub fn reload(&self) -> Result<(), TlsConfigError> {
        let config = client_config(&ListenerProps {
            props: &self.props,
            listener: self.listener.as_deref(),
        })?;
        self.config.set(config);
        Ok(())
    }

    /// Runs the client side of a handshake with `host` on `stream`.
    pub async fn connect<S>(&self, host: &str, stream: S) -> Result<BoxStream, TlsError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let name = ServerName::try_from(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        )
        .map_err(|_| TlsError::BadServerName(host.to_string()))?;
        let connector = tokio_rustls::TlsConnector::from(self.config.get());
        Ok(Box::new(handshake(connector.connect(name, stream)).await?))
    }
}

fn client_config(props: &ListenerProps<'_>) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let provider = provider(props)?;
    let versions = protocol_versions(props)?;
    let roots = trust_roots(props)?.ok_or_else(|| {
        invalid(
            SSL_TRUSTSTORE_LOCATION,
            "outgoing TLS needs a truststore (ssl.truststore.location or \
             ssl.truststore.certificates) holding the CA that signed the servers' certificates",
        )
    })?;
    let roots = Arc::new(roots);
    let check_host = props
        .get(SSL_ENDPOINT_IDENTIFICATION_ALGORITHM)
        .is_none_or(|v| !v.trim().is_empty());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| invalid(SSL_ENABLED_PROTOCOLS, e.to_string()))?;
    let builder = if check_host {
        builder.with_root_certificates(roots)
    } else {
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| invalid(SSL_TRUSTSTORE_LOCATION, e.to_string()))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyHostName(inner)))
    };
    let config = match identity(props)? {
        Some(identity) => builder
            .with_client_auth_cert(identity.chain, identity.key)
            .map_err(|e| invalid(SSL_KEYSTORE_LOCATION, e.to_string()))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Verifies the server's chain against the truststore but not its host name
/// (`ssl.endpoint.identification.algorithm=`, as Kafka allows).
#[derive(Debug)]
struct AnyHostName(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;
