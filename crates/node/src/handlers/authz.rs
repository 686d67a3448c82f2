//! One request's view of the authorizer (Kafka's `AuthHelper`): each handler asks it whether
//! the session may do an operation on a resource. Without `authorizer.class.name` everything
//! is allowed and KIP-430's authorized operations are every supported operation, as Kafka's
//! `AuthHelper` answers without an authorizer.

use std::sync::Arc;

use keel_controller::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use keel_controller::ClusterImage;
use keel_wire::kafka_protocol::messages::ApiKey;

use crate::broker::Broker;
use crate::connection::Session;
use crate::raft::state_machine::StateMachine;
use crate::security::authorizer::{Authorizer, RequestContext};

/// The authorizer, the image it decides from and who asks, for one request.
pub(crate) struct Authz<'a> {
    checks: Option<(&'a Authorizer, Image<'a>, RequestContext)>,
}

/// Where the decisions' ACLs come from: a broker's image, or a controller's committed state
/// (read in place, so a broker's heartbeat costs no copy of the image).
enum Image<'a> {
    Broker(Arc<ClusterImage>),
    Controller(&'a StateMachine),
}

impl Image<'_> {
    fn with<R>(&self, f: impl FnOnce(&ClusterImage) -> R) -> R {
        match self {
            Image::Broker(image) => f(image),
            Image::Controller(machine) => machine.with_image(f),
        }
    }
}

impl<'a> Authz<'a> {
    /// The view of `session`'s request of `api` on `broker`.
    pub fn new(broker: &'a Broker, session: &Session, api: ApiKey) -> Authz<'a> {
        Authz {
            checks: broker.authorizer().map(|a| {
                (
                    a,
                    Image::Broker(broker.image()),
                    session.request_context(api),
                )
            }),
        }
    }

    /// The view of a request of one of Keel's own RPCs (key `key`, named `name`).
    pub fn for_rpc(broker: &'a Broker, session: &Session, key: i16, name: &str) -> Authz<'a> {
        Authz {
            checks: broker.authorizer().map(|a| {
                (
                    a,
                    Image::Broker(broker.image()),
                    session.rpc_context(key, name),
                )
            }),
        }
    }

    /// The view of a request on a controller listener, decided from `machine`'s committed
    /// image (`authorizer` is `None` without `authorizer.class.name`).
    pub fn on_controller(
        authorizer: Option<&'a Authorizer>,
        machine: &'a StateMachine,
        context: RequestContext,
    ) -> Authz<'a> {
        Authz {
            checks: authorizer.map(|a| (a, Image::Controller(machine), context)),
        }
    }

    /// May the session do `operation` on the resource? A denial is logged and counted.
    pub fn allows(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        self.checks.as_ref().is_none_or(|(a, image, context)| {
            image.with(|image| a.authorize(image, context, operation, resource_type, name))
        })
    }

    /// [`Authz::allows`] without logging a denial (Kafka's `logIfDenied = false`).
    pub fn allows_quietly(
        &self,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.checks.as_ref().is_none_or(|(a, image, context)| {
            image.with(|image| a.allows_quietly(image, context, operation, resource_type, name))
        })
    }

    /// `operation` on the cluster resource.
    pub fn cluster(&self, operation: AclOperation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// `operation` on topic `name`.
    pub fn topic(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::Topic, name)
    }

    /// KIP-430's `authorized_operations` of a resource.
    pub fn authorized_operations(&self, resource_type: ResourceType, name: &str) -> i32 {
        match &self.checks {
            Some((a, image, context)) => {
                image.with(|image| a.authorized_operations(image, context, resource_type, name))
            }
            None => resource_type
                .supported_operations()
                .iter()
                .fold(0, |bits, op| bits | (1 << op.code())),
        }
    }

    /// Kafka's `authorizeByResourceType` (KIP-679).
    pub fn by_resource_type(&self, operation: AclOperation, resource_type: ResourceType) -> bool {
        self.checks.as_ref().is_none_or(|(a, image, context)| {
            image.with(|image| {
                a.authorize_by_resource_type(image, context, operation, resource_type)
            })
        })
    }
}
