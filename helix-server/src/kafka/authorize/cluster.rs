//! The cluster-wide admin APIs of issue 34's other slices, checked as
//! Kafka's `KafkaApis` / `ControllerApis` do: SCRAM credentials need
//! Describe / Alter on the cluster, client quotas DescribeConfigs /
//! AlterConfigs on the cluster; the operators' tools (DescribeLogDirs,
//! DescribeQuorum, ListPartitionReassignments) Describe, ElectLeaders
//! Alter on the cluster. A refusal answers every item with
//! CLUSTER_AUTHORIZATION_FAILED (the request's top-level error where the
//! response has one).

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
    DescribeLogDirsResponse, DescribeQuorumResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse, ElectLeadersRequest, ElectLeadersResponse,
    ListPartitionReassignmentsResponse, RequestKind, ResponseKind,
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

/// DescribeLogDirs, DescribeQuorum and ListPartitionReassignments need
/// Describe on the cluster; refused, they answer with no data and the
/// top-level error.
pub(super) fn describe_operator(access: &Access, kind: RequestKind) -> Checked {
    if access.allows_cluster(Operation::Describe) {
        return Checked::Pass(kind, None);
    }
    match kind {
        RequestKind::DescribeLogDirs(_) => {
            let mut resp = DescribeLogDirsResponse::default();
            resp.error_code = CLUSTER_DENIED;
            Checked::Refused(ResponseKind::DescribeLogDirs(resp))
        }
        RequestKind::DescribeQuorum(_) => {
            let mut resp = DescribeQuorumResponse::default();
            resp.error_code = CLUSTER_DENIED;
            Checked::Refused(ResponseKind::DescribeQuorum(resp))
        }
        RequestKind::ListPartitionReassignments(_) => {
            let mut resp = ListPartitionReassignmentsResponse::default();
            resp.error_code = CLUSTER_DENIED;
            Checked::Refused(ResponseKind::ListPartitionReassignments(resp))
        }
        other => Checked::Pass(other, None),
    }
}

/// ElectLeaders needs Alter on the cluster; refused, every partition asked
/// for answers CLUSTER_AUTHORIZATION_FAILED, as does the request.
pub(super) fn elect_leaders(access: &Access, req: ElectLeadersRequest) -> Checked {
    if access.allows_cluster(Operation::Alter) {
        return Checked::Pass(RequestKind::ElectLeaders(req), None);
    }
    let mut resp = ElectLeadersResponse::default();
    resp.error_code = CLUSTER_DENIED;
    resp.replica_election_results = req
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            let mut r = ReplicaElectionResult::default();
            r.topic = t.topic.clone();
            r.partition_result = t
                .partitions
                .iter()
                .map(|&p| {
                    let mut out = PartitionResult::default();
                    out.partition_id = p;
                    out.error_code = CLUSTER_DENIED;
                    out
                })
                .collect();
            r
        })
        .collect();
    Checked::Refused(ResponseKind::ElectLeaders(resp))
}
