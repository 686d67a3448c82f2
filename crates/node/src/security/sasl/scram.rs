//! SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them
//! (`ScramSaslServer`, `ScramSaslClient`, `ScramMessages`, `ScramFormatter`): the server side
//! verifies a client's proof against the credentials in the metadata image
//! ([`super::Credentials`]); the client side is what Keel's own connections authenticate with
//! (the `username` / `password` of `org.apache.kafka.common.security.scram.ScramLoginModule`).
//!
//! The exchange: client-first `n,[a=<authzid>],n=<saslname>,r=<nonce>[,<ext>]`, server-first
//! `r=<nonce+server nonce>,s=<salt>,i=<iterations>`, client-final
//! `c=<base64 gs2 header>,r=<nonce>,p=<proof>`, server-final `v=<server signature>`. As Kafka:
//! only the `n` GS2 flag's meaning (no channel binding: `p=` is refused, `y` accepted as RFC 5802
//! §6 allows a server without channel binding), user names in saslname form (`=2C` for `,`,
//! `=3D` for `=`), an authorization id must be the user name, the `tokenauth` extension
//! (delegation tokens, which Keel does not have) is refused, other extensions are ignored,
//! 4096 ≤ iterations ≤ 16384.
//!
//! Failures tell the client only Kafka's "Authentication failed during authentication due to
//! invalid credentials with SASL mechanism SCRAM-SHA-…" (`SaslServerAuthenticator` for a
//! `SaslException`); the reason goes to the log. Unlike Kafka — which fails an unknown user at
//! the client-first message — Keel answers an unknown user with a server-first message whose
//! salt looks like a real one (a keyed hash of the name, the same on every attempt) and fails
//! at the proof, so the step of the failure does not say whether the user exists. Proofs and
//! signatures are compared in constant time.

use std::sync::{Arc, OnceLock};

use base64::Engine;
use keel_controller::scram::{self as credentials, ScramCredentialData, ScramMechanism};

use super::jaas::JaasEntry;
use super::{
    constant_time_eq, invalid, ClientExchange, ClientMechanism, Credentials, ExchangeContext,
    Failure, MechanismProps, SaslConfigError, ServerExchange, ServerMechanism, Step,
};
use crate::clock::Clock;

/// Kafka's SCRAM login module class.
pub const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";
/// Kafka's delegation-token extension (`ScramLoginModule.TOKEN_AUTH_CONFIG`).
pub const TOKEN_AUTH: &str = "tokenauth";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// `Hi(password, salt, iterations)` (RFC 5802 §2.2): PBKDF2 with the mechanism's HMAC and one
/// block of output.
pub fn salted_password(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let mut out = vec![0u8; mechanism.hash_bytes()];
    match mechanism {
        ScramMechanism::Sha256 => {
            pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, iterations, &mut out)
        }
        ScramMechanism::Sha512 => {
            pbkdf2::pbkdf2_hmac::<sha2::Sha512>(password, salt, iterations, &mut out)
        }
    }
    out
}

/// The credential of `password` with `salt` and `iterations`: what `keel format --add-scram`
/// and AlterUserScramCredentials (after the client's `Hi`) store.
pub fn credential_of_password(
    mechanism: ScramMechanism,
    password: &str,
    salt: &[u8],
    iterations: i32,
) -> ScramCredentialData {
    let salted = salted_password(
        mechanism,
        password.as_bytes(),
        salt,
        u32::try_from(iterations).unwrap_or(0),
    );
    ScramCredentialData::from_salted_password(mechanism, salt, &salted, iterations)
}

/// Kafka's random strings (`ScramFormatter.secureRandomString`): a 130-bit number in base 36
/// (digits and lower-case letters), from 17 random bytes. Nonces and generated salts look so.
pub fn random_string(bytes: &[u8; 17]) -> String {
    let mut n = *bytes;
    n[0] &= 0x03; // 130 bits
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    while n.iter().any(|b| *b != 0) {
        let mut remainder = 0u32;
        for byte in n.iter_mut() {
            let value = (remainder << 8) | u32::from(*byte);
            *byte = u8::try_from(value / 36).expect("quotient of a 14-bit value by 36");
            remainder = value % 36;
        }
        out.push(DIGITS[remainder as usize]);
    }
    if out.is_empty() {
        out.push(b'0');
    }
    out.reverse();
    String::from_utf8(out).expect("base-36 digits are ASCII")
}

/// 17 random bytes from `clock` (the node's source of randomness, seeded in a simulation).
fn random_bytes(clock: &dyn Clock) -> [u8; 17] {
    let (a, b) = (clock.new_uuid(), clock.new_uuid());
    let mut out = [0u8; 17];
    out[..16].copy_from_slice(a.as_bytes());
    out[16] = b.as_bytes()[0];
    out
}

/// A salt as Kafka's tools make one (`ScramFormatter.secureRandomBytes`: the bytes of a
/// [`random_string`]).
pub fn random_salt(clock: &dyn Clock) -> Vec<u8> {
    random_string(&random_bytes(clock)).into_bytes()
}

/// A user name in saslname form (RFC 5802 §5.1: `=` as `=3D`, `,` as `=2C`).
pub fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// A saslname back to the user name; `None` when a `=` is not part of `=2C` or `=3D`.
pub fn unescape_name(saslname: &str) -> Option<String> {
    let mut out = String::with_capacity(saslname.len());
    let mut rest = saslname;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3)?;
        out.push(match escape {
            "=2C" => ',',
            "=3D" => '=',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// RFC 5802's `printable` (%x21-7E except `,`): what a nonce is made of.
fn is_printable_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// An extension `attr=value` (Kafka: letters, `=`, then bytes 0x01-0x7F but `,`), or `None`.
fn extension(part: &str) -> Option<(&str, &str)> {
    let (key, value) = part.split_once('=')?;
    let key_ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic());
    let value_ok = !value.is_empty() && value.bytes().all(|b| (0x01..=0x7f).contains(&b));
    (key_ok && value_ok).then_some((key, value))
}

/// Strict standard base64 (with padding), as Kafka's `Base64.getDecoder()`.
fn base64(text: &str) -> Option<Vec<u8>> {
    B64.decode(text).ok()
}

/// A parsed client-first message.
#[derive(Debug, PartialEq, Eq)]
struct ClientFirst {
    /// `n,,` / `y,a=…,`: what the client-final's `c=` must carry.
    gs2_header: String,
    /// The authorization id, unescaped (empty when absent).
    authzid: String,
    username: String,
    nonce: String,
    /// `client-first-message-bare`, as sent (part of the AuthMessage).
    bare: String,
    /// Whether the client asked for delegation-token authentication.
    token_auth: bool,
}

fn parse_client_first(text: &str) -> Result<ClientFirst, String> {
    let mut parts = text.splitn(3, ',');
    let flag = parts.next().unwrap_or_default();
    let authzid_part = parts.next().ok_or("no GS2 header")?;
    let bare = parts.next().ok_or("no GS2 header")?;
    if flag.starts_with("p=") {
        return Err("the client asks for channel binding, which is not supported".into());
    }
    if flag != "n" && flag != "y" {
        return Err(format!("invalid GS2 channel binding flag {flag:?}"));
    }
    let authzid = match authzid_part {
        "" => String::new(),
        a => a
            .strip_prefix("a=")
            .filter(|s| !s.is_empty())
            .and_then(unescape_name)
            .ok_or("invalid authorization id")?,
    };
    let mut attributes = bare.split(',');
    let mut first = attributes.next().unwrap_or_default();
    if first.starts_with("m=") {
        // RFC 5802 §5.1: "its presence in a client or a server message MUST cause
        // authentication failure".
        return Err("the reserved m= attribute is present".into());
    }
    let saslname = first
        .strip_prefix("n=")
        .filter(|s| !s.is_empty())
        .ok_or("no user name")?;
    let username = unescape_name(saslname).ok_or("invalid user name (a bare '=')")?;
    first = attributes.next().unwrap_or_default();
    let nonce = first
        .strip_prefix("r=")
        .filter(|n| is_printable_nonce(n))
        .ok_or("no valid nonce")?;
    let mut token_auth = false;
    for part in attributes {
        let (key, value) = extension(part).ok_or("invalid extension")?;
        if key == TOKEN_AUTH && value.eq_ignore_ascii_case("true") {
            token_auth = true;
        }
    }
    Ok(ClientFirst {
        gs2_header: format!("{flag},{authzid_part},"),
        authzid,
        username,
        nonce: nonce.to_string(),
        bare: bare.to_string(),
        token_auth,
    })
}

/// A parsed client-final message.
#[derive(Debug, PartialEq, Eq)]
struct ClientFinal {
    channel_binding: Vec<u8>,
    nonce: String,
    /// `client-final-message-without-proof`, as sent (part of the AuthMessage).
    without_proof: String,
    proof: Vec<u8>,
}

fn parse_client_final(text: &str) -> Result<ClientFinal, String> {
    let (without_proof, proof) = text.rsplit_once(",p=").ok_or("no proof")?;
    let proof = base64(proof).ok_or("the proof is not base64")?;
    let mut parts = without_proof.split(',');
    let channel_binding = parts
        .next()
        .and_then(|c| c.strip_prefix("c="))
        .and_then(base64)
        .ok_or("no valid channel binding")?;
    let nonce = parts
        .next()
        .and_then(|r| r.strip_prefix("r="))
        .filter(|n| is_printable_nonce(n))
        .ok_or("no valid nonce")?;
    for part in parts {
        extension(part).ok_or("invalid extension")?;
    }
    Ok(ClientFinal {
        channel_binding,
        nonce: nonce.to_string(),
        without_proof: without_proof.to_string(),
        proof,
    })
}

/// A parsed server-first message.
#[derive(Debug, PartialEq, Eq)]
struct ServerFirst {
    nonce: String,
    salt: Vec<u8>,
    iterations: i32,
}

fn parse_server_first(text: &str) -> Result<ServerFirst, String> {
    let mut parts = text.split(',');
    let mut first = parts.next().unwrap_or_default();
    if first.starts_with("m=") {
        return Err("the reserved m= attribute is present".into());
    }
    let nonce = first
        .strip_prefix("r=")
        .filter(|n| is_printable_nonce(n))
        .ok_or("no valid nonce")?;
    first = parts.next().unwrap_or_default();
    let salt = first
        .strip_prefix("s=")
        .and_then(base64)
        .ok_or("no valid salt")?;
    first = parts.next().unwrap_or_default();
    let iterations = first
        .strip_prefix("i=")
        .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|i| i.parse::<i32>().ok())
        .ok_or("no valid iteration count")?;
    for part in parts {
        extension(part).ok_or("invalid extension")?;
    }
    Ok(ServerFirst {
        nonce: nonce.to_string(),
        salt,
        iterations,
    })
}

// -- the server side ------------------------------------------------------------------------

/// The key of the made-up salts unknown users get: drawn once per process from the operating
/// system (not part of a simulation), so every listener of the process answers an unknown
/// name with the same salt on every attempt.
fn unknown_user_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key
    })
}

/// What an unknown user is answered with: a salt like Kafka's tools make (a keyed hash of the
/// mechanism and name in [`random_string`] form), Kafka's default iterations, and keys no proof
/// matches.
fn unknown_user_credential(mechanism: ScramMechanism, user: &str) -> ScramCredentialData {
    let key = unknown_user_key();
    let derive = |label: &str| {
        let mut data = Vec::with_capacity(label.len() + user.len() + 16);
        data.extend_from_slice(label.as_bytes());
        data.push(0);
        data.extend_from_slice(mechanism.name().as_bytes());
        data.push(0);
        data.extend_from_slice(user.as_bytes());
        ScramMechanism::Sha256.hmac(key, &data)
    };
    let seed = derive("salt");
    let mut bytes = [0u8; 17];
    bytes.copy_from_slice(&seed[..17]);
    let n = mechanism.hash_bytes();
    let mut stored_key = derive("stored");
    stored_key.resize(n, 0);
    let mut server_key = derive("server");
    server_key.resize(n, 0);
    ScramCredentialData {
        salt: random_string(&bytes).into_bytes(),
        stored_key,
        server_key,
        iterations: credentials::DEFAULT_ITERATIONS,
    }
}

/// Kafka's message for every failure whose reason stays on the server.
fn failed(mechanism: ScramMechanism, reason: impl Into<String>) -> Failure {
    Failure::invalid_credentials(mechanism.name(), reason)
}

/// The server side of one SCRAM mechanism.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: ScramMechanism,
}

impl ScramServer {
    /// The server side of `mechanism` on a listener: its JAAS configuration, when present,
    /// must name Kafka's SCRAM login module (the server needs nothing from it; the node's own
    /// identity does).
    pub fn from_props(
        mechanism: ScramMechanism,
        props: &MechanismProps<'_>,
    ) -> Result<ScramServer, SaslConfigError> {
        if let Some((key, entries)) = props.jaas()? {
            scram_entry(&key, &entries)?;
        }
        Ok(ScramServer { mechanism })
    }

    /// The server side of `mechanism`.
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer { mechanism }
    }
}

impl ServerMechanism for ScramServer {
    fn name(&self) -> &'static str {
        self.mechanism.name()
    }

    fn start(&self, context: &ExchangeContext) -> Box<dyn ServerExchange> {
        let nonce = random_string(&random_bytes(context.clock.as_ref()));
        Box::new(ScramServerExchange::new(
            self.mechanism,
            context.credentials.clone(),
            nonce,
        ))
    }
}

/// What the server holds between its first and the client's last message.
struct AwaitingFinal {
    first: ClientFirst,
    server_first: String,
    nonce: String,
    credential: ScramCredentialData,
    /// Whether `credential` is the user's (false: made up for an unknown user; no proof can
    /// match).
    known: bool,
}

enum ServerState {
    ClientFirst,
    ClientFinal(Box<AwaitingFinal>),
    Done,
}

/// One client's SCRAM exchange (Kafka's `ScramSaslServer`).
pub struct ScramServerExchange {
    mechanism: ScramMechanism,
    credentials: Arc<dyn Credentials>,
    server_nonce: String,
    state: ServerState,
}

impl ScramServerExchange {
    /// An exchange that will append `server_nonce` to the client's nonce.
    fn new(
        mechanism: ScramMechanism,
        credentials: Arc<dyn Credentials>,
        server_nonce: String,
    ) -> ScramServerExchange {
        ScramServerExchange {
            mechanism,
            credentials,
            server_nonce,
            state: ServerState::ClientFirst,
        }
    }

    fn client_first(&mut self, token: &[u8]) -> Result<Vec<u8>, Failure> {
        let m = self.mechanism;
        let text = std::str::from_utf8(token)
            .map_err(|_| failed(m, "the client-first message is not UTF-8"))?;
        let first = parse_client_first(text)
            .map_err(|e| failed(m, format!("invalid client-first message: {e}")))?;
        let user = first.username.clone();
        // Kafka answers this one with its own message (a SaslAuthenticationException); it
        // says nothing about the user's existence.
        if !first.authzid.is_empty() && first.authzid != user {
            return Err(Failure::new(
                "Authentication failed: Client requested an authorization id that is different from username",
            ));
        }
        if first.token_auth {
            return Err(failed(
                m,
                format!("user {user:?} asked for delegation-token authentication (tokenauth), which Keel does not have"),
            ));
        }
        let stored = self
            .credentials
            .scram(&user, m.name())
            .map(|c| ScramCredentialData {
                salt: c.salt,
                stored_key: c.stored_key,
                server_key: c.server_key,
                iterations: c.iterations,
            });
        let (credential, known) = match stored {
            Some(c) => {
                c.check(m).map_err(|e| {
                    failed(
                        m,
                        format!("the stored credential of user {user:?} is unusable: {e}"),
                    )
                })?;
                (c, true)
            }
            None => (unknown_user_credential(m, &user), false),
        };
        let nonce = format!("{}{}", first.nonce, self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let answer = server_first.clone().into_bytes();
        self.state = ServerState::ClientFinal(Box::new(AwaitingFinal {
            first,
            server_first,
            nonce,
            credential,
            known,
        }));
        Ok(answer)
    }

    fn client_final(&mut self, token: &[u8], awaiting: &AwaitingFinal) -> Result<Step, Failure> {
        let AwaitingFinal {
            first,
            server_first,
            nonce,
            credential,
            known,
        } = awaiting;
        let (known, nonce) = (*known, nonce.as_str());
        let m = self.mechanism;
        let user = &first.username;
        let text = std::str::from_utf8(token)
            .map_err(|_| failed(m, "the client-final message is not UTF-8"))?;
        let last = parse_client_final(text).map_err(|e| {
            failed(
                m,
                format!("invalid client-final message from {user:?}: {e}"),
            )
        })?;
        // Kafka: "Invalid client nonce in the final client message." (RFC 5802 §5.1: the
        // whole nonce, client's and server's parts, exactly.)
        if last.nonce != nonce {
            return Err(failed(
                m,
                format!("invalid client nonce in the final message from {user:?}"),
            ));
        }
        if last.channel_binding != first.gs2_header.as_bytes() {
            return Err(failed(
                m,
                format!("the channel binding of {user:?} is not its GS2 header"),
            ));
        }
        let auth_message = format!("{},{server_first},{}", first.bare, last.without_proof);
        let client_signature = m.hmac(&credential.stored_key, auth_message.as_bytes());
        // ClientKey = ClientProof XOR ClientSignature; the proof holds iff H(ClientKey) is the
        // stored key (RFC 5802 §3).
        let proof_ok = last.proof.len() == client_signature.len() && {
            let client_key: Vec<u8> = last
                .proof
                .iter()
                .zip(&client_signature)
                .map(|(p, s)| p ^ s)
                .collect();
            constant_time_eq(&m.hash(&client_key), &credential.stored_key)
        };
        if !proof_ok || !known {
            let why = match known {
                true => "invalid client credentials",
                false => "no such user",
            };
            return Err(failed(m, format!("user {user:?}: {why}")));
        }
        let server_signature = m.hmac(&credential.server_key, auth_message.as_bytes());
        Ok(Step::Done {
            response: format!("v={}", B64.encode(server_signature)).into_bytes(),
            principal: user.clone(),
            expires_at_ms: None,
        })
    }
}

impl ServerExchange for ScramServerExchange {
    fn step(&mut self, token: &[u8]) -> Result<Step, Failure> {
        let state = std::mem::replace(&mut self.state, ServerState::Done);
        match state {
            ServerState::ClientFirst => self.client_first(token).map(Step::Challenge),
            ServerState::ClientFinal(awaiting) => self.client_final(token, &awaiting),
            ServerState::Done => Err(Failure::new(format!(
                "Unexpected challenge in Sasl server state COMPLETE or FAILED ({})",
                self.mechanism
            ))),
        }
    }
}

// -- the client side ------------------------------------------------------------------------

fn scram_entry<'a>(key: &str, entries: &'a [JaasEntry]) -> Result<&'a JaasEntry, SaslConfigError> {
    entries
        .iter()
        .find(|e| e.module == SCRAM_LOGIN_MODULE)
        .ok_or_else(|| invalid(key, format!("names no {SCRAM_LOGIN_MODULE}")))
}

/// The client side: one identity (Kafka's `ScramSaslClient` with `ScramLoginModule`'s
/// `username` / `password`). Its `Debug` shows no password.
pub struct ScramClient {
    mechanism: ScramMechanism,
    username: String,
    password: String,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// The `username` / `password` options of a SCRAM JAAS configuration; `tokenauth=true`
    /// (delegation tokens) is refused.
    pub fn from_jaas(
        mechanism: ScramMechanism,
        key: &str,
        entries: &[JaasEntry],
    ) -> Result<ScramClient, SaslConfigError> {
        let entry = scram_entry(key, entries)?;
        if entry
            .options
            .get(TOKEN_AUTH)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return Err(invalid(
                key,
                "tokenauth=true asks for delegation-token authentication, which Keel does not have",
            ));
        }
        let get = |option: &str| {
            entry
                .options
                .get(option)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| invalid(key, format!("has no {option} option")))
        };
        Ok(ScramClient {
            mechanism,
            username: get("username")?,
            password: get("password")?,
        })
    }

    /// A client with this identity.
    pub fn new(mechanism: ScramMechanism, username: &str, password: &str) -> ScramClient {
        ScramClient {
            mechanism,
            username: username.to_string(),
            password: password.to_string(),
        }
    }
}

impl ClientMechanism for ScramClient {
    fn name(&self) -> &'static str {
        self.mechanism.name()
    }

    fn start(&self) -> Box<dyn ClientExchange> {
        // Keel's own connections draw their nonce from the operating system (the node's clock
        // is not at hand here; the simulator runs no SASL).
        let mut bytes = [0u8; 17];
        bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        bytes[16] = uuid::Uuid::new_v4().as_bytes()[0];
        Box::new(ScramClientExchange::new(
            self.mechanism,
            &self.username,
            &self.password,
            random_string(&bytes),
        ))
    }
}

enum ClientState {
    First,
    ServerFirst { bare: String },
    ServerFinal { server_signature: Vec<u8> },
    Done,
}

/// One exchange of Keel's client with a server.
struct ScramClientExchange {
    mechanism: ScramMechanism,
    username: String,
    password: String,
    nonce: String,
    state: ClientState,
}

impl ScramClientExchange {
    fn new(
        mechanism: ScramMechanism,
        username: &str,
        password: &str,
        nonce: String,
    ) -> ScramClientExchange {
        ScramClientExchange {
            mechanism,
            username: username.to_string(),
            password: password.to_string(),
            nonce,
            state: ClientState::First,
        }
    }

    fn server_first(&mut self, bare: &str, challenge: &[u8]) -> Result<Vec<u8>, String> {
        let m = self.mechanism;
        let text = std::str::from_utf8(challenge)
            .map_err(|_| "the server-first message is not UTF-8".to_string())?;
        let first =
            parse_server_first(text).map_err(|e| format!("invalid server-first message: {e}"))?;
        // Kafka's ScramSaslClient: "Invalid server nonce: does not start with client nonce";
        // RFC 5802 §5.1: the server appends its own part.
        if !first.nonce.starts_with(&self.nonce) || first.nonce.len() == self.nonce.len() {
            return Err("Invalid server nonce: does not start with client nonce".into());
        }
        // Kafka checks the minimum; Keel also the maximum, so a server cannot make this node
        // spend unbounded work on one authentication.
        credentials::check_iterations(first.iterations).map_err(|e| {
            format!(
                "the server asks for {} iterations of {m} ({}; the bounds are {}..={})",
                first.iterations,
                e.message,
                credentials::MIN_ITERATIONS,
                credentials::MAX_ITERATIONS
            )
        })?;
        credentials::check_salt(&first.salt)
            .map_err(|e| format!("the server's salt is unusable: {}", e.message))?;
        let salted = salted_password(
            m,
            self.password.as_bytes(),
            &first.salt,
            u32::try_from(first.iterations).unwrap_or(0),
        );
        let without_proof = format!("c={},r={}", B64.encode(b"n,,"), first.nonce);
        let auth_message = format!("{bare},{text},{without_proof}");
        let client_key = m.client_key(&salted);
        let client_signature = m.hmac(&m.stored_key(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_signature = m.hmac(&m.server_key(&salted), auth_message.as_bytes());
        self.state = ClientState::ServerFinal { server_signature };
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }
}

impl ClientExchange for ScramClientExchange {
    fn initial(&mut self) -> Result<Vec<u8>, String> {
        if !matches!(self.state, ClientState::First) {
            return Err("the SCRAM client-first message was already sent".into());
        }
        let bare = format!("n={},r={}", escape_name(&self.username), self.nonce);
        let first = format!("n,,{bare}");
        self.state = ClientState::ServerFirst { bare };
        Ok(first.into_bytes())
    }

    fn step(&mut self, challenge: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let state = std::mem::replace(&mut self.state, ClientState::Done);
        match state {
            ClientState::ServerFirst { bare } => self.server_first(&bare, challenge).map(Some),
            ClientState::ServerFinal { server_signature } => {
                let text = std::str::from_utf8(challenge)
                    .map_err(|_| "the server-final message is not UTF-8".to_string())?;
                let first = text.split(',').next().unwrap_or_default();
                if let Some(error) = first.strip_prefix("e=") {
                    return Err(format!(
                        "Sasl authentication using {} failed with error: {error}",
                        self.mechanism
                    ));
                }
                let signature = first
                    .strip_prefix("v=")
                    .and_then(base64)
                    .ok_or("Invalid SCRAM server final message format")?;
                // Kafka's ScramSaslClient.handleServerFinalMessage.
                if !constant_time_eq(&signature, &server_signature) {
                    return Err("Invalid server signature in server final message".into());
                }
                Ok(None)
            }
            ClientState::First | ClientState::Done => Err(format!(
                "unexpected SCRAM challenge in this state ({})",
                self.mechanism
            )),
        }
    }
}

#[cfg(test)]
mod tests;
