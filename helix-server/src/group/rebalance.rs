//! The rebalance cycle of a classic group: PreparingRebalance (the join
//! phase: every member must rejoin), CompletingRebalance (the sync phase:
//! the leader's assignment is awaited), Stable; and the deadlines that
//! drive it (session, rebalance and initial-delay timeouts).

use super::GroupConfig;
use super::classic::{ClassicGroup, GroupState};
use super::error::GroupError;
use super::record::Record;
use super::response::{Effects, JoinAnswer, OnAcknowledged};

fn ms(value: i32) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl ClassicGroup {
    /// Starts a join phase. A sync phase in progress is abandoned: members
    /// waiting in SyncGroup are told REBALANCE_IN_PROGRESS.
    pub fn prepare_rebalance(&mut self, config: &GroupConfig, now_ms: u64, out: &mut Effects) {
        if self.state == GroupState::CompletingRebalance {
            let code = GroupError::RebalanceInProgress.code();
            for member in self.members.values_mut() {
                member.assignment = Default::default();
                if let Some(reply) = member.awaiting_sync.take() {
                    out.sync_error(reply, code);
                }
            }
        }
        self.assignment_in_flight = None;
        self.pending_sync.clear();
        self.sync_deadline_ms = None;
        let rebalance_timeout = self.max_rebalance_timeout_ms();
        if self.state == GroupState::Empty && config.initial_rebalance_delay_ms > 0 {
            let delay = config
                .initial_rebalance_delay_ms
                .min(rebalance_timeout.max(1));
            self.join_deadline_ms = Some(now_ms.saturating_add(delay));
            self.initial_delay_until_ms = Some(now_ms.saturating_add(rebalance_timeout));
            self.new_member_added = false;
        } else {
            self.join_deadline_ms = Some(now_ms.saturating_add(rebalance_timeout));
            self.initial_delay_until_ms = None;
        }
        self.transition(GroupState::PreparingRebalance, now_ms);
        self.try_complete_join(now_ms, out);
    }

    /// Rebalances unless one is already under way (then checks whether the
    /// join phase can end now).
    pub fn rebalance_or_try_join(&mut self, config: &GroupConfig, now_ms: u64, out: &mut Effects) {
        match self.state {
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(config, now_ms, out)
            }
            GroupState::PreparingRebalance => self.try_complete_join(now_ms, out),
            GroupState::Dead => {}
        }
    }

    /// Ends the join phase early when every member (and every member id
    /// offered with MEMBER_ID_REQUIRED) has joined.
    pub fn try_complete_join(&mut self, now_ms: u64, out: &mut Effects) {
        let delaying = self.initial_delay_until_ms.is_some();
        if self.state == GroupState::PreparingRebalance && !delaying && self.all_members_joined() {
            self.complete_join(now_ms, out);
        }
    }

    /// Ends the join phase: drops dynamic members that did not rejoin,
    /// opens the next generation and answers every waiting JoinGroup (the
    /// leader with all members' metadata).
    pub fn complete_join(&mut self, now_ms: u64, out: &mut Effects) {
        let absent: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for member_id in absent {
            self.remove_member(&member_id, GroupError::UnknownMemberId.code(), out);
        }
        self.join_deadline_ms = None;
        self.initial_delay_until_ms = None;
        let leader_joined = self
            .leader
            .as_ref()
            .and_then(|leader| self.members.get(leader))
            .is_some_and(|m| m.awaiting_join.is_some());
        if !self.members.is_empty() && !leader_joined {
            let joined = self
                .members
                .values()
                .find(|m| m.awaiting_join.is_some())
                .map(|m| m.id.clone());
            match joined {
                Some(new_leader) => self.leader = Some(new_leader),
                None => {
                    // Only static members that did not rejoin remain: wait
                    // another rebalance timeout for them (or their expiry).
                    self.join_deadline_ms =
                        Some(now_ms.saturating_add(self.max_rebalance_timeout_ms()));
                    return;
                }
            }
        }
        self.generation = self.generation.wrapping_add(1).max(1);
        if self.members.is_empty() {
            // The protocol type stays: an empty consumer group is still one.
            self.protocol_name = None;
            self.leader = None;
            self.transition(GroupState::Empty, now_ms);
            out.propose(
                vec![Record::Group(self.to_record(now_ms))],
                OnAcknowledged::Nothing,
            );
            return;
        }
        self.protocol_name = self.select_protocol();
        self.transition(GroupState::CompletingRebalance, now_ms);
        self.pending_sync = self.members.keys().cloned().collect();
        self.sync_deadline_ms = Some(now_ms.saturating_add(self.max_rebalance_timeout_ms()));
        let everyone = self.member_subscriptions();
        let leader = self.leader.clone().unwrap_or_default();
        for member in self.members.values_mut() {
            member.is_new = false;
            member.heartbeat_deadline_ms = now_ms.saturating_add(ms(member.session_timeout_ms));
            let Some(reply) = member.awaiting_join.take() else {
                continue;
            };
            let members = if member.id == leader {
                everyone.clone()
            } else {
                Vec::new()
            };
            out.join(
                reply,
                JoinAnswer {
                    error_code: 0,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    leader: leader.clone(),
                    member_id: member.id.clone(),
                    skip_assignment: false,
                    members,
                },
            );
        }
    }

    /// Removes a member (left, expired, fenced) and rebalances the rest.
    pub fn remove_member_and_rebalance(
        &mut self,
        member_id: &str,
        error_code: i16,
        config: &GroupConfig,
        now_ms: u64,
        out: &mut Effects,
    ) {
        self.remove_member(member_id, error_code, out);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(config, now_ms, out)
            }
            GroupState::PreparingRebalance => self.try_complete_join(now_ms, out),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Fires every deadline that has passed at `now_ms`.
    pub fn on_tick(&mut self, config: &GroupConfig, now_ms: u64, out: &mut Effects) {
        if self.state == GroupState::Dead {
            return;
        }
        let before = self.pending_members.len();
        self.pending_members
            .retain(|_, deadline| *deadline > now_ms);
        if self.pending_members.len() != before {
            self.try_complete_join(now_ms, out);
        }
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.has_expired(now_ms))
            .map(|m| m.id.clone())
            .collect();
        for member_id in expired {
            self.remove_member_and_rebalance(
                &member_id,
                GroupError::UnknownMemberId.code(),
                config,
                now_ms,
                out,
            );
        }
        if let Some(deadline) = self.sync_deadline_ms
            && now_ms >= deadline
        {
            self.sync_deadline_ms = None;
            let laggards: Vec<String> =
                std::mem::take(&mut self.pending_sync).into_iter().collect();
            let dropped = !laggards.is_empty();
            for member_id in laggards {
                self.remove_member(&member_id, GroupError::UnknownMemberId.code(), out);
            }
            if dropped
                && matches!(
                    self.state,
                    GroupState::Stable | GroupState::CompletingRebalance
                )
            {
                self.prepare_rebalance(config, now_ms, out);
            }
        }
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let Some(deadline) = self.join_deadline_ms.filter(|&d| now_ms >= d) else {
            return;
        };
        match self.initial_delay_until_ms {
            Some(limit) if self.new_member_added && now_ms < limit => {
                // New members keep arriving: hold the phase open a little
                // longer, never past the rebalance timeout.
                self.new_member_added = false;
                let next = deadline
                    .saturating_add(config.initial_rebalance_delay_ms)
                    .min(limit);
                self.join_deadline_ms = Some(next.max(now_ms + 1));
            }
            Some(_) => {
                self.initial_delay_until_ms = None;
                self.join_deadline_ms =
                    Some(now_ms.saturating_add(self.max_rebalance_timeout_ms()));
                if self.all_members_joined() {
                    self.complete_join(now_ms, out);
                }
            }
            None => self.complete_join(now_ms, out),
        }
    }
}
