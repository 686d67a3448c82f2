//! Authorization as Kafka's `StandardAuthorizer`: the settings (`authorizer.class.name`,
//! `super.users`, `allow.everyone.if.no.acl.found`), the ACL index a broker keeps in step with
//! its metadata image, and the denial log (`kafka.authorizer.logger`'s lines, at INFO,
//! rate-limited) with a counter per API.
//!
//! The decision itself is the pure [`keel_controller::acl::AclIndex::authorize`]; this module
//! knows the session (its principal and address) and the image.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};

use keel_controller::acl::{
    AclIndex, AclOperation, Action, AuthorizerConfig, Decision, ResourceType,
};
use keel_controller::image::Acls;
use keel_controller::ClusterImage;

use crate::config::ConfigError;

/// `authorizer.class.name`.
pub const AUTHORIZER_CLASS_NAME: &str = "authorizer.class.name";
/// The authorizer Keel implements, under Kafka's name.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
/// ZooKeeper-era Kafka's authorizer (`kafka.security.authorizer.AclAuthorizer`): its ACLs lived
/// in ZooKeeper; named in the refusal so an old server.properties gets a useful message.
pub const ACL_AUTHORIZER: &str = "kafka.security.authorizer.AclAuthorizer";
/// `super.users`.
pub const SUPER_USERS: &str = "super.users";
/// `allow.everyone.if.no.acl.found`.
pub const ALLOW_EVERYONE_IF_NO_ACL_FOUND: &str = "allow.everyone.if.no.acl.found";

/// The authorizer's settings from a node's properties: `None` without `authorizer.class.name`
/// (Kafka's default: every request is allowed).
pub fn config_from_properties(
    props: &BTreeMap<String, String>,
) -> Result<Option<AuthorizerConfig>, ConfigError> {
    let invalid = |key: &str, reason: String| ConfigError::InvalidValue {
        key: key.to_string(),
        value: props.get(key).cloned().unwrap_or_default(),
        reason,
    };
    let class = props.get(AUTHORIZER_CLASS_NAME).map_or("", |c| c.trim());
    match class {
        "" => return Ok(None),
        STANDARD_AUTHORIZER => {}
        ACL_AUTHORIZER => {
            return Err(invalid(
                AUTHORIZER_CLASS_NAME,
                format!(
                    "{ACL_AUTHORIZER} kept its ACLs in ZooKeeper; a KRaft cluster (Kafka's and \
                     Keel's) uses {STANDARD_AUTHORIZER}, whose ACLs are in the metadata log"
                ),
            ))
        }
        other => {
            return Err(invalid(
                AUTHORIZER_CLASS_NAME,
                format!("{other:?} is not an authorizer Keel has: set {STANDARD_AUTHORIZER}"),
            ))
        }
    }
    let super_users = match props.get(SUPER_USERS) {
        Some(value) => AuthorizerConfig::parse_super_users(value)
            .map_err(|reason| invalid(SUPER_USERS, reason))?,
        None => Default::default(),
    };
    let allow_everyone_if_no_acl_found = match props
        .get(ALLOW_EVERYONE_IF_NO_ACL_FOUND)
        .map(|v| v.trim().to_ascii_lowercase())
    {
        None => false,
        Some(v) if v == "true" => true,
        Some(v) if v == "false" => false,
        Some(v) => {
            return Err(invalid(
                ALLOW_EVERYONE_IF_NO_ACL_FOUND,
                format!("{v:?} is not true or false"),
            ))
        }
    };
    Ok(Some(AuthorizerConfig {
        super_users,
        allow_everyone_if_no_acl_found,
    }))
}

/// The client address as Kafka's ACLs name it (Java's `InetAddress.getHostAddress()`): IPv4
/// dotted, IPv6 as eight groups of lowercase hex without `::` compression, an IPv4-mapped IPv6
/// address as its IPv4 form. `peer` is the session's `ip:port`; anything else is kept as is.
pub fn host_of(peer: &str) -> String {
    let Ok(addr) = peer.parse::<SocketAddr>() else {
        return peer.to_string();
    };
    match addr.ip().to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|s| format!("{s:x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

/// Who asks, from where, in which request: what a decision and its log line need.
#[derive(Clone, Debug)]
pub struct RequestContext {
    /// `<type>:<name>` of the session.
    pub principal: String,
    /// The client address ([`host_of`]).
    pub host: String,
    /// The request's API key (labels the denial counter).
    pub api_key: i16,
    /// The request's API name for the log line (Kafka's `ApiKeys.name`, e.g. `Produce`).
    pub api: String,
}

/// A broker's (or controller's) authorizer: the settings and the ACL index of the last image
/// it saw.
#[derive(Debug)]
pub struct Authorizer {
    config: AuthorizerConfig,
    /// The bindings the index was built from, and the index.
    cache: RwLock<(Arc<Acls>, Arc<AclIndex>)>,
    /// One denial line per second at most; the next says how many were left out.
    log: Mutex<DenialLog>,
    /// `keel_authorizer_denials_total` of the listener the authorizer decides for.
    metrics: Option<crate::metrics::RequestMetrics>,
}

#[derive(Debug, Default)]
struct DenialLog {
    last: Option<std::time::Instant>,
    left_out: u64,
}

/// At most one denial line per this interval.
const DENIAL_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl Authorizer {
    /// An authorizer with `config` and no bindings yet, counting its denials per API in
    /// `metrics` (the listener's).
    pub fn new(
        config: AuthorizerConfig,
        metrics: Option<crate::metrics::RequestMetrics>,
    ) -> Authorizer {
        Authorizer {
            config,
            cache: RwLock::new((Arc::default(), Arc::new(AclIndex::default()))),
            log: Mutex::default(),
            metrics,
        }
    }

    /// The settings.
    pub fn config(&self) -> &AuthorizerConfig {
        &self.config
    }

    /// The index of `image`'s bindings (rebuilt only when they changed since the last call).
    pub fn index(&self, image: &ClusterImage) -> Arc<AclIndex> {
        {
            let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
            if Arc::ptr_eq(&cache.0, image.acls()) {
                return cache.1.clone();
            }
        }
        let index = Arc::new(AclIndex::new(image.acls().by_id().values()));
        *self.cache.write().unwrap_or_else(|p| p.into_inner()) =
            (image.acls().clone(), index.clone());
        index
    }

    /// Decides one action; a denial is logged (rate-limited) and counted.
    pub fn authorize(
        &self,
        image: &ClusterImage,
        context: &RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> bool {
        self.decide(
            image,
            context,
            operation,
            resource_type,
            resource_name,
            true,
        )
    }

    /// Decides one action without logging a denial (Kafka's `logIfDenied = false`: filtering
    /// what a client may see, e.g. the topics of a Metadata request for all topics, and KIP-430's
    /// authorized operations).
    pub fn allows_quietly(
        &self,
        image: &ClusterImage,
        context: &RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> bool {
        self.decide(
            image,
            context,
            operation,
            resource_type,
            resource_name,
            false,
        )
    }

    fn decide(
        &self,
        image: &ClusterImage,
        context: &RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: &str,
        log_denial: bool,
    ) -> bool {
        let action = Action {
            principal: &context.principal,
            host: &context.host,
            operation,
            resource_type,
            resource_name,
        };
        let decision = self.index(image).authorize(&self.config, &action);
        if !decision.allowed && log_denial {
            self.denied(context, &action, &decision);
        }
        decision.allowed
    }

    /// KIP-430's `authorized_operations` of a resource for `context`.
    pub fn authorized_operations(
        &self,
        image: &ClusterImage,
        context: &RequestContext,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> i32 {
        self.index(image).authorized_operations(
            &self.config,
            &context.principal,
            &context.host,
            resource_type,
            resource_name,
        )
    }

    /// Kafka's `authorizeByResourceType` (KIP-679).
    pub fn authorize_by_resource_type(
        &self,
        image: &ClusterImage,
        context: &RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        self.index(image).authorize_by_resource_type(
            &self.config,
            &context.principal,
            &context.host,
            operation,
            resource_type,
        )
    }

    fn denied(&self, context: &RequestContext, action: &Action<'_>, decision: &Decision) {
        if let Some(metrics) = &self.metrics {
            metrics.count_denial(context.api_key);
        }
        let left_out = {
            let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            let now = std::time::Instant::now();
            if log
                .last
                .is_some_and(|last| now.duration_since(last) < DENIAL_LOG_INTERVAL)
            {
                log.left_out += 1;
                return;
            }
            log.last = Some(now);
            std::mem::take(&mut log.left_out)
        };
        // Kafka's audit line (`StandardAuthorizerData.buildAuditMessage`).
        tracing::info!(
            target: "kafka.authorizer.logger",
            left_out,
            "Principal = {} is Denied operation = {} from host = {} on resource = {}:LITERAL:{} \
             for request = {} based on rule {}",
            action.principal,
            action.operation,
            action.host,
            resource_type_name(action.resource_type),
            crate::handlers::refusals::bounded(action.resource_name),
            context.api,
            decision.rule,
        );
    }
}

/// Kafka's `SecurityUtils.resourceTypeName`: `Topic`, `Group`, `Cluster`, `TransactionalId`,
/// `DelegationToken`, `User`.
pub fn resource_type_name(resource_type: ResourceType) -> &'static str {
    match resource_type {
        ResourceType::Topic => "Topic",
        ResourceType::Group => "Group",
        ResourceType::Cluster => "Cluster",
        ResourceType::TransactionalId => "TransactionalId",
        ResourceType::DelegationToken => "DelegationToken",
        ResourceType::User => "User",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::props;

    #[test]
    fn settings_are_kafkas() {
        assert_eq!(config_from_properties(&props(&[])).unwrap(), None);
        assert_eq!(
            config_from_properties(&props(&[(AUTHORIZER_CLASS_NAME, " ")])).unwrap(),
            None
        );
        let config = config_from_properties(&props(&[
            (AUTHORIZER_CLASS_NAME, STANDARD_AUTHORIZER),
            (SUPER_USERS, "User:admin;User:broker"),
            (ALLOW_EVERYONE_IF_NO_ACL_FOUND, "TRUE"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(config.super_users.len(), 2);
        assert!(config.allow_everyone_if_no_acl_found);
        let refused = |pairs: &[(&str, &str)]| {
            config_from_properties(&props(pairs))
                .unwrap_err()
                .to_string()
        };
        assert!(refused(&[(AUTHORIZER_CLASS_NAME, ACL_AUTHORIZER)]).contains("ZooKeeper"));
        assert!(
            refused(&[(AUTHORIZER_CLASS_NAME, "com.example.Mine")]).contains(STANDARD_AUTHORIZER)
        );
        assert!(refused(&[
            (AUTHORIZER_CLASS_NAME, STANDARD_AUTHORIZER),
            (SUPER_USERS, "admin")
        ])
        .contains(SUPER_USERS));
        assert!(refused(&[
            (AUTHORIZER_CLASS_NAME, STANDARD_AUTHORIZER),
            (ALLOW_EVERYONE_IF_NO_ACL_FOUND, "yes")
        ])
        .contains(ALLOW_EVERYONE_IF_NO_ACL_FOUND));
    }

    #[test]
    fn hosts_are_written_as_java_writes_them() {
        assert_eq!(host_of("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(host_of("[::1]:5000"), "0:0:0:0:0:0:0:1");
        assert_eq!(host_of("[fe80::1:abcd]:1"), "fe80:0:0:0:0:0:1:abcd");
        assert_eq!(host_of("[::ffff:10.0.0.7]:9"), "10.0.0.7");
        assert_eq!(host_of("sim-node-3"), "sim-node-3");
    }
}
