//! DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1-v3 (Kafka
//! 3.9 also serves the deprecated v0) (ADR 0028, slice 2). Without an authorizer every
//! answer is SECURITY_DISABLED, as Kafka's broker gives it. Describing
//! needs Describe on the cluster, creating and deleting Alter on the
//! cluster (else CLUSTER_AUTHORIZATION_FAILED). Bindings become
//! controller commands ([`Command::CreateAcls`], [`Command::DeleteAcls`]):
//! replicated through group 0 and applied on every node.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::authorize::Access;
use crate::acl::filter::{AclFilter, RawFilter};
use crate::acl::{AclBinding, AclTable, Operation, RawBinding};
use crate::broker::Broker;
use crate::controller::Command;

/// Most creations or filters one request may carry (an explicit limit).
pub const MAX_ITEMS: usize = 1000;

const SECURITY_DISABLED: &str = "No Authorizer is configured.";

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn error(e: ResponseError) -> (i16, Option<StrBytes>) {
    (e.code(), None)
}

/// Why no binding is looked at: no authorizer, or no Describe / Alter on
/// the cluster. None: go ahead.
fn refusal(access: Option<&Access>, op: Operation) -> Option<(i16, Option<StrBytes>)> {
    match access {
        None => Some((
            ResponseError::SecurityDisabled.code(),
            Some(text(SECURITY_DISABLED)),
        )),
        Some(a) if !a.allows_cluster(op) => Some(error(ResponseError::ClusterAuthorizationFailed)),
        Some(_) => None,
    }
}

fn acls_of(broker: &Broker) -> std::sync::Arc<AclTable> {
    broker.controller.view().view.acls.clone()
}

pub fn describe(
    broker: &Broker,
    access: Option<&Access>,
    req: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    if let Some((code, message)) = refusal(access, Operation::Describe) {
        resp.error_code = code;
        // Kafka's words for DescribeAcls.
        resp.error_message = message.map(|_| text("No Authorizer is configured on the broker"));
        return resp;
    }
    let raw = RawFilter {
        resource_type: req.resource_type_filter,
        name: req.resource_name_filter.as_deref(),
        pattern: req.pattern_type_filter,
        principal: req.principal_filter.as_deref(),
        host: req.host_filter.as_deref(),
        operation: req.operation,
        permission: req.permission_type,
    };
    let filter = match AclFilter::parse(&raw) {
        Ok(f) => f,
        Err(why) => {
            resp.error_code = ResponseError::InvalidRequest.code();
            resp.error_message = Some(text(&why));
            return resp;
        }
    };
    let acls = acls_of(broker);
    let mut by_resource: BTreeMap<(i8, &str, i8), Vec<AclDescription>> = BTreeMap::new();
    for b in acls.iter().filter(|b| filter.matches(b)) {
        let mut d = AclDescription::default();
        d.principal = text(&b.principal);
        d.host = text(&b.host);
        d.operation = b.operation.code();
        d.permission_type = b.permission.code();
        by_resource
            .entry((b.resource_type.code(), b.name.as_str(), b.pattern.code()))
            .or_default()
            .push(d);
    }
    resp.resources = by_resource
        .into_iter()
        .map(|((t, name, pattern), acls)| {
            let mut r = DescribeAclsResource::default();
            r.resource_type = t;
            r.resource_name = text(name);
            r.pattern_type = pattern;
            r.acls = acls;
            r
        })
        .collect();
    resp
}

pub async fn create(
    broker: &Broker,
    access: Option<&Access>,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let mut resp = CreateAclsResponse::default();
    let result = |(code, message): (i16, Option<StrBytes>)| {
        let mut r = AclCreationResult::default();
        r.error_code = code;
        r.error_message = message;
        r
    };
    let refused = refusal(access, Operation::Alter).or_else(|| {
        (req.creations.len() > MAX_ITEMS).then(|| {
            (
                ResponseError::InvalidRequest.code(),
                Some(text(&format!("at most {MAX_ITEMS} ACLs per request"))),
            )
        })
    });
    if let Some(why) = refused {
        resp.results = req.creations.iter().map(|_| result(why.clone())).collect();
        return resp;
    }
    let parsed: Vec<Result<AclBinding, String>> = req
        .creations
        .iter()
        .map(|c| {
            AclBinding::parse(&RawBinding {
                resource_type: c.resource_type,
                name: &c.resource_name,
                pattern: c.resource_pattern_type,
                principal: &c.principal,
                host: &c.host,
                operation: c.operation,
                permission: c.permission_type,
            })
        })
        .collect();
    let valid: Vec<AclBinding> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let submitted = if valid.is_empty() {
        Ok(())
    } else {
        broker
            .controller
            .submit(Command::CreateAcls { bindings: valid })
            .await
            .map(|_| ())
            .map_err(|e| (e.kafka_code(), Some(text(&e.message()))))
    };
    resp.results = parsed
        .into_iter()
        .map(|p| match (p, &submitted) {
            (Err(why), _) => result((ResponseError::InvalidRequest.code(), Some(text(&why)))),
            (Ok(_), Ok(())) => result((0, None)),
            (Ok(_), Err(e)) => result(e.clone()),
        })
        .collect();
    resp
}

pub async fn delete(
    broker: &Broker,
    access: Option<&Access>,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let mut resp = DeleteAclsResponse::default();
    let failed = |(code, message): (i16, Option<StrBytes>)| {
        let mut r = DeleteAclsFilterResult::default();
        r.error_code = code;
        r.error_message = message;
        r
    };
    let refused = refusal(access, Operation::Alter).or_else(|| {
        (req.filters.len() > MAX_ITEMS).then(|| {
            (
                ResponseError::InvalidRequest.code(),
                Some(text(&format!("at most {MAX_ITEMS} filters per request"))),
            )
        })
    });
    if let Some(why) = refused {
        resp.filter_results = req.filters.iter().map(|_| failed(why.clone())).collect();
        return resp;
    }
    let acls = acls_of(broker);
    let matched: Vec<Result<Vec<AclBinding>, String>> = req
        .filters
        .iter()
        .map(|f| {
            let filter = AclFilter::parse(&RawFilter {
                resource_type: f.resource_type_filter,
                name: f.resource_name_filter.as_deref(),
                pattern: f.pattern_type_filter,
                principal: f.principal_filter.as_deref(),
                host: f.host_filter.as_deref(),
                operation: f.operation,
                permission: f.permission_type,
            })?;
            Ok(acls.iter().filter(|b| filter.matches(b)).cloned().collect())
        })
        .collect();
    let mut doomed: Vec<AclBinding> = matched.iter().flatten().flatten().cloned().collect();
    doomed.sort();
    doomed.dedup();
    let submitted = if doomed.is_empty() {
        Ok(())
    } else {
        broker
            .controller
            .submit(Command::DeleteAcls { bindings: doomed })
            .await
            .map(|_| ())
            .map_err(|e| (e.kafka_code(), Some(text(&e.message()))))
    };
    resp.filter_results = matched
        .into_iter()
        .map(|m| match (m, &submitted) {
            (Err(why), _) => failed((ResponseError::InvalidRequest.code(), Some(text(&why)))),
            (Ok(bindings), Ok(())) => {
                let mut r = DeleteAclsFilterResult::default();
                r.matching_acls = bindings.iter().map(matching_acl).collect();
                r
            }
            (Ok(_), Err(e)) => failed(e.clone()),
        })
        .collect();
    resp
}

fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    let mut m = DeleteAclsMatchingAcl::default();
    m.resource_type = b.resource_type.code();
    m.resource_name = text(&b.name);
    m.pattern_type = b.pattern.code();
    m.principal = text(&b.principal);
    m.host = text(&b.host);
    m.operation = b.operation.code();
    m.permission_type = b.permission.code();
    m
}
