//! SCRAM credentials in the metadata (KIP-554): the two mechanisms Kafka knows, the arithmetic
//! of RFC 5802 §3 that turns a salted password into what is stored (`StoredKey`, `ServerKey` —
//! never the password or the salted password), the bounds every credential is checked against,
//! and DescribeUserScramCredentials answered from an image.
//!
//! Kafka's sources: `ScramMechanism` (type ids, names, 4096 ≤ iterations ≤ 16384),
//! `ScramFormatter` (the key derivation), `ScramControlManager` (validation and its messages),
//! `ScramImage.describe` (DescribeUserScramCredentials). The exchange itself (nonces, proofs,
//! signatures) is the node's (`keel_node::security::sasl::scram`); this module is pure.

use std::collections::{BTreeMap, BTreeSet};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};

use crate::errors::{ApiError, ErrorCode};
use crate::image::ClusterImage;

/// The fewest iterations a credential may have (Kafka's `ScramMechanism.minIterations`, RFC
/// 7677 §4: "at least 4096").
pub const MIN_ITERATIONS: i32 = 4096;
/// The most iterations a credential may have (Kafka's `ScramMechanism.maxIterations` and
/// `ScramControlManager.MAX_ITERATIONS`): bounds the work one authentication costs both sides.
pub const MAX_ITERATIONS: i32 = 16384;
/// Iterations when none are given (Kafka's `ConfigCommand` and `kafka-storage --add-scram`).
pub const DEFAULT_ITERATIONS: i32 = 4096;
/// The longest salt accepted (Keel's bound; Kafka has none). Kafka's tools use 25–26 bytes.
pub const SALT_BYTES_MAX: usize = 1024;
/// The longest user name accepted (Keel's bound; Kafka has none): a user name lands in every
/// metadata image and snapshot.
pub const USER_NAME_BYTES_MAX: usize = 1024;

/// A SCRAM mechanism, with Kafka's type ids (`ScramMechanism.type()`: the `Mechanism` field of
/// AlterUserScramCredentials, DescribeUserScramCredentials and `UserScramCredentialRecord`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-256` (RFC 7677), type 1.
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    /// `SCRAM-SHA-512`, type 2.
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl ScramMechanism {
    /// Both mechanisms, in type order.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name` (exactly, as Kafka's `forMechanismName`).
    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's type id (1, 2; 0 is Kafka's UNKNOWN).
    pub fn type_id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism of type id `id`.
    pub fn from_type(id: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.type_id() == id)
    }

    /// The hash's output size: the size of every key and of a salted password.
    pub fn hash_bytes(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    /// `H(data)` (RFC 5802 §2.2).
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `HMAC(key, data)` (RFC 5802 §2.2; any key length, as RFC 2104).
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => {
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramMechanism::Sha512 => {
                let mut mac =
                    Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// `ClientKey := HMAC(SaltedPassword, "Client Key")` (RFC 5802 §3).
    pub fn client_key(self, salted_password: &[u8]) -> Vec<u8> {
        self.hmac(salted_password, b"Client Key")
    }

    /// `StoredKey := H(ClientKey)`.
    pub fn stored_key(self, client_key: &[u8]) -> Vec<u8> {
        self.hash(client_key)
    }

    /// `ServerKey := HMAC(SaltedPassword, "Server Key")`.
    pub fn server_key(self, salted_password: &[u8]) -> Vec<u8> {
        self.hmac(salted_password, b"Server Key")
    }
}

impl std::fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A stored credential: what verifies a client's proof and signs the server's answer. Its
/// `Debug` hides all but the iterations (Kafka's `ScramCredentialValue.toString` hides them
/// all): the keys are enough to impersonate the server, and a captured exchange plus the
/// stored key enough to impersonate the client.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentialData {
    /// The salt the client hashes its password with.
    pub salt: Vec<u8>,
    /// `H(ClientKey)`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
    /// The iteration count of `Hi` (RFC 5802 §2.2).
    pub iterations: i32,
}

impl std::fmt::Debug for ScramCredentialData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredentialData")
            .field("salt", &"[hidden]")
            .field("stored_key", &"[hidden]")
            .field("server_key", &"[hidden]")
            .field("iterations", &self.iterations)
            .finish()
    }
}

impl ScramCredentialData {
    /// The credential of a salted password (`Hi(password, salt, iterations)`, which the client
    /// computed): Kafka's `ScramFormatter.generateCredential(salt, saltedPassword, iterations)`.
    /// The salted password itself is not kept.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: i32,
    ) -> ScramCredentialData {
        ScramCredentialData {
            salt: salt.to_vec(),
            stored_key: mechanism.stored_key(&mechanism.client_key(salted_password)),
            server_key: mechanism.server_key(salted_password),
            iterations,
        }
    }

    /// Why this credential cannot be one of `mechanism`'s, if it cannot: iterations out of
    /// bounds, a salt that is empty or too long, keys that are not the hash's size.
    pub fn check(&self, mechanism: ScramMechanism) -> Result<(), String> {
        check_iterations(self.iterations).map_err(|e| e.message)?;
        check_salt(&self.salt).map_err(|e| e.message)?;
        let n = mechanism.hash_bytes();
        if self.stored_key.len() != n || self.server_key.len() != n {
            return Err(format!("keys of {mechanism} are {n} bytes"));
        }
        Ok(())
    }
}

fn unacceptable(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::UnacceptableCredential, message)
}

/// A user name a credential may have: not empty (Kafka's `ScramControlManager`: "Username must
/// not be empty"), at most [`USER_NAME_BYTES_MAX`] bytes.
pub fn check_user_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(unacceptable("Username must not be empty"));
    }
    if name.len() > USER_NAME_BYTES_MAX {
        return Err(unacceptable(format!(
            "Username must be at most {USER_NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// Iterations within Kafka's bounds, with its messages ("Too few iterations", "Too many
/// iterations").
pub fn check_iterations(iterations: i32) -> Result<(), ApiError> {
    if iterations < MIN_ITERATIONS {
        return Err(unacceptable("Too few iterations"));
    }
    if iterations > MAX_ITERATIONS {
        return Err(unacceptable("Too many iterations"));
    }
    Ok(())
}

/// A salt of 1 to [`SALT_BYTES_MAX`] bytes (Keel's bound: RFC 5802 needs a salt, Kafka does
/// not check).
pub fn check_salt(salt: &[u8]) -> Result<(), ApiError> {
    if salt.is_empty() {
        return Err(unacceptable("Salt must not be empty"));
    }
    if salt.len() > SALT_BYTES_MAX {
        return Err(unacceptable(format!(
            "Salt must be at most {SALT_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// A salted password of the hash's size: `Hi` (RFC 5802 §2.2) yields exactly one hash output
/// (Keel's check; Kafka takes any length and derives keys from it).
pub fn check_salted_password(
    mechanism: ScramMechanism,
    salted_password: &[u8],
) -> Result<(), ApiError> {
    let n = mechanism.hash_bytes();
    if salted_password.len() != n {
        return Err(unacceptable(format!(
            "Salted password must be {n} bytes for {mechanism}"
        )));
    }
    Ok(())
}

/// Kafka's message for a user described twice (`ScramImage.DESCRIBE_DUPLICATE_USER`).
pub const DESCRIBE_DUPLICATE_USER: &str =
    "Cannot describe SCRAM credentials for the same user twice in a single request: ";
/// Kafka's message for a user without credentials (`ScramImage.DESCRIBE_USER_THAT_DOES_NOT_EXIST`).
pub const DESCRIBE_USER_THAT_DOES_NOT_EXIST: &str =
    "Attempt to describe a user credential that does not exist: ";

/// One user's answer to DescribeUserScramCredentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserDescription {
    /// The user.
    pub user: String,
    /// Its credentials' mechanisms and iterations, in type order, or why there are none.
    pub credentials: Result<Vec<(ScramMechanism, i32)>, ApiError>,
}

/// DescribeUserScramCredentials from `image` (Kafka's `ScramImage.describe`): every user with a
/// credential when `users` is absent or empty (sorted by name); else each named user once, in
/// the order first named — `DUPLICATE_RESOURCE` for a user named twice,
/// `RESOURCE_NOT_FOUND` for one without credentials. Never a salt or a key.
pub fn describe(image: &ClusterImage, users: Option<&[String]>) -> Vec<UserDescription> {
    let credentials = |user: &str| -> Result<Vec<(ScramMechanism, i32)>, ApiError> {
        match image.scram_users().get(user) {
            Some(by_mechanism) if !by_mechanism.is_empty() => Ok(by_mechanism
                .iter()
                .map(|(m, c)| (*m, c.iterations))
                .collect()),
            _ => Err(ApiError::new(
                ErrorCode::ResourceNotFound,
                format!("{DESCRIBE_USER_THAT_DOES_NOT_EXIST}{user}"),
            )),
        }
    };
    match users.filter(|u| !u.is_empty()) {
        None => image
            .scram_users()
            .keys()
            .map(|user| UserDescription {
                user: user.clone(),
                credentials: credentials(user),
            })
            .collect(),
        Some(users) => {
            let mut count: BTreeMap<&str, usize> = BTreeMap::new();
            for user in users {
                *count.entry(user.as_str()).or_default() += 1;
            }
            let mut answered = BTreeSet::new();
            users
                .iter()
                .filter(|user| answered.insert(user.as_str()))
                .map(|user| UserDescription {
                    user: user.clone(),
                    credentials: match count[user.as_str()] {
                        1 => credentials(user),
                        _ => Err(ApiError::new(
                            ErrorCode::DuplicateResource,
                            format!("{DESCRIBE_DUPLICATE_USER}{user}"),
                        )),
                    },
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    // Shows: the credential of a salted password is RFC 5802 §3's StoredKey = H(HMAC(SP,
    // "Client Key")) and ServerKey = HMAC(SP, "Server Key") — the node's exchange tests check
    // both against RFC 7677 §3's messages byte for byte — and its Debug shows no key.
    #[test]
    fn credential_of_a_salted_password() {
        let m = ScramMechanism::Sha256;
        let salted = [7u8; 32];
        let credential = ScramCredentialData::from_salted_password(m, b"salt", &salted, 4096);
        assert_eq!(
            credential.stored_key,
            m.hash(&m.hmac(&salted, b"Client Key"))
        );
        assert_eq!(credential.server_key, m.hmac(&salted, b"Server Key"));
        assert_ne!(credential.stored_key, credential.server_key);
        assert!(credential.check(m).is_ok());
        assert!(credential.check(ScramMechanism::Sha512).is_err());
        let shown = format!("{credential:?}");
        assert!(
            shown.contains("[hidden]") && shown.contains("4096"),
            "{shown}"
        );
        assert!(
            !shown.contains(&format!("{:?}", credential.stored_key)),
            "{shown}"
        );
    }

    // Shows: HMAC-SHA-256 and HMAC-SHA-512 are RFC 4231's (test case 2: key "Jefe").
    #[test]
    fn hmac_is_rfc_4231() {
        let data = b"what do ya want for nothing?";
        assert_eq!(
            hex(&ScramMechanism::Sha256.hmac(b"Jefe", data)),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&ScramMechanism::Sha512.hmac(b"Jefe", data)),
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
    }

    // Shows: Kafka's type ids and names, both ways; unknown ids and names are none.
    #[test]
    fn mechanisms_are_kafkas() {
        for (m, id, name) in [
            (ScramMechanism::Sha256, 1, "SCRAM-SHA-256"),
            (ScramMechanism::Sha512, 2, "SCRAM-SHA-512"),
        ] {
            assert_eq!(m.type_id(), id);
            assert_eq!(ScramMechanism::from_type(id), Some(m));
            assert_eq!(m.name(), name);
            assert_eq!(ScramMechanism::from_name(name), Some(m));
        }
        assert_eq!(ScramMechanism::from_type(0), None);
        assert_eq!(ScramMechanism::from_type(10), None);
        assert_eq!(ScramMechanism::from_name("scram-sha-256"), None);
    }

    // Shows: Kafka's bounds and messages (ScramControlManager.validateUpsertion) and Keel's own
    // bounds on names, salts and salted passwords.
    #[test]
    fn bounds() {
        assert_eq!(
            check_iterations(4095).unwrap_err().message,
            "Too few iterations"
        );
        assert_eq!(
            check_iterations(16385).unwrap_err().message,
            "Too many iterations"
        );
        assert!(check_iterations(4096).is_ok() && check_iterations(16384).is_ok());
        let empty = check_user_name("").unwrap_err();
        assert_eq!(empty.code, ErrorCode::UnacceptableCredential);
        assert_eq!(empty.message, "Username must not be empty");
        assert!(check_user_name(&"u".repeat(USER_NAME_BYTES_MAX)).is_ok());
        assert!(check_user_name(&"u".repeat(USER_NAME_BYTES_MAX + 1)).is_err());
        assert!(check_salt(b"").is_err());
        assert!(check_salt(&[0; SALT_BYTES_MAX]).is_ok());
        assert!(check_salt(&[0; SALT_BYTES_MAX + 1]).is_err());
        assert!(check_salted_password(ScramMechanism::Sha256, &[0; 32]).is_ok());
        assert!(check_salted_password(ScramMechanism::Sha512, &[0; 32]).is_err());
        assert!(check_salted_password(ScramMechanism::Sha512, &[0; 64]).is_ok());
    }
}
