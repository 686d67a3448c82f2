//! Kafka's access control lists as pure data and decisions: resource types, pattern types,
//! operations and permissions with Kafka's wire codes and names; ACL bindings and the filters of
//! DescribeAcls / DeleteAcls; the checks CreateAcls applies; and [`AclIndex`], which decides
//! one request the way Kafka's `StandardAuthorizer` does (KIP-11, KIP-290 prefixed patterns,
//! KIP-430 authorized operations, KIP-679 `authorizeByResourceType`).
//!
//! Kafka's sources: `org.apache.kafka.common.acl` / `resource` (codes, names, `matches` of the
//! filters), `AclControlManager.validateNewAcl` (what CreateAcls refuses),
//! `StandardAuthorizerData.authorize` / `findResult` (the decision: DENY wins, ALLOW of READ,
//! WRITE, DELETE or ALTER implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS, no ACL on a
//! resource at all falls to `allow.everyone.if.no.acl.found`), `Authorizer.authorizeByResourceType`
//! and `AclEntry.supportedOperations`.
//!
//! Who the super users are, and the principal and host of a request, are the caller's; this
//! module is pure.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::errors::{ApiError, ErrorCode};

/// The literal name that matches every resource of its type (`ResourcePattern.WILDCARD_RESOURCE`).
pub const WILDCARD_RESOURCE: &str = "*";
/// The principal that matches every user (`Acl.WILDCARD_PRINCIPAL_STRING`).
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host that matches every client address (`Acl.WILDCARD_HOST`).
pub const WILDCARD_HOST: &str = "*";
/// The only name a CLUSTER resource has (`Resource.CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The longest resource name, principal or host an ACL may carry (Keel's bound; Kafka has none):
/// every binding lands in every metadata image and snapshot.
pub const FIELD_BYTES_MAX: usize = 4096;

/// Declares a Kafka enum with its wire codes and `toString` names.
macro_rules! kafka_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// Kafka's wire code.
            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)*
                }
            }

            /// The value with wire code `code` (`None`: UNKNOWN, ANY or a code Kafka does not
            /// know).
            pub fn from_code(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }

            /// Kafka's name (`toString`), e.g. `TOPIC`, `DESCRIBE_CONFIGS`.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The value named `text`, ignoring case and `_` (`Topic`, `topic`,
            /// `TransactionalId`, `TRANSACTIONAL_ID`, `idempotent-write` all parse, as Kafka's
            /// `fromString` and `kafka-acls.sh` accept them).
            pub fn parse(text: &str) -> Option<$name> {
                let want = normalize(text);
                $name::ALL.iter().copied().find(|v| normalize(v.name()) == want)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

fn normalize(text: &str) -> String {
    text.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_uppercase)
        .collect()
}

kafka_enum!(
    /// A kind of resource an ACL protects (`org.apache.kafka.common.resource.ResourceType`,
    /// without UNKNOWN 0 and ANY 1, which only filters carry).
    ResourceType {
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
);

kafka_enum!(
    /// How a binding's resource name matches (`PatternType` without UNKNOWN 0, ANY 1 and MATCH 2,
    /// which only filters carry).
    PatternType {
        /// The name exactly, or every resource of the type when the name is `*`.
        Literal = 3, "LITERAL";
        /// Every resource whose name starts with the binding's name (KIP-290).
        Prefixed = 4, "PREFIXED";
    }
);

kafka_enum!(
    /// What a binding allows or denies (`AclOperation` without UNKNOWN 0 and ANY 1).
    AclOperation {
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
        TwoPhaseCommit = 15, "TWO_PHASE_COMMIT";
    }
);

kafka_enum!(
    /// ALLOW or DENY (`AclPermissionType` without UNKNOWN 0 and ANY 1).
    AclPermission {
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

/// Kafka's wire code for "any" in a filter (ResourceType, PatternType, AclOperation,
/// AclPermissionType alike).
pub const ANY_CODE: i8 = 1;
/// Kafka's wire code for the MATCH pattern filter.
pub const MATCH_CODE: i8 = 2;

impl ResourceType {
    /// The operations an ACL on this type can mean (`AclEntry.supportedOperations`): the bits
    /// of KIP-430's `authorized_operations`.
    pub fn supported_operations(self) -> &'static [AclOperation] {
        use AclOperation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
        }
    }

    /// The error a request gets when refused on a resource of this type
    /// (`AclEntry.authorizationError`).
    pub fn authorization_error(self) -> ErrorCode {
        match self {
            ResourceType::Topic => ErrorCode::TopicAuthorizationFailed,
            ResourceType::Group => ErrorCode::GroupAuthorizationFailed,
            ResourceType::Cluster => ErrorCode::ClusterAuthorizationFailed,
            ResourceType::TransactionalId => ErrorCode::TransactionalIdAuthorizationFailed,
            ResourceType::DelegationToken => ErrorCode::DelegationTokenAuthorizationFailed,
            ResourceType::User => ErrorCode::ClusterAuthorizationFailed,
        }
    }
}

/// One ACL: who may (or may not) do what to which resources from where
/// (`org.apache.kafka.common.acl.AclBinding`; Kafka's `AccessControlEntryRecord` without its id).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    /// The kind of resource.
    pub resource_type: ResourceType,
    /// The resource's name, a prefix of names, or `*`.
    pub resource_name: String,
    /// How `resource_name` matches.
    pub pattern_type: PatternType,
    /// `<type>:<name>`, e.g. `User:alice`, or `User:*`.
    pub principal: String,
    /// A client address, or `*`.
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// ALLOW or DENY.
    pub permission: AclPermission,
}

impl fmt::Display for AclBinding {
    /// Kafka's `kafka-acls.sh` shape: `(principal=User:alice, host=*, operation=READ,
    /// permissionType=ALLOW)` on `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(principal={}, host={}, operation={}, permissionType={}) on \
             ResourcePattern(resourceType={}, name={}, patternType={})",
            self.principal,
            self.host,
            self.operation,
            self.permission,
            self.resource_type,
            self.resource_name,
            self.pattern_type
        )
    }
}

/// How a filter matches pattern types (`PatternType` as a filter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PatternFilter {
    /// Every pattern type; with a name, only bindings of exactly that name.
    Any,
    /// The bindings that would apply to a resource of that name: the literal name, the literal
    /// `*` and every prefix of it (with a name; without one, like [`PatternFilter::Any`]).
    Match,
    /// Bindings of exactly this pattern type.
    Is(PatternType),
}

impl PatternFilter {
    /// The filter with wire code `code`.
    pub fn from_code(code: i8) -> Option<PatternFilter> {
        match code {
            ANY_CODE => Some(PatternFilter::Any),
            MATCH_CODE => Some(PatternFilter::Match),
            c => PatternType::from_code(c).map(PatternFilter::Is),
        }
    }

    /// Kafka's wire code.
    pub fn code(self) -> i8 {
        match self {
            PatternFilter::Any => ANY_CODE,
            PatternFilter::Match => MATCH_CODE,
            PatternFilter::Is(p) => p.code(),
        }
    }
}

/// Which bindings DescribeAcls answers and DeleteAcls removes (`AclBindingFilter`): every
/// `None` matches anything.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AclFilter {
    /// The kind of resource (`None`: ANY).
    pub resource_type: Option<ResourceType>,
    /// The resource name (`None`: any name).
    pub resource_name: Option<String>,
    /// How names match.
    pub pattern: PatternFilter,
    /// The principal, exactly (`None`: any).
    pub principal: Option<String>,
    /// The host, exactly (`None`: any).
    pub host: Option<String>,
    /// The operation, exactly (`None`: ANY).
    pub operation: Option<AclOperation>,
    /// The permission (`None`: ANY).
    pub permission: Option<AclPermission>,
}

impl AclFilter {
    /// The filter that matches every binding.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    /// Whether `binding` matches (`ResourcePatternFilter.matches` and
    /// `AccessControlEntryFilter.matches`).
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.matches_pattern(binding)
            && self
                .principal
                .as_ref()
                .is_none_or(|p| *p == binding.principal)
            && self.host.as_ref().is_none_or(|h| *h == binding.host)
            && self.operation.is_none_or(|o| o == binding.operation)
            && self.permission.is_none_or(|p| p == binding.permission)
    }

    fn matches_pattern(&self, binding: &AclBinding) -> bool {
        if self
            .resource_type
            .is_some_and(|t| t != binding.resource_type)
        {
            return false;
        }
        if let PatternFilter::Is(p) = self.pattern {
            if p != binding.pattern_type {
                return false;
            }
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        match self.pattern {
            PatternFilter::Any | PatternFilter::Is(_) => *name == binding.resource_name,
            PatternFilter::Match => match binding.pattern_type {
                PatternType::Literal => {
                    *name == binding.resource_name || binding.resource_name == WILDCARD_RESOURCE
                }
                PatternType::Prefixed => name.starts_with(binding.resource_name.as_str()),
            },
        }
    }
}

/// Why CreateAcls refuses a binding (the broker's `AclApis.handleCreateAcls` checks, whose
/// messages a client sees first, then `AclControlManager.validateNewAcl`), as Kafka's
/// INVALID_REQUEST with its message.
pub fn validate_new(binding: &AclBinding) -> Result<(), ApiError> {
    let invalid = |message: String| Err(ApiError::new(ErrorCode::InvalidRequest, message));
    if binding.resource_name.is_empty() {
        return invalid("Invalid empty resource name".into());
    }
    if binding.resource_type == ResourceType::Cluster && binding.resource_name != CLUSTER_NAME {
        return invalid(format!(
            "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        ));
    }
    for (what, value) in [
        ("resource name", &binding.resource_name),
        ("principal", &binding.principal),
        ("host", &binding.host),
    ] {
        if value.len() > FIELD_BYTES_MAX {
            return invalid(format!(
                "the {what} is {} bytes, more than Keel's bound of {FIELD_BYTES_MAX}",
                value.len()
            ));
        }
    }
    parse_principal(&binding.principal).map(|_| ())
}

/// Splits `<type>:<name>` (Kafka's `SecurityUtils.parseKafkaPrincipal`: at the first `:`, both
/// parts non-empty).
pub fn parse_principal(principal: &str) -> Result<(&str, &str), ApiError> {
    match principal.split_once(':') {
        Some((t, n)) if !t.is_empty() && !n.is_empty() => Ok((t, n)),
        _ => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("expected a string in format principalType:principalName but got {principal}"),
        )),
    }
}

/// Why DescribeAcls or DeleteAcls refuses a filter: a code Kafka does not know
/// (`AclControlManager.validateFilter`). Decoding a filter from the wire maps UNKNOWN to `Err`.
pub fn unknown_filter_error(what: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, format!("Unknown {what}."))
}

/// What decided a request: the rule the authorizer log names (`StandardAuthorizerData`'s
/// `MatchingRule`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The principal is in `super.users`.
    SuperUser,
    /// No ACL applies to the resource: `allow.everyone.if.no.acl.found`.
    DefaultAllow,
    /// No ACL applies to the resource and `allow.everyone.if.no.acl.found` is false, or ACLs
    /// apply to the resource but none to this principal, host and operation.
    DefaultDeny,
    /// This binding allowed or denied.
    MatchingAcl(AclBinding),
}

/// A decision and its rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may go on.
    pub allowed: bool,
    /// Why.
    pub rule: Rule,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::SuperUser => f.write_str("SuperUser"),
            Rule::DefaultAllow => f.write_str("DefaultAllow"),
            Rule::DefaultDeny => f.write_str("DefaultDeny"),
            Rule::MatchingAcl(b) => write!(f, "MatchingAcl(acl={b})"),
        }
    }
}

/// One request to decide: `principal` (`User:alice`) from `host` wants `operation` on the
/// resource `resource_type` / `resource_name`.
#[derive(Clone, Copy, Debug)]
pub struct Action<'a> {
    /// `<type>:<name>` of the request's session.
    pub principal: &'a str,
    /// The client's address as text (Java's `InetAddress.getHostAddress()`).
    pub host: &'a str,
    /// What it wants to do.
    pub operation: AclOperation,
    /// The kind of resource.
    pub resource_type: ResourceType,
    /// The resource's name.
    pub resource_name: &'a str,
}

/// The authorizer's settings (`super.users`, `allow.everyone.if.no.acl.found`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals every request of which is allowed.
    pub super_users: BTreeSet<String>,
    /// Whether a resource no ACL applies to is open to everyone.
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Parses Kafka's `super.users`: principals separated by `;` (blanks around them ignored).
    pub fn parse_super_users(value: &str) -> Result<BTreeSet<String>, String> {
        value
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                parse_principal(p)
                    .map(|_| p.to_string())
                    .map_err(|e| format!("super.users: {}", e.message))
            })
            .collect()
    }
}

/// The bindings of one resource type, indexed for decisions.
#[derive(Clone, Debug, Default)]
struct TypeIndex {
    literal: HashMap<String, Vec<AclBinding>>,
    prefixed: HashMap<String, Vec<AclBinding>>,
    /// The lengths (in bytes) of the prefixed names, so a decision looks up only those.
    prefix_lengths: BTreeSet<usize>,
}

/// Every binding, indexed by resource, deciding requests as Kafka's `StandardAuthorizer`.
/// Built from a metadata image's bindings; a broker rebuilds it when they change.
#[derive(Clone, Debug, Default)]
pub struct AclIndex {
    by_type: HashMap<ResourceType, TypeIndex>,
    count: usize,
}

impl AclIndex {
    /// The index of `bindings` (duplicates are kept once).
    pub fn new<'a>(bindings: impl IntoIterator<Item = &'a AclBinding>) -> AclIndex {
        let mut index = AclIndex::default();
        let unique: BTreeSet<&AclBinding> = bindings.into_iter().collect();
        for binding in unique {
            let of_type = index.by_type.entry(binding.resource_type).or_default();
            let map = match binding.pattern_type {
                PatternType::Literal => &mut of_type.literal,
                PatternType::Prefixed => {
                    of_type.prefix_lengths.insert(binding.resource_name.len());
                    &mut of_type.prefixed
                }
            };
            map.entry(binding.resource_name.clone())
                .or_default()
                .push(binding.clone());
            index.count += 1;
        }
        index
    }

    /// How many bindings there are.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every binding that applies to the resource (`resource_type`, `resource_name`): the
    /// literal name, the literal `*`, and every prefixed name the name starts with.
    fn applying<'a>(
        &'a self,
        resource_type: ResourceType,
        resource_name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let of_type = self.by_type.get(&resource_type);
        let literal = of_type.into_iter().flat_map(move |t| {
            let exact = t.literal.get(resource_name);
            let wildcard = (resource_name != WILDCARD_RESOURCE)
                .then(|| t.literal.get(WILDCARD_RESOURCE))
                .flatten();
            exact.into_iter().chain(wildcard).flatten()
        });
        let prefixed = of_type.into_iter().flat_map(move |t| {
            t.prefix_lengths
                .range(..=resource_name.len())
                .filter_map(move |&len| resource_name.get(..len))
                .filter_map(move |prefix| t.prefixed.get(prefix))
                .flatten()
        });
        literal.chain(prefixed)
    }

    /// Decides `action` (`StandardAuthorizerData.authorize`): super users are allowed; a DENY
    /// that applies wins; then an ALLOW that applies; else, when no binding at all applies to
    /// the resource, `allow.everyone.if.no.acl.found`; else denied.
    pub fn authorize(&self, config: &AuthorizerConfig, action: &Action<'_>) -> Decision {
        if config.super_users.contains(action.principal) {
            return Decision {
                allowed: true,
                rule: Rule::SuperUser,
            };
        }
        let mut has_resource_acls = false;
        let mut allow: Option<&AclBinding> = None;
        for binding in self.applying(action.resource_type, action.resource_name) {
            has_resource_acls = true;
            match applies(binding, action) {
                Some(AclPermission::Deny) => {
                    return Decision {
                        allowed: false,
                        rule: Rule::MatchingAcl(binding.clone()),
                    };
                }
                Some(AclPermission::Allow) => allow = allow.or(Some(binding)),
                None => {}
            }
        }
        match allow {
            Some(b) => Decision {
                allowed: true,
                rule: Rule::MatchingAcl(b.clone()),
            },
            None if !has_resource_acls && config.allow_everyone_if_no_acl_found => Decision {
                allowed: true,
                rule: Rule::DefaultAllow,
            },
            None => Decision {
                allowed: false,
                rule: Rule::DefaultDeny,
            },
        }
    }

    /// KIP-430's `authorized_operations` of a resource: bit `1 << code` for every operation of
    /// [`ResourceType::supported_operations`] that `principal` from `host` may do.
    pub fn authorized_operations(
        &self,
        config: &AuthorizerConfig,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> i32 {
        resource_type
            .supported_operations()
            .iter()
            .filter(|&&operation| {
                self.authorize(
                    config,
                    &Action {
                        principal,
                        host,
                        operation,
                        resource_type,
                        resource_name,
                    },
                )
                .allowed
            })
            .fold(0, |bits, op| bits | (1 << op.code()))
    }

    /// Whether `principal` from `host` may do `operation` on at least one resource of
    /// `resource_type` (Kafka's `Authorizer.authorizeByResourceType`, KIP-679: how an
    /// idempotent producer without IDEMPOTENT_WRITE on the cluster may still write to a topic
    /// it has WRITE on). A wildcard DENY denies; an ALLOW counts unless a DENY of the same
    /// literal name or of a prefix of it shadows it.
    pub fn authorize_by_resource_type(
        &self,
        config: &AuthorizerConfig,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        // Kafka asks about a made-up literal name first, so super users (and an open cluster)
        // pass regardless of DENY bindings.
        let probe = Action {
            principal,
            host,
            operation,
            resource_type,
            resource_name: "hardcode",
        };
        if self.authorize(config, &probe).allowed {
            return true;
        }
        let Some(of_type) = self.by_type.get(&resource_type) else {
            return false;
        };
        let mut deny_literal = BTreeSet::new();
        let mut deny_prefixed = BTreeSet::new();
        let mut allow_literal = BTreeSet::new();
        let mut allow_prefixed = BTreeSet::new();
        let all = of_type
            .literal
            .values()
            .chain(of_type.prefixed.values())
            .flatten();
        for b in all {
            let principal_matches = b.principal == principal || b.principal == WILDCARD_PRINCIPAL;
            let host_matches = b.host == host || b.host == WILDCARD_HOST;
            let operation_matches = b.operation == operation || b.operation == AclOperation::All;
            if !(principal_matches && host_matches && operation_matches) {
                continue;
            }
            let name = b.resource_name.as_str();
            match (b.permission, b.pattern_type) {
                (AclPermission::Deny, PatternType::Literal) if name == WILDCARD_RESOURCE => {
                    return false;
                }
                (AclPermission::Deny, PatternType::Literal) => deny_literal.insert(name),
                (AclPermission::Deny, PatternType::Prefixed) => deny_prefixed.insert(name),
                (AclPermission::Allow, PatternType::Literal) if name == WILDCARD_RESOURCE => {
                    return true;
                }
                (AclPermission::Allow, PatternType::Literal) => allow_literal.insert(name),
                (AclPermission::Allow, PatternType::Prefixed) => allow_prefixed.insert(name),
            };
        }
        let shadowed_by_prefix = |name: &str| {
            name.char_indices()
                .map(|(i, c)| &name[..i + c.len_utf8()])
                .any(|prefix| deny_prefixed.contains(prefix))
        };
        allow_literal
            .iter()
            .any(|n| !deny_literal.contains(n) && !shadowed_by_prefix(n))
            || allow_prefixed.iter().any(|n| !shadowed_by_prefix(n))
    }
}

/// Whether `binding` (already known to apply to the resource) decides `action`, and how
/// (`StandardAuthorizerData.findResult`).
fn applies(binding: &AclBinding, action: &Action<'_>) -> Option<AclPermission> {
    if binding.principal != action.principal && binding.principal != WILDCARD_PRINCIPAL {
        return None;
    }
    if binding.host != WILDCARD_HOST && binding.host != action.host {
        return None;
    }
    if binding.operation != AclOperation::All {
        use AclOperation::*;
        let covers = match (binding.permission, action.operation) {
            (AclPermission::Allow, Describe) => {
                matches!(binding.operation, Describe | Read | Write | Delete | Alter)
            }
            (AclPermission::Allow, DescribeConfigs) => {
                matches!(binding.operation, DescribeConfigs | AlterConfigs)
            }
            _ => binding.operation == action.operation,
        };
        if !covers {
            return None;
        }
    }
    Some(binding.permission)
}

#[cfg(test)]
#[path = "acl_tests.rs"]
mod tests;
