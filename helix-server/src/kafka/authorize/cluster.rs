//! The cluster-wide admin APIs of issue 34's other slices, checked as
//! Kafka's `KafkaApis` / `ControllerApis` do: SCRAM credentials need
//! Describe / Alter on the cluster, client quotas DescribeConfigs /
//! AlterConfigs on the cluster. A refusal answers every item with
//! CLUSTER_AUTHORIZATION_FAILED (the request's top-level error where the
//! response has one).

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, RequestKind,
    ResponseKind,
};

use super::{Access, CLUSTER_DENIED, Checked};
use crate::acl::Operation;

pub(super) fn describe_scram(access: &Access, req: DescribeUserScramCredentialsRequest) -> Checked {
    if access.allows_cluster(Operation::Describe) {
        return Checked::Pass(RequestKind::DescribeUserScramCredentials(req), None);
    }
    let mut resp = DescribeUserScramCredentialsResponse::default();
    resp.error_code = CLUSTER_DENIED;
    Checked::Refused(ResponseKind::DescribeUserScramCredentials(resp))
}

pub(super) fn alter_scram(access: &Access, req: AlterUserScramCredentialsRequest) -> Checked {
    if access.allows_cluster(Operation::Alter) {
        return Checked::Pass(RequestKind::AlterUserScramCredentials(req), None);
    }
    let users = req
        .deletions
        .iter()
        .map(|d| d.name.clone())
        .chain(req.upsertions.iter().map(|u| u.name.clone()));
    let mut resp = AlterUserScramCredentialsResponse::default();
    resp.results = users
        .map(|user| {
            let mut r = AlterUserScramCredentialsResult::default();
            r.user = user;
            r.error_code = CLUSTER_DENIED;
            r
        })
        .collect();
    Checked::Refused(ResponseKind::AlterUserScramCredentials(resp))
}

pub(super) fn describe_quotas(access: &Access, req: DescribeClientQuotasRequest) -> Checked {
    if access.allows_cluster(Operation::DescribeConfigs) {
        return Checked::Pass(RequestKind::DescribeClientQuotas(req), None);
    }
    let mut resp = DescribeClientQuotasResponse::default();
    resp.error_code = CLUSTER_DENIED;
    Checked::Refused(ResponseKind::DescribeClientQuotas(resp))
}

pub(super) fn alter_quotas(access: &Access, req: AlterClientQuotasRequest) -> Checked {
    if access.allows_cluster(Operation::AlterConfigs) {
        return Checked::Pass(RequestKind::AlterClientQuotas(req), None);
    }
    let mut resp = AlterClientQuotasResponse::default();
    resp.entries = req
        .entries
        .iter()
        .map(|e| {
            let mut out = EntryData::default();
            out.error_code = CLUSTER_DENIED;
            out.entity = e
                .entity
                .iter()
                .map(|x| {
                    let mut entity = EntityData::default();
                    entity.entity_type = x.entity_type.clone();
                    entity.entity_name = x.entity_name.clone();
                    entity
                })
                .collect();
            out
        })
        .collect();
    Checked::Refused(ResponseKind::AlterClientQuotas(resp))
}
