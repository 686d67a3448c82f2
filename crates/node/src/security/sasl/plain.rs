//! SASL/PLAIN (RFC 4616) with Kafka's users: the server's users are the `user_<name>="password"`
//! options of `listener.name.<l>.plain.sasl.jaas.config` (Kafka's `PlainLoginModule` and
//! `PlainServerCallbackHandler`); the node's own identity for its outgoing connections is that
//! configuration's `username` / `password`. Passwords are compared in constant time. PLAIN
//! sends the password as it is: use it over TLS (SASL_SSL).

use std::collections::BTreeMap;

use super::jaas::JaasEntry;
use super::{
    constant_time_eq, invalid, ClientExchange, ClientMechanism, ExchangeContext, Failure,
    MechanismProps, SaslConfigError, ServerExchange, ServerMechanism, Step, PLAIN,
};

/// Kafka's PLAIN login module class.
pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";

/// The longest user name or password accepted (RFC 4616 asks for at least 255 octets).
const MAX_FIELD_BYTES: usize = 1024;

/// The server side: the listener's users.
pub struct PlainServer {
    users: BTreeMap<String, String>,
}

impl std::fmt::Debug for PlainServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the passwords.
        f.debug_struct("PlainServer")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl PlainServer {
    /// The users of the PLAIN JAAS configuration of a listener.
    pub fn from_props(props: &MechanismProps<'_>) -> Result<PlainServer, SaslConfigError> {
        let (key, entries) = props.jaas()?.ok_or_else(|| {
            invalid(
                format!(
                    "listener.name.<listener>.plain.{}",
                    super::SASL_JAAS_CONFIG
                ),
                format!(
                    "PLAIN is enabled but no JAAS configuration names its users ({PLAIN_LOGIN_MODULE} \
                     required user_<name>=\"<password>\" ...;)"
                ),
            )
        })?;
        let entry = plain_entry(&key, &entries)?;
        let users: BTreeMap<String, String> = entry
            .options
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("user_")
                    .map(|user| (user.to_string(), v.clone()))
            })
            .collect();
        Ok(PlainServer { users })
    }

    /// A server with these users (tests).
    pub fn with_users(users: BTreeMap<String, String>) -> PlainServer {
        PlainServer { users }
    }
}

fn plain_entry<'a>(key: &str, entries: &'a [JaasEntry]) -> Result<&'a JaasEntry, SaslConfigError> {
    entries
        .iter()
        .find(|e| e.module == PLAIN_LOGIN_MODULE)
        .ok_or_else(|| invalid(key, format!("names no {PLAIN_LOGIN_MODULE}")))
}

impl ServerMechanism for PlainServer {
    fn name(&self) -> &'static str {
        PLAIN
    }

    fn start(&self, _context: &ExchangeContext) -> Box<dyn ServerExchange> {
        Box::new(PlainExchange {
            users: self.users.clone(),
        })
    }
}

struct PlainExchange {
    users: BTreeMap<String, String>,
}

impl ServerExchange for PlainExchange {
    // Kafka's PlainSaslServer.evaluateResponse: its checks and messages, in its order.
    fn step(&mut self, token: &[u8]) -> Result<Step, Failure> {
        let text = std::str::from_utf8(token)
            .map_err(|_| Failure::new("Invalid SASL/PLAIN response: not UTF-8"))?;
        let tokens: Vec<&str> = text.splitn(4, '\0').collect();
        if tokens.len() != 3 {
            return Err(Failure::new(format!(
                "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
                tokens.len()
            )));
        }
        let (authorization_id, username, password) = (tokens[0], tokens[1], tokens[2]);
        if username.is_empty() {
            return Err(Failure::new(
                "Authentication failed: username not specified",
            ));
        }
        if password.is_empty() {
            return Err(Failure::new(
                "Authentication failed: password not specified",
            ));
        }
        if username.len() > MAX_FIELD_BYTES || password.len() > MAX_FIELD_BYTES {
            return Err(Failure::new(
                "Authentication failed: Invalid username or password",
            ));
        }
        // Compare against a stand-in for unknown users too, so timing does not tell whether a
        // user exists.
        let expected = self.users.get(username);
        let matches = constant_time_eq(
            password.as_bytes(),
            expected.map_or(b"\0unknown-user\0".as_slice(), |p| p.as_bytes()),
        ) && expected.is_some();
        if !matches {
            return Err(Failure {
                client_message: "Authentication failed: Invalid username or password".into(),
                reason: format!("invalid username or password for user {username:?}"),
            });
        }
        if !authorization_id.is_empty() && authorization_id != username {
            return Err(Failure::new(
                "Authentication failed: Client requested an authorization id that is different from username",
            ));
        }
        Ok(Step::Done {
            response: Vec::new(),
            principal: username.to_string(),
            expires_at_ms: None,
        })
    }
}

/// The client side: one identity.
pub struct PlainClient {
    username: String,
    password: String,
}

impl std::fmt::Debug for PlainClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainClient")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl PlainClient {
    /// The `username` / `password` options of a PLAIN JAAS configuration.
    pub fn from_jaas(key: &str, entries: &[JaasEntry]) -> Result<PlainClient, SaslConfigError> {
        let entry = plain_entry(key, entries)?;
        let get = |option: &str| {
            entry
                .options
                .get(option)
                .cloned()
                .ok_or_else(|| invalid(key, format!("has no {option} option")))
        };
        Ok(PlainClient {
            username: get("username")?,
            password: get("password")?,
        })
    }

    /// A client with this identity.
    pub fn new(username: &str, password: &str) -> PlainClient {
        PlainClient {
            username: username.to_string(),
            password: password.to_string(),
        }
    }
}

impl ClientMechanism for PlainClient {
    fn name(&self) -> &'static str {
        PLAIN
    }

    fn start(&self) -> Box<dyn ClientExchange> {
        Box::new(PlainClientExchange {
            token: Some(format!("\0{}\0{}", self.username, self.password).into_bytes()),
        })
    }
}

struct PlainClientExchange {
    token: Option<Vec<u8>>,
}

impl ClientExchange for PlainClientExchange {
    fn initial(&mut self) -> Result<Vec<u8>, String> {
        self.token
            .take()
            .ok_or_else(|| "the PLAIN token was already sent".to_string())
    }

    fn step(&mut self, _challenge: &[u8]) -> Result<Option<Vec<u8>>, String> {
        // The server's answer to the only token ends the exchange.
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::security::sasl::NoCredentials;

    fn context() -> ExchangeContext {
        ExchangeContext {
            credentials: Arc::new(NoCredentials),
            clock: Arc::new(crate::clock::SystemClock),
        }
    }

    fn exchange(token: &[u8]) -> Result<Step, Failure> {
        let users = [("alice".to_string(), "alice-secret".to_string())]
            .into_iter()
            .collect();
        PlainServer::with_users(users).start(&context()).step(token)
    }

    // Shows: Kafka's PlainSaslServer answers — a right password authenticates as the user (an
    // authorization id equal to it is fine), a wrong one or an unknown user gets the same
    // message, malformed tokens and a different authorization id are refused.
    #[test]
    fn plain_server_answers_as_kafka() {
        assert_eq!(
            exchange(b"\0alice\0alice-secret"),
            Ok(Step::Done {
                response: vec![],
                principal: "alice".into(),
                expires_at_ms: None
            })
        );
        assert!(exchange(b"alice\0alice\0alice-secret").is_ok());
        let wrong = exchange(b"\0alice\0nope").unwrap_err();
        let unknown = exchange(b"\0mallory\0alice-secret").unwrap_err();
        assert_eq!(
            wrong.client_message,
            "Authentication failed: Invalid username or password"
        );
        assert_eq!(wrong.client_message, unknown.client_message);
        assert!(!wrong.reason.contains("nope"), "{}", wrong.reason);
        assert_eq!(
            exchange(b"\0alice").unwrap_err().client_message,
            "Invalid SASL/PLAIN response: expected 3 tokens, got 2"
        );
        assert_eq!(
            exchange(b"a\0b\0c\0d").unwrap_err().client_message,
            "Invalid SASL/PLAIN response: expected 3 tokens, got 4"
        );
        assert_eq!(
            exchange(b"\0\0x").unwrap_err().client_message,
            "Authentication failed: username not specified"
        );
        assert_eq!(
            exchange(b"\0alice\0").unwrap_err().client_message,
            "Authentication failed: password not specified"
        );
        assert!(exchange(b"bob\0alice\0alice-secret")
            .unwrap_err()
            .client_message
            .contains("authorization id"));
    }

    // Shows: the server's users and the node's own identity come from Kafka's JAAS line; a
    // configuration naming another module, or a client line without a password, is refused.
    #[test]
    fn users_and_identity_from_jaas() {
        let props: BTreeMap<String, String> = [(
            "listener.name.sasl_ssl.plain.sasl.jaas.config".to_string(),
            format!("{PLAIN_LOGIN_MODULE} required username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" user_alice=\"a\";"),
        )]
        .into_iter()
        .collect();
        let view = MechanismProps::new(&props, "sasl_ssl", PLAIN);
        let server = PlainServer::from_props(&view).unwrap();
        assert_eq!(server.users.len(), 2);
        assert!(!format!("{server:?}").contains("admin-secret"));
        let (key, entries) = view.jaas().unwrap().unwrap();
        let client = PlainClient::from_jaas(&key, &entries).unwrap();
        let mut exchange = client.start();
        let token = exchange.initial().unwrap();
        assert!(matches!(
            server.start(&context()).step(&token),
            Ok(Step::Done { principal, .. }) if principal == "admin"
        ));
        let other = crate::security::sasl::jaas::parse("org.Other required user_a=\"b\";").unwrap();
        assert!(PlainClient::from_jaas("k", &other).is_err());
        let no_password = crate::security::sasl::jaas::parse(&format!(
            "{PLAIN_LOGIN_MODULE} required username=\"a\";"
        ))
        .unwrap();
        assert!(PlainClient::from_jaas("k", &no_password).is_err());
        let none: BTreeMap<String, String> = BTreeMap::new();
        assert!(PlainServer::from_props(&MechanismProps::new(&none, "sasl_ssl", PLAIN)).is_err());
    }
}
