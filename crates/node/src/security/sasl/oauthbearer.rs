//! SASL/OAUTHBEARER (RFC 7628, KIP-255) with signed JWTs validated as Kafka's secured validator
//! does (KIP-768: `OAuthBearerValidatorCallbackHandler`):
//!
//! - the listener enables it with
//!   `listener.name.<l>.oauthbearer.sasl.server.callback.handler.class=`[`VALIDATOR_CALLBACK_HANDLER`]
//!   and reads its keys from `sasl.oauthbearer.jwks.endpoint.url` ([`jwks`]); Kafka's default,
//!   the *unsecured* validator (which accepts unsigned tokens), is refused;
//! - the client's first message is `n,[a=<authzid>],^Aauth=Bearer <token>^A[key=value^A...]^A`
//!   (Kafka's `OAuthBearerClientInitialResponse`); a malformed one fails at once with Kafka's
//!   generic "invalid credentials" message;
//! - a token that does not validate ([`jwt`]) is answered, as Kafka's `OAuthBearerSaslServer`
//!   does, with the challenge `{"status":"invalid_token"}`; the client answers `^A` and the
//!   exchange fails with that JSON as the message (why it was refused goes to the log only);
//! - a valid token authenticates its subject claim (`sasl.oauthbearer.sub.claim.name`) as a
//!   `User` principal until its `exp` (the session lifetime, KIP-368); an authorization id other
//!   than the subject is refused; SASL extensions are accepted and ignored, as Kafka's validator
//!   accepts them all.
//!
//! Keel's own connections do not authenticate with OAUTHBEARER ([`super::client_mechanism`]
//! says so).

pub mod jwks;
pub mod jwt;

use std::sync::Arc;
use std::time::Duration;

use super::{
    invalid, ExchangeContext, Failure, MechanismProps, SaslConfigError, ServerExchange,
    ServerMechanism, Step, OAUTHBEARER,
};
use crate::clock::Clock;
use jwks::{JwksLocation, JwksSource, KeyResolver, RefreshTiming};
use jwt::{ClaimRules, Invalid, ValidToken};

/// `sasl.server.callback.handler.class` (read as
/// `listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`).
pub const SASL_SERVER_CALLBACK_HANDLER_CLASS: &str = "sasl.server.callback.handler.class";
/// Kafka's secured validator (KIP-768), the class that makes a broker verify signed JWTs.
pub const VALIDATOR_CALLBACK_HANDLER: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler";
/// The same validator's Kafka 3.1–3.x name (deprecated there), accepted too.
pub const VALIDATOR_CALLBACK_HANDLER_3X: &str =
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler";
/// Kafka's default for OAUTHBEARER: it accepts unsigned tokens, so Keel refuses it.
pub const UNSECURED_VALIDATOR_CALLBACK_HANDLER: &str = "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler";
/// Kafka's OAUTHBEARER login module (what a broker's `oauthbearer.sasl.jaas.config` names).
pub const OAUTHBEARER_LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";

/// `sasl.oauthbearer.jwks.endpoint.url`.
pub const SASL_OAUTHBEARER_JWKS_ENDPOINT_URL: &str = "sasl.oauthbearer.jwks.endpoint.url";
/// `sasl.oauthbearer.jwks.endpoint.refresh.ms` (Kafka's default: one hour).
pub const SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS: &str =
    "sasl.oauthbearer.jwks.endpoint.refresh.ms";
pub const SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS_DEFAULT: i64 = 3_600_000;
/// `sasl.oauthbearer.jwks.endpoint.retry.backoff.ms` (default 100).
pub const SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS: &str =
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms";
pub const SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS_DEFAULT: i64 = 100;
/// `sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms` (default 10000).
pub const SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS: &str =
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms";
pub const SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS_DEFAULT: i64 = 10_000;
/// `sasl.oauthbearer.clock.skew.seconds` (default 30).
pub const SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS: &str = "sasl.oauthbearer.clock.skew.seconds";
pub const SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS_DEFAULT: i64 = 30;
/// The largest clock skew accepted (Keel's bound: a day).
pub const CLOCK_SKEW_SECONDS_MAX: i64 = 86_400;
/// The longest wait accepted for the JWKS settings in ms (Keel's bound: a week).
pub const JWKS_MS_MAX: i64 = 7 * 24 * 3_600_000;
/// `sasl.oauthbearer.expected.audience` (a comma-separated list).
pub const SASL_OAUTHBEARER_EXPECTED_AUDIENCE: &str = "sasl.oauthbearer.expected.audience";
/// `sasl.oauthbearer.expected.issuer`.
pub const SASL_OAUTHBEARER_EXPECTED_ISSUER: &str = "sasl.oauthbearer.expected.issuer";
/// `sasl.oauthbearer.sub.claim.name` (default `sub`).
pub const SASL_OAUTHBEARER_SUB_CLAIM_NAME: &str = "sasl.oauthbearer.sub.claim.name";
/// `sasl.oauthbearer.scope.claim.name` (default `scope`).
pub const SASL_OAUTHBEARER_SCOPE_CLAIM_NAME: &str = "sasl.oauthbearer.scope.claim.name";

/// What the client is told about any token the validator refuses (Kafka's
/// `OAuthBearerSaslServer.jsonErrorResponse` with `OAuthBearerValidatorCallbackHandler`'s
/// `invalid_token` status).
pub const INVALID_TOKEN_JSON: &str = "{\"status\":\"invalid_token\"}";

/// RFC 7628's separator (`kvsep`), `^A`.
const SEPARATOR: char = '\u{1}';

/// The server side of OAUTHBEARER on one listener.
#[derive(Debug, Clone)]
pub struct OAuthBearerServer {
    resolver: KeyResolver,
    rules: Arc<ClaimRules>,
}

fn ms_setting(
    props: &MechanismProps<'_>,
    key: &str,
    default: i64,
    min: i64,
) -> Result<i64, SaslConfigError> {
    match props.get_with_key(key) {
        None => Ok(default),
        Some((key, text)) => text
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|v| (min..=JWKS_MS_MAX).contains(v))
            .ok_or_else(|| {
                invalid(
                    key,
                    format!("{text:?} is not a number of ms from {min} to {JWKS_MS_MAX}"),
                )
            }),
    }
}

/// Kafka's `ConfigurationUtils.validateString`: trimmed, not empty.
fn string_setting(
    props: &MechanismProps<'_>,
    key: &str,
) -> Result<Option<String>, SaslConfigError> {
    match props.get_with_key(key) {
        None => Ok(None),
        Some((key, text)) => match text.trim() {
            "" => Err(invalid(key, "must not be empty or only whitespace")),
            value => Ok(Some(value.to_string())),
        },
    }
}

/// The PEM roots an https JWKS endpoint is trusted with: the JAAS options
/// `ssl.truststore.certificates` or `ssl.truststore.location` (Kafka's `JaasOptionsUtils`
/// builds the endpoint's TLS from the JAAS options), PEM only.
fn jaas_truststore(
    key: &str,
    options: &std::collections::BTreeMap<String, String>,
) -> Result<Option<Vec<u8>>, SaslConfigError> {
    if let Some(kind) = options.get("ssl.truststore.type") {
        if !kind.eq_ignore_ascii_case("PEM") {
            return Err(invalid(
                key,
                format!("ssl.truststore.type {kind:?}: only PEM truststores are supported"),
            ));
        }
    }
    if let Some(inline) = options.get("ssl.truststore.certificates") {
        return Ok(Some(inline.clone().into_bytes()));
    }
    match options.get("ssl.truststore.location") {
        None => Ok(None),
        Some(path) => {
            let mut bytes = Vec::new();
            std::fs::File::open(path)
                .and_then(|f| {
                    std::io::Read::read_to_end(
                        &mut std::io::Read::take(f, jwks::JWKS_MAX_BYTES),
                        &mut bytes,
                    )
                })
                .map_err(|e| invalid(key, format!("ssl.truststore.location {path:?}: {e}")))?;
            Ok(Some(bytes))
        }
    }
}

impl OAuthBearerServer {
    /// The validator of a listener's `oauthbearer` settings; reads the JWKS now.
    pub fn from_props(props: &MechanismProps<'_>) -> Result<OAuthBearerServer, SaslConfigError> {
        let handler_key = props.mechanism_key(SASL_SERVER_CALLBACK_HANDLER_CLASS);
        // Kafka reads a server callback handler only with the listener and mechanism prefix
        // (SaslChannelBuilder.createServerCallbackHandlers).
        let handler = props
            .get_with_key(SASL_SERVER_CALLBACK_HANDLER_CLASS)
            .filter(|(key, _)| *key == handler_key)
            .map(|(_, v)| v.trim());
        match handler {
            Some(VALIDATOR_CALLBACK_HANDLER | VALIDATOR_CALLBACK_HANDLER_3X) => {}
            Some(UNSECURED_VALIDATOR_CALLBACK_HANDLER) => {
                return Err(invalid(
                    handler_key,
                    format!(
                        "Kafka's unsecured OAUTHBEARER validator accepts unsigned tokens and is \
                         for development only; Keel refuses it. Set {VALIDATOR_CALLBACK_HANDLER} \
                         and {SASL_OAUTHBEARER_JWKS_ENDPOINT_URL}"
                    ),
                ))
            }
            Some(other) => {
                return Err(invalid(
                    handler_key,
                    format!(
                        "{other:?}: Keel loads no Java classes; {VALIDATOR_CALLBACK_HANDLER} (JWTs \
                         verified against {SASL_OAUTHBEARER_JWKS_ENDPOINT_URL}) is the validator it \
                         implements"
                    ),
                ))
            }
            None => {
                return Err(invalid(
                    handler_key,
                    format!(
                        "OAUTHBEARER is enabled but no validator is set: Kafka's default is its \
                         unsecured validator (unsigned tokens), which Keel refuses. Set it to \
                         {VALIDATOR_CALLBACK_HANDLER}"
                    ),
                ))
            }
        }
        let jaas = props.jaas()?;
        let truststore = match &jaas {
            None => None,
            Some((key, entries)) => {
                let entry = entries
                    .iter()
                    .find(|e| e.module == OAUTHBEARER_LOGIN_MODULE)
                    .ok_or_else(|| invalid(key, format!("names no {OAUTHBEARER_LOGIN_MODULE}")))?;
                jaas_truststore(key, &entry.options)?
            }
        };
        let (url_key, url) = props
            .get_with_key(SASL_OAUTHBEARER_JWKS_ENDPOINT_URL)
            .ok_or_else(|| {
                invalid(
                    props.mechanism_key(SASL_OAUTHBEARER_JWKS_ENDPOINT_URL),
                    "the OAUTHBEARER validator needs the identity provider's JWKS: a file:, \
                     http:// or https:// URL",
                )
            })?;
        let location = JwksLocation::parse(url).map_err(|e| invalid(&url_key, e))?;
        if let JwksLocation::File(path) = &location {
            // Kafka's ConfigurationUtils.validateFile.
            let meta = std::fs::metadata(path)
                .map_err(|e| invalid(&url_key, format!("{}: {e}", path.display())))?;
            if !meta.is_file() {
                return Err(invalid(
                    &url_key,
                    format!("{} is not a file", path.display()),
                ));
            }
        }
        let refresh_ms = ms_setting(
            props,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS_DEFAULT,
            1,
        )?;
        let backoff_ms = ms_setting(
            props,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS_DEFAULT,
            0,
        )?;
        let backoff_max_ms = ms_setting(
            props,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS_DEFAULT,
            0,
        )?;
        if backoff_max_ms < backoff_ms {
            // Kafka's Retry constructor.
            return Err(invalid(
                props.mechanism_key(SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS),
                format!(
                    "{backoff_max_ms} is less than {SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS} \
                     ({backoff_ms})"
                ),
            ));
        }
        let rules = rules_from_props(props)?;
        let source = JwksSource::new(location, truststore.as_deref()).map_err(|e| {
            invalid(
                jaas.as_ref()
                    .map_or(url_key.clone(), |(key, _)| key.clone()),
                e,
            )
        })?;
        let millis = |ms: i64| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        let resolver = KeyResolver::start(
            source,
            RefreshTiming {
                refresh: millis(refresh_ms),
                retry_backoff: millis(backoff_ms),
                retry_backoff_max: millis(backoff_max_ms),
            },
        )
        .map_err(|e| {
            invalid(
                &url_key,
                format!("the verification keys could not be read: {e}"),
            )
        })?;
        Ok(OAuthBearerServer::new(resolver, rules))
    }

    /// A validator with these keys and rules.
    pub fn new(resolver: KeyResolver, rules: ClaimRules) -> OAuthBearerServer {
        OAuthBearerServer {
            resolver,
            rules: Arc::new(rules),
        }
    }
}

/// The claim rules of a listener (Kafka's `AccessTokenValidatorFactory.create`).
fn rules_from_props(props: &MechanismProps<'_>) -> Result<ClaimRules, SaslConfigError> {
    let clock_skew_seconds = match props.get_with_key(SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS) {
        None => SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS_DEFAULT,
        Some((key, text)) => text
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|s| (0..=CLOCK_SKEW_SECONDS_MAX).contains(s))
            .ok_or_else(|| {
                invalid(
                    key,
                    format!(
                        "{text:?} is not a number of seconds from 0 to {CLOCK_SKEW_SECONDS_MAX}"
                    ),
                )
            })?,
    };
    // A LIST config: comma-separated, each entry trimmed.
    let expected_audiences = props
        .get_with_key(SASL_OAUTHBEARER_EXPECTED_AUDIENCE)
        .map(|(_, text)| {
            text.split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok(ClaimRules {
        clock_skew_seconds,
        expected_audiences,
        expected_issuer: string_setting(props, SASL_OAUTHBEARER_EXPECTED_ISSUER)?,
        sub_claim: string_setting(props, SASL_OAUTHBEARER_SUB_CLAIM_NAME)?
            .unwrap_or_else(|| "sub".into()),
        scope_claim: string_setting(props, SASL_OAUTHBEARER_SCOPE_CLAIM_NAME)?
            .unwrap_or_else(|| "scope".into()),
    })
}

impl ServerMechanism for OAuthBearerServer {
    fn name(&self) -> &'static str {
        OAUTHBEARER
    }

    fn start(&self, context: &ExchangeContext) -> Box<dyn ServerExchange> {
        Box::new(OAuthBearerExchange {
            resolver: self.resolver.clone(),
            rules: self.rules.clone(),
            clock: context.clock.clone(),
            refused: None,
        })
    }
}

struct OAuthBearerExchange {
    resolver: KeyResolver,
    rules: Arc<ClaimRules>,
    clock: Arc<dyn Clock>,
    /// Why the last token was refused, once the client was sent the error challenge.
    refused: Option<String>,
}

impl OAuthBearerExchange {
    fn validate(&self, token: &str) -> Result<ValidToken, Invalid> {
        let signed = jwt::parse(token)?;
        let now_ms = self.clock.now_ms();
        let claims = match signed.verify(&self.resolver.keys()) {
            Err(Invalid::UnknownKey { kid, alg }) => {
                // Kafka's RefreshingHttpsJwksVerificationKeyResolver: this token fails, and a
                // refresh may bring its key for the next one.
                let refreshing = self.resolver.on_unknown_key(kid.as_deref(), now_ms);
                tracing::debug!(
                    location = %self.resolver.location(),
                    refreshing,
                    "no verification key suits an OAUTHBEARER token"
                );
                return Err(Invalid::UnknownKey { kid, alg });
            }
            other => other?,
        };
        jwt::check_claims(&claims, &self.rules, now_ms)
    }
}

impl ServerExchange for OAuthBearerExchange {
    // Kafka's OAuthBearerSaslServer.evaluateResponse and process.
    fn step(&mut self, token: &[u8]) -> Result<Step, Failure> {
        if token == [SEPARATOR as u8] {
            if let Some(reason) = self.refused.take() {
                return Err(Failure {
                    client_message: INVALID_TOKEN_JSON.into(),
                    reason,
                });
            }
        }
        self.refused = None;
        let response = InitialResponse::parse(token)
            .map_err(|reason| Failure::invalid_credentials(OAUTHBEARER, reason))?;
        let valid = match self.validate(&response.token) {
            Ok(valid) => valid,
            Err(why) => {
                self.refused = Some(format!("invalid OAUTHBEARER token: {why}"));
                return Ok(Step::Challenge(INVALID_TOKEN_JSON.as_bytes().to_vec()));
            }
        };
        if !response.authorization_id.is_empty() && response.authorization_id != valid.principal {
            return Err(Failure::new(format!(
                "Authentication failed: Client requested an authorization id ({}) that is \
                 different from the token's principal name ({})",
                response.authorization_id, valid.principal
            )));
        }
        Ok(Step::Done {
            response: Vec::new(),
            principal: valid.principal,
            expires_at_ms: Some(valid.expires_at_ms),
        })
    }
}

/// A client's first message (RFC 7628 §3.1, as Kafka's `OAuthBearerClientInitialResponse`
/// matches it).
#[derive(PartialEq, Eq)]
pub struct InitialResponse {
    /// `a=` (empty when absent), as sent (`=2C` / `=3D` not decoded, as Kafka).
    pub authorization_id: String,
    /// The bearer token.
    pub token: String,
    /// The SASL extensions other than `auth`.
    pub extensions: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for InitialResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("InitialResponse")
            .field("authorization_id", &self.authorization_id)
            .field("extensions", &self.extensions.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// `saslname`: one or more of `\x01`-`\x7F` but `=` and `,`, or `=2C` / `=3D`.
fn is_saslname(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'=' => match bytes.get(i + 1..i + 3) {
                Some(b"2C") | Some(b"3D") => i += 3,
                _ => return false,
            },
            b',' | 0 | 0x80.. => return false,
            _ => i += 1,
        }
    }
    !bytes.is_empty()
}

fn is_extension_key(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic())
}

fn is_extension_value(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// `auth=<scheme> <token>`: a word, spaces, then b64token characters with `=` padding only at
/// the end (Kafka's `AUTH_PATTERN`).
fn bearer_token(auth: &str) -> Result<&str, String> {
    let invalid_format = || "Invalid OAUTHBEARER client first message: invalid 'auth' format";
    let (scheme, rest) = auth.split_once(' ').ok_or_else(invalid_format)?;
    let token = rest.trim_start_matches(' ');
    let scheme_ok = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let body = token.trim_end_matches('=');
    let token_ok = !body.is_empty()
        && body.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~' | b'+' | b'/' | b'.')
        });
    if !scheme_ok || !token_ok {
        return Err(invalid_format().into());
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(format!(
            "Invalid scheme in OAUTHBEARER client first message: {}",
            jwt::truncated(scheme)
        ));
    }
    Ok(token)
}

impl InitialResponse {
    /// Parses a client's first message; the error is Kafka's `SaslException` text.
    pub fn parse(bytes: &[u8]) -> Result<InitialResponse, String> {
        let bad = || "Invalid OAUTHBEARER client first message".to_string();
        let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let rest = text.strip_prefix("n,").ok_or_else(bad)?;
        let (authorization_id, rest) = match rest.strip_prefix("a=") {
            Some(after) => {
                let (name, rest) = after.split_once(',').ok_or_else(bad)?;
                if !is_saslname(name) {
                    return Err(bad());
                }
                (name.to_string(), rest)
            }
            None => (String::new(), rest.strip_prefix(',').ok_or_else(bad)?),
        };
        // ^A, then key=value^A pairs, then the closing ^A.
        let pairs = rest
            .strip_prefix(SEPARATOR)
            .and_then(|r| r.strip_suffix(SEPARATOR))
            .ok_or_else(bad)?;
        let mut extensions = std::collections::BTreeMap::new();
        if !pairs.is_empty() {
            let pairs = pairs.strip_suffix(SEPARATOR).ok_or_else(bad)?;
            for pair in pairs.split(SEPARATOR) {
                let (key, value) = pair.split_once('=').ok_or_else(bad)?;
                if !is_extension_key(key) || !is_extension_value(value) {
                    return Err(bad());
                }
                // Kafka's Utils.parseMap: a later value of a key wins.
                extensions.insert(key.to_string(), value.to_string());
            }
        }
        let auth = extensions.remove("auth").ok_or_else(|| {
            "Invalid OAUTHBEARER client first message: 'auth' not specified".to_string()
        })?;
        let token = bearer_token(&auth)?.to_string();
        Ok(InitialResponse {
            authorization_id,
            token,
            extensions,
        })
    }
}

#[cfg(test)]
mod tests;
