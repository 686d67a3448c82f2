//! The cases of Kafka's `StandardAuthorizerTest` and `BaseAuthorizerTest` that define the
//! decision, the filters' `matches`, CreateAcls' refusals, and property tests of [`AclIndex`]
//! against a plain scan of every binding.

use proptest::prelude::*;

use super::*;

use AclOperation::*;
use AclPermission::*;
use PatternType::*;
use ResourceType::*;

fn acl(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    host: &str,
    operation: AclOperation,
    permission: AclPermission,
) -> AclBinding {
    AclBinding {
        resource_type,
        resource_name: name.into(),
        pattern_type,
        principal: principal.into(),
        host: host.into(),
        operation,
        permission,
    }
}

fn open() -> AuthorizerConfig {
    AuthorizerConfig::default()
}

/// Decides each of `actions` for `user` from `host`.
fn decide(
    index: &AclIndex,
    config: &AuthorizerConfig,
    user: &str,
    host: &str,
    actions: &[(AclOperation, ResourceType, &str)],
) -> Vec<bool> {
    let principal = format!("User:{user}");
    actions
        .iter()
        .map(|&(operation, resource_type, resource_name)| {
            let action = Action {
                principal: &principal,
                host,
                operation,
                resource_type,
                resource_name,
            };
            index.authorize(config, &action).allowed
        })
        .collect()
}

const LOCAL: &str = "127.0.0.1";

#[test]
fn the_codes_and_names_are_kafkas() {
    assert_eq!(ResourceType::from_code(2), Some(Topic));
    assert_eq!(ResourceType::from_code(1), None, "ANY is a filter's");
    assert_eq!(TransactionalId.code(), 5);
    assert_eq!(AclOperation::from_code(12), Some(IdempotentWrite));
    assert_eq!(AclOperation::from_code(16), None);
    assert_eq!(AclPermission::from_code(3), Some(Allow));
    assert_eq!(PatternFilter::from_code(2), Some(PatternFilter::Match));
    assert_eq!(
        PatternFilter::from_code(4),
        Some(PatternFilter::Is(Prefixed))
    );
    assert_eq!(PatternFilter::from_code(0), None, "UNKNOWN is refused");
    assert_eq!(
        ResourceType::parse("TransactionalId"),
        Some(TransactionalId)
    );
    assert_eq!(
        ResourceType::parse("transactional_id"),
        Some(TransactionalId)
    );
    assert_eq!(
        AclOperation::parse("IdempotentWrite"),
        Some(IdempotentWrite)
    );
    assert_eq!(
        AclOperation::parse("describe-configs"),
        Some(DescribeConfigs)
    );
    assert_eq!(AclOperation::parse("bogus"), None);
    assert_eq!(DescribeConfigs.to_string(), "DESCRIBE_CONFIGS");
}

#[test]
fn simple_authorizations() {
    // StandardAuthorizerTest.testSimpleAuthorizations.
    let index = AclIndex::new(&[
        acl(Topic, "foo_", Prefixed, "User:bob", "*", Read, Allow),
        acl(Topic, "foo_", Prefixed, "User:bob", "*", Write, Allow),
        acl(Group, "bar", Literal, "User:*", "*", DescribeConfigs, Allow),
        acl(Group, "bar", Literal, "User:*", "*", AlterConfigs, Allow),
    ]);
    assert_eq!(
        decide(&index, &open(), "bob", LOCAL, &[(Read, Topic, "foo_")]),
        [true]
    );
    assert_eq!(
        decide(
            &index,
            &open(),
            "fred",
            LOCAL,
            &[(AlterConfigs, Group, "bar")]
        ),
        [true]
    );
}

#[test]
fn deny_wins_also_with_operation_all() {
    // testDenyPrecedenceWithOperationAll.
    let index = AclIndex::new(&[
        acl(Topic, "foo", Literal, "User:alice", "*", All, Deny),
        acl(Topic, "foo", Prefixed, "User:alice", "*", Read, Allow),
        acl(Topic, "foo", Literal, "User:*", "*", All, Deny),
        acl(Topic, "foo", Prefixed, "User:*", "*", Describe, Allow),
    ]);
    let alice = [
        (Write, Topic, "foo"),
        (Read, Topic, "foo"),
        (Describe, Topic, "foo"),
        (Read, Topic, "foobar"),
    ];
    assert_eq!(
        decide(&index, &open(), "alice", LOCAL, &alice),
        [false, false, false, true]
    );
    let bob = [
        (Describe, Topic, "foo"),
        (Read, Topic, "foo"),
        (Write, Topic, "foo"),
        (Describe, Topic, "foobaz"),
        (Read, Topic, "foobaz"),
    ];
    assert_eq!(
        decide(&index, &open(), "bob", LOCAL, &bob),
        [false, false, false, true, false]
    );
}

#[test]
fn operation_all_allows_every_operation() {
    // testTopicAclWithOperationAll.
    let index = AclIndex::new(&[
        acl(Topic, "foo", Literal, "User:*", "*", All, Allow),
        acl(Topic, "bar", Prefixed, "User:alice", "*", All, Allow),
        acl(Topic, "baz", Literal, "User:bob", "*", All, Allow),
    ]);
    let check = |user, actions: [(AclOperation, ResourceType, &str); 3]| {
        decide(&index, &open(), user, LOCAL, &actions)
    };
    assert_eq!(
        check(
            "alice",
            [
                (Write, Topic, "foo"),
                (DescribeConfigs, Topic, "bar"),
                (Describe, Topic, "baz")
            ]
        ),
        [true, true, false]
    );
    assert_eq!(
        check(
            "bob",
            [
                (Write, Topic, "foo"),
                (Read, Topic, "bar"),
                (Describe, Topic, "baz")
            ]
        ),
        [true, false, true]
    );
    assert_eq!(
        check(
            "malory",
            [
                (Describe, Topic, "foo"),
                (Write, Topic, "bar"),
                (Read, Topic, "baz")
            ]
        ),
        [true, false, false]
    );
}

#[test]
fn hosts_match_exactly_or_by_wildcard() {
    // testHostAddressAclValidation.
    let (host1, host2) = ("192.168.1.1", "192.168.1.2");
    let index = AclIndex::new(&[
        acl(Topic, "foo", Literal, "User:alice", host1, Read, Deny),
        acl(Topic, "foo", Literal, "User:alice", "*", Read, Allow),
        acl(Topic, "bar", Literal, "User:bob", host2, Read, Allow),
        acl(Topic, "bar", Literal, "User:*", LOCAL, Describe, Allow),
    ]);
    let actions = [
        (Read, Topic, "foo"),
        (Read, Topic, "bar"),
        (Describe, Topic, "bar"),
    ];
    let d = |user, host| decide(&index, &open(), user, host, &actions);
    assert_eq!(d("alice", LOCAL), [true, false, true]);
    assert_eq!(d("alice", host1), [false, false, false]);
    assert_eq!(d("alice", host2), [true, false, false]);
    assert_eq!(d("bob", LOCAL), [false, false, true]);
    assert_eq!(d("bob", host1), [false, false, false]);
    assert_eq!(d("bob", host2), [false, true, true]);
}

#[test]
fn many_acls_and_prefixes() {
    // testAuthorizationWithManyAcls and testPrefixAcls.
    let index = AclIndex::new(&[
        acl(Topic, "green2", Literal, "User:*", "*", Read, Allow),
        acl(Topic, "green", Prefixed, "User:bob", "*", Read, Allow),
        acl(Topic, "betamax4", Literal, "User:bob", "*", Read, Allow),
        acl(Topic, "betamax", Literal, "User:bob", "*", Read, Allow),
        acl(Topic, "beta", Prefixed, "User:*", "*", Read, Allow),
        acl(Topic, "alpha", Prefixed, "User:*", "*", Read, Allow),
        acl(Topic, "alp", Prefixed, "User:bob", "*", Read, Deny),
        acl(Group, "*", Literal, "User:bob", "*", Write, Allow),
        acl(Group, "wheel", Literal, "User:*", "*", Write, Deny),
    ]);
    assert_eq!(
        decide(
            &index,
            &open(),
            "bob",
            LOCAL,
            &[(Read, Topic, "green1"), (Write, Group, "wheel")]
        ),
        [true, false]
    );
    assert_eq!(
        decide(
            &index,
            &open(),
            "bob",
            LOCAL,
            &[
                (Read, Topic, "alpha"),
                (Write, Group, "arbitrary"),
                (Read, Topic, "ala")
            ]
        ),
        [false, true, false]
    );

    let index = AclIndex::new(&[
        acl(Topic, "fooa", Prefixed, "User:alice", "*", All, Allow),
        acl(Topic, "foobar", Literal, "User:bob", "*", All, Allow),
        acl(Topic, "f", Prefixed, "User:bob", "*", All, Allow),
    ]);
    assert_eq!(
        decide(
            &index,
            &open(),
            "bob",
            LOCAL,
            &[
                (Write, Topic, "foobarr"),
                (Read, Topic, "goobar"),
                (Read, Topic, "fooa")
            ]
        ),
        [true, false, true]
    );
    assert_eq!(
        decide(
            &index,
            &open(),
            "alice",
            LOCAL,
            &[
                (Describe, Topic, "fooa"),
                (Write, Topic, "bar"),
                (Read, Topic, "baz")
            ]
        ),
        [true, false, false]
    );
}

#[test]
fn implications_are_only_for_allow() {
    // findResult: READ, WRITE, DELETE, ALTER allow DESCRIBE; ALTER_CONFIGS allows
    // DESCRIBE_CONFIGS; a DENY of READ denies neither DESCRIBE nor anything but READ.
    for op in [Read, Write, Delete, Alter, Describe] {
        let index = AclIndex::new(&[acl(Topic, "t", Literal, "User:a", "*", op, Allow)]);
        assert_eq!(
            decide(&index, &open(), "a", LOCAL, &[(Describe, Topic, "t")]),
            [true],
            "{op}"
        );
    }
    for op in [
        Create,
        ClusterAction,
        IdempotentWrite,
        DescribeConfigs,
        AlterConfigs,
    ] {
        let index = AclIndex::new(&[acl(Topic, "t", Literal, "User:a", "*", op, Allow)]);
        assert_eq!(
            decide(&index, &open(), "a", LOCAL, &[(Describe, Topic, "t")]),
            [false],
            "{op}"
        );
    }
    let index = AclIndex::new(&[acl(Topic, "t", Literal, "User:a", "*", AlterConfigs, Allow)]);
    assert_eq!(
        decide(
            &index,
            &open(),
            "a",
            LOCAL,
            &[(DescribeConfigs, Topic, "t")]
        ),
        [true]
    );
    let index = AclIndex::new(&[
        acl(Topic, "t", Literal, "User:a", "*", All, Allow),
        acl(Topic, "t", Literal, "User:a", "*", Read, Deny),
    ]);
    assert_eq!(
        decide(
            &index,
            &open(),
            "a",
            LOCAL,
            &[
                (Read, Topic, "t"),
                (Describe, Topic, "t"),
                (Write, Topic, "t")
            ]
        ),
        [false, true, true]
    );
}

#[test]
fn no_acl_on_a_resource_falls_to_allow_everyone_if_no_acl_found() {
    // testAllowEveryoneIfNoAclFoundConfigEnabled / Disabled; super users pass either way.
    let index = AclIndex::new(&[acl(
        Topic,
        "topic1",
        Literal,
        "User:Alice",
        "*",
        Read,
        Allow,
    )]);
    let mut config = AuthorizerConfig {
        super_users: AuthorizerConfig::parse_super_users("User:alice; User:chris").unwrap(),
        allow_everyone_if_no_acl_found: true,
    };
    let actions = [(Read, Topic, "topic1"), (Read, Topic, "topic2")];
    assert_eq!(
        decide(&index, &config, "Bob", LOCAL, &actions),
        [false, true]
    );
    assert_eq!(
        decide(&index, &config, "alice", LOCAL, &actions),
        [true, true]
    );
    config.allow_everyone_if_no_acl_found = false;
    assert_eq!(
        decide(&index, &config, "Bob", LOCAL, &actions),
        [false, false]
    );
    assert_eq!(
        decide(&index, &config, "chris", LOCAL, &actions),
        [true, true]
    );
    let bob = Action {
        principal: "User:Bob",
        host: LOCAL,
        operation: Read,
        resource_type: Topic,
        resource_name: "topic2",
    };
    assert_eq!(index.authorize(&config, &bob).rule, Rule::DefaultDeny);
    let chris = Action {
        principal: "User:chris",
        ..bob
    };
    assert_eq!(index.authorize(&config, &chris).rule, Rule::SuperUser);
    assert!(
        AuthorizerConfig::parse_super_users("alice").is_err(),
        "a principal needs its type"
    );
}

#[test]
fn the_rule_names_the_binding() {
    let deny = acl(Topic, "t", Prefixed, "User:*", "*", Write, Deny);
    let index = AclIndex::new(&[
        deny.clone(),
        acl(Topic, "t", Literal, "User:a", "*", All, Allow),
    ]);
    let write = Action {
        principal: "User:a",
        host: LOCAL,
        operation: Write,
        resource_type: Topic,
        resource_name: "t",
    };
    let decision = index.authorize(&open(), &write);
    assert!(!decision.allowed);
    assert_eq!(decision.rule, Rule::MatchingAcl(deny));
    assert_eq!(
        decision.rule.to_string(),
        "MatchingAcl(acl=(principal=User:*, host=*, operation=WRITE, permissionType=DENY) on \
         ResourcePattern(resourceType=TOPIC, name=t, patternType=PREFIXED))"
    );
}

#[test]
fn authorized_operations_are_kip_430_bits() {
    let index = AclIndex::new(&[
        acl(Topic, "t", Literal, "User:a", "*", Read, Allow),
        acl(Topic, "t", Literal, "User:a", "*", AlterConfigs, Allow),
    ]);
    let bits = index.authorized_operations(&open(), "User:a", LOCAL, Topic, "t");
    assert_eq!(
        bits,
        (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11),
        "READ, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS"
    );
    let config = AuthorizerConfig {
        super_users: ["User:root".to_string()].into(),
        ..open()
    };
    let all = index.authorized_operations(&config, "User:root", LOCAL, Cluster, CLUSTER_NAME);
    let want = Cluster
        .supported_operations()
        .iter()
        .fold(0, |b, op| b | (1 << op.code()));
    assert_eq!(all, want);
}

#[test]
fn authorize_by_resource_type_as_kafka() {
    // BaseAuthorizerTest.testAuthorizeByResourceType*.
    let user = "User:user1";
    let host = "192.168.1.1";
    let allow = |name: &str, p| acl(Group, name, p, user, host, Read, Allow);
    let deny = |name: &str, p| acl(Group, name, p, user, host, Read, Deny);
    let by_type = |bindings: &[AclBinding]| {
        AclIndex::new(bindings).authorize_by_resource_type(&open(), user, host, Read, Group)
    };
    // PrefixedResourceDenyDominate.
    let mut bindings = vec![allow("abcde", Prefixed)];
    assert!(by_type(&bindings));
    bindings.push(deny("abcd", Prefixed));
    assert!(!by_type(&bindings));
    bindings.push(allow("abc", Prefixed));
    assert!(by_type(&bindings));
    bindings.push(deny("a", Prefixed));
    assert!(!by_type(&bindings));
    bindings.push(allow("ab", Prefixed));
    assert!(!by_type(&bindings));
    // WildcardResourceDenyDominate and a literal deny of the same name.
    assert!(!by_type(&[allow("a", Literal), deny("*", Literal)]));
    assert!(!by_type(&[allow("a", Literal), deny("a", Literal)]));
    assert!(
        by_type(&[allow("a", Literal), deny("b", Literal)]),
        "an unrelated deny"
    );
    assert!(by_type(&[allow("*", Literal), deny("a", Literal)]));
    // Another operation or principal does not count; ALL does.
    assert!(!by_type(&[acl(
        Group, "g", Literal, user, host, Write, Allow
    )]));
    assert!(by_type(&[acl(
        Group, "g", Literal, "User:*", "*", All, Allow
    )]));
    // No binding at all: Kafka's probe falls to allow.everyone.if.no.acl.found.
    assert!(!by_type(&[]));
    let open_cluster = AuthorizerConfig {
        allow_everyone_if_no_acl_found: true,
        ..open()
    };
    assert!(AclIndex::new(&[]).authorize_by_resource_type(&open_cluster, user, host, Read, Group));
    // SuperUserHasAccess, even with a wildcard deny.
    let root = AuthorizerConfig {
        super_users: [user.to_string()].into(),
        ..open()
    };
    assert!(AclIndex::new(&[deny("*", Literal)])
        .authorize_by_resource_type(&root, user, host, Read, Group));
}

#[test]
fn filters_match_as_kafkas() {
    let literal = acl(Topic, "foo", Literal, "User:a", "*", Read, Allow);
    let wildcard = acl(Topic, "*", Literal, "User:a", "*", Read, Allow);
    let prefixed = acl(Topic, "fo", Prefixed, "User:a", "*", Read, Allow);
    let other = acl(Group, "foo", Literal, "User:b", "10.0.0.1", Write, Deny);
    let all = [&literal, &wildcard, &prefixed, &other];
    let hits = |filter: &AclFilter| -> Vec<&AclBinding> {
        all.iter().copied().filter(|b| filter.matches(b)).collect()
    };
    assert_eq!(hits(&AclFilter::any()).len(), 4);
    let named = |pattern| AclFilter {
        resource_type: Some(Topic),
        resource_name: Some("foo".into()),
        pattern,
        ..AclFilter::any()
    };
    assert_eq!(
        hits(&named(PatternFilter::Any)),
        [&literal],
        "ANY with a name: that name exactly"
    );
    assert_eq!(
        hits(&named(PatternFilter::Match)),
        [&literal, &wildcard, &prefixed]
    );
    assert_eq!(
        hits(&named(PatternFilter::Is(Prefixed))),
        Vec::<&AclBinding>::new()
    );
    let typed = AclFilter {
        pattern: PatternFilter::Is(Prefixed),
        ..AclFilter::any()
    };
    assert_eq!(hits(&typed), [&prefixed]);
    let entry = AclFilter {
        principal: Some("User:b".into()),
        host: Some("10.0.0.1".into()),
        operation: Some(Write),
        permission: Some(Deny),
        ..AclFilter::any()
    };
    assert_eq!(hits(&entry), [&other]);
    let wrong_host = AclFilter {
        host: Some("*".into()),
        ..entry
    };
    assert!(
        hits(&wrong_host).is_empty(),
        "a filter's host is exact, `*` only matches `*`"
    );
}

#[test]
fn create_refuses_what_kafka_refuses() {
    let good = acl(Topic, "t", Literal, "User:a", "*", Read, Allow);
    assert!(validate_new(&good).is_ok());
    let refused = |b: AclBinding, message: &str| {
        let e = validate_new(&b).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.contains(message), "{}", e.message);
    };
    refused(
        AclBinding {
            resource_name: String::new(),
            ..good.clone()
        },
        "Invalid empty resource name",
    );
    refused(
        AclBinding {
            resource_type: Cluster,
            resource_name: "c".into(),
            ..good.clone()
        },
        "The only valid name for the CLUSTER resource is kafka-cluster",
    );
    refused(
        AclBinding {
            principal: "alice".into(),
            ..good.clone()
        },
        "principalType:principalName",
    );
    refused(
        AclBinding {
            principal: "User:".into(),
            ..good.clone()
        },
        "principalType:principalName",
    );
    refused(
        AclBinding {
            host: "h".repeat(FIELD_BYTES_MAX + 1),
            ..good.clone()
        },
        "Keel's bound",
    );
    assert!(validate_new(&AclBinding {
        resource_type: Cluster,
        resource_name: CLUSTER_NAME.into(),
        ..good
    })
    .is_ok());
}

// ---- the index against a plain scan ----

/// Kafka's decision written as directly as possible: scan every binding.
fn reference(bindings: &[AclBinding], config: &AuthorizerConfig, a: &Action<'_>) -> bool {
    if config.super_users.contains(a.principal) {
        return true;
    }
    let on_resource: Vec<&AclBinding> = bindings
        .iter()
        .filter(|b| b.resource_type == a.resource_type)
        .filter(|b| match b.pattern_type {
            Literal => b.resource_name == a.resource_name || b.resource_name == "*",
            Prefixed => a.resource_name.starts_with(&b.resource_name),
        })
        .collect();
    let relevant = |b: &&&AclBinding| {
        (b.principal == a.principal || b.principal == "User:*")
            && (b.host == "*" || b.host == a.host)
    };
    let implied = |granted: AclOperation, wanted: AclOperation| {
        granted == All
            || granted == wanted
            || (wanted == Describe && [Read, Write, Delete, Alter].contains(&granted))
            || (wanted == DescribeConfigs && granted == AlterConfigs)
    };
    let denied = on_resource
        .iter()
        .filter(relevant)
        .any(|b| b.permission == Deny && (b.operation == All || b.operation == a.operation));
    let allowed = on_resource
        .iter()
        .filter(relevant)
        .any(|b| b.permission == Allow && implied(b.operation, a.operation));
    if denied {
        false
    } else if allowed {
        true
    } else {
        on_resource.is_empty() && config.allow_everyone_if_no_acl_found
    }
}

const NAMES: &[&str] = &["", "a", "ab", "abc", "abd", "b", "ba", "*", "é", "éa"];
const USERS: &[&str] = &["User:a", "User:b", "User:*", "Group:a"];
const HOSTS: &[&str] = &["*", "10.0.0.1", "10.0.0.2"];

fn pick<T: Copy + std::fmt::Debug + 'static>(values: &'static [T]) -> impl Strategy<Value = T> {
    prop::sample::select(values)
}

fn binding() -> impl Strategy<Value = AclBinding> {
    (
        pick(&[Topic, Group, Cluster]),
        pick(&NAMES[1..]),
        pick(&[Literal, Prefixed]),
        pick(USERS),
        pick(HOSTS),
        pick(AclOperation::ALL),
        pick(AclPermission::ALL),
    )
        .prop_map(|(t, n, p, u, h, o, perm)| acl(t, n, p, u, h, o, perm))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_index_decides_as_a_scan_of_every_binding(
        bindings in prop::collection::vec(binding(), 0..12),
        super_user in prop::option::of(pick(USERS)),
        allow_everyone in any::<bool>(),
        requests in prop::collection::vec(
            (pick(&["User:a", "User:b", "User:c"]), pick(&["10.0.0.1", "10.0.0.2"]), pick(AclOperation::ALL),
             pick(&[Topic, Group, Cluster]), pick(NAMES)),
            1..16),
    ) {
        let config = AuthorizerConfig {
            super_users: super_user.into_iter().map(String::from).collect(),
            allow_everyone_if_no_acl_found: allow_everyone,
        };
        let index = AclIndex::new(&bindings);
        for (principal, host, operation, resource_type, resource_name) in requests {
            let action = Action { principal, host, operation, resource_type, resource_name };
            let decision = index.authorize(&config, &action);
            prop_assert_eq!(decision.allowed, reference(&bindings, &config, &action), "{:?}", action);
            if let Rule::MatchingAcl(b) = &decision.rule {
                prop_assert!(bindings.contains(b));
                prop_assert_eq!(b.permission == Allow, decision.allowed);
            }
        }
    }

    #[test]
    fn a_filter_of_a_binding_finds_it(b in binding(), other in binding()) {
        let exact = AclFilter {
            resource_type: Some(b.resource_type),
            resource_name: Some(b.resource_name.clone()),
            pattern: PatternFilter::Is(b.pattern_type),
            principal: Some(b.principal.clone()),
            host: Some(b.host.clone()),
            operation: Some(b.operation),
            permission: Some(b.permission),
        };
        prop_assert!(exact.matches(&b));
        prop_assert_eq!(exact.matches(&other), other == b);
        // MATCH with a resource's name finds exactly the bindings that apply to that resource.
        let matching = AclFilter {
            resource_type: Some(other.resource_type),
            resource_name: Some(other.resource_name.clone()),
            pattern: PatternFilter::Match,
            ..AclFilter::any()
        };
        let applies = b.resource_type == other.resource_type && match b.pattern_type {
            Literal => b.resource_name == other.resource_name || b.resource_name == "*",
            Prefixed => other.resource_name.starts_with(&b.resource_name),
        };
        prop_assert_eq!(matching.matches(&b), applies);
    }
}
