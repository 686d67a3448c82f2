//! Which SASL identity Keel's own connections use: a broker's or controller's to another
//! node's listener (Kafka's `sasl.mechanism.inter.broker.protocol` /
//! `sasl.mechanism.controller.protocol` with that listener's JAAS configuration for the
//! mechanism), or a client's (`sasl.mechanism` and `sasl.jaas.config`, as Kafka's tools read
//! them from `--command-config`). The exchange itself runs in [`crate::client::Connection`].

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    client_mechanism, invalid, jaas, ClientMechanism, MechanismProps, SaslConfigError,
    SASL_JAAS_CONFIG, SASL_MECHANISM_CONTROLLER_PROTOCOL, SASL_MECHANISM_INTER_BROKER_PROTOCOL,
};
use crate::security::Peer;

/// `sasl.mechanism`: a client's mechanism.
pub const SASL_MECHANISM: &str = "sasl.mechanism";

/// The identity a node uses towards `peer` on listener `listener`.
pub fn for_peer(
    props: &BTreeMap<String, String>,
    listener: &str,
    peer: Peer,
) -> Result<Arc<dyn ClientMechanism>, SaslConfigError> {
    let key = match peer {
        Peer::Broker => SASL_MECHANISM_INTER_BROKER_PROTOCOL,
        Peer::Controller => SASL_MECHANISM_CONTROLLER_PROTOCOL,
    };
    let mechanism = props
        .get(key)
        .map(|m| m.trim())
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            invalid(
                key,
                format!(
                    "listener {listener} uses SASL, so {key} must name the mechanism this node \
                 authenticates with there (Kafka's default, GSSAPI, is not supported)"
                ),
            )
        })?;
    let lower = listener.to_ascii_lowercase();
    let view = MechanismProps::new(props, &lower, mechanism);
    let (jaas_key, entries) = view.jaas()?.ok_or_else(|| {
        invalid(
            format!(
                "listener.name.{lower}.{}.{SASL_JAAS_CONFIG}",
                mechanism.to_ascii_lowercase()
            ),
            format!("must hold this node's own username and password for {mechanism}"),
        )
    })?;
    client_mechanism(mechanism, &jaas_key, &entries)
}

/// A client's identity from its properties (`sasl.mechanism`, `sasl.jaas.config`).
pub fn from_client_props(
    props: &BTreeMap<String, String>,
) -> Result<Arc<dyn ClientMechanism>, SaslConfigError> {
    let mechanism = props
        .get(SASL_MECHANISM)
        .map(|m| m.trim())
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            invalid(
                SASL_MECHANISM,
                "must be set with a SASL security.protocol (GSSAPI is not supported)",
            )
        })?;
    let text = props.get(SASL_JAAS_CONFIG).ok_or_else(|| {
        invalid(
            SASL_JAAS_CONFIG,
            "must be set with a SASL security.protocol",
        )
    })?;
    let entries = jaas::parse(text).map_err(|e| invalid(SASL_JAAS_CONFIG, e))?;
    client_mechanism(mechanism, SASL_JAAS_CONFIG, &entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::sasl::plain::PLAIN_LOGIN_MODULE;

    use crate::test_support::props;

    // Shows: a broker's identity towards other brokers and towards controllers comes from the
    // mechanism setting for that peer and the JAAS line of that mechanism on the listener; a
    // missing setting or JAAS line is refused naming the key; a client's from sasl.mechanism
    // and sasl.jaas.config.
    #[test]
    fn identities_come_from_kafkas_settings() {
        let jaas = format!("{PLAIN_LOGIN_MODULE} required username=\"b1\" password=\"p\";");
        let broker = props(&[
            ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
            ("listener.name.internal.plain.sasl.jaas.config", &jaas),
        ]);
        assert_eq!(
            for_peer(&broker, "INTERNAL", Peer::Broker).unwrap().name(),
            "PLAIN"
        );
        let err = for_peer(&broker, "INTERNAL", Peer::Controller).unwrap_err();
        assert_eq!(err.key, "sasl.mechanism.controller.protocol");
        let err = for_peer(&broker, "OTHER", Peer::Broker).unwrap_err();
        assert_eq!(err.key, "listener.name.other.plain.sasl.jaas.config");
        let client = props(&[("sasl.mechanism", "PLAIN"), ("sasl.jaas.config", &jaas)]);
        assert_eq!(from_client_props(&client).unwrap().name(), "PLAIN");
        assert_eq!(
            from_client_props(&props(&[])).unwrap_err().key,
            "sasl.mechanism"
        );
    }
}
