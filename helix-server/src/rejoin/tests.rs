//! Tests of [`Standing`]: who votes, who rejoins as a learner.

use super::*;

fn ids(v: &[u64]) -> Vec<NodeId> {
    v.iter().map(|&i| NodeId(i)).collect()
}

fn settled(dir: &Path, membership: Membership, lost: Option<&[u64]>) -> Arc<Standing> {
    let s = Standing::pending(dir).expect("standing");
    if lost.is_some() {
        s.lost_own_page_cache.store(true, Ordering::Release);
    }
    s.settle(NodeIdentity {
        cluster_id: "c".into(),
        node_id: 1,
        incarnation: "i".into(),
        membership,
    });
    s
}

#[test]
fn a_node_that_has_not_checked_its_boot_id_does_not_answer_no_loss() {
    // Peers ask while the node starts: an answer given before it has
    // compared its boot id must not be taken as "intact" (a power loss
    // of every node once left a node out of its peers' lost sets).
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Standing::pending(dir.path()).expect("standing");
    let early = s.answer(NodeId(2));
    assert!(!early.boot_checked && !early.page_cache_lost);
    s.lost_own_page_cache.store(true, Ordering::Release);
    s.boot_checked.store(true, Ordering::Release);
    let later = s.answer(NodeId(2));
    assert!(later.boot_checked && later.page_cache_lost);
}

#[test]
fn a_rejoining_node_makes_learners_of_replicas_without_state_in_groups_with_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = settled(dir.path(), Membership::Rejoining, None);
    let three = ids(&[1, 2, 3]);
    let r = Durability::ReplicationOnly;
    assert!(
        s.learner_at_open(dir.path(), false, None, r, &three)
            .is_some()
    );
    assert!(
        s.learner_at_open(dir.path(), true, None, r, &three)
            .is_none()
    );
    assert!(
        s.learner_at_open(dir.path(), false, None, r, &ids(&[1]))
            .is_none()
    );
    let member = settled(dir.path(), Membership::Member, None);
    assert!(
        member
            .learner_at_open(dir.path(), false, None, r, &three)
            .is_none()
    );
}

#[test]
fn a_lost_page_cache_makes_learners_of_replication_only_logs_unless_a_majority_lost_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = settled(dir.path(), Membership::Member, Some(&[1]));
    let r = Durability::ReplicationOnly;
    let open = |mark: Option<&[u64]>, d, voters: &[u64]| {
        s.learner_at_open(dir.path(), true, mark, d, &ids(voters))
    };
    assert!(open(Some(&[1]), r, &[1, 2, 3]).is_some());
    assert!(open(None, r, &[1, 2, 3]).is_none(), "no mark, nothing lost");
    assert!(
        open(Some(&[1]), Durability::Fsync, &[1, 2, 3]).is_none(),
        "nothing unsynced was ever reported"
    );
    assert!(open(Some(&[1, 3]), r, &[1, 2, 3]).is_none());
    assert!(open(Some(&[1, 3]), r, &[1, 2, 4]).is_some());
    assert!(open(Some(&[1]), r, &[1]).is_none(), "the only replica");
}

#[test]
fn a_node_says_it_lost_its_page_cache_only_until_its_learners_are_restored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let replica = dir.path().join("replica");
    std::fs::create_dir_all(&replica).expect("mkdir");
    let s = settled(dir.path(), Membership::Member, Some(&[1]));
    assert!(s.answer(NodeId(2)).page_cache_lost, "while opening");
    let vote = HardStateFile::new(&replica);
    let mut hs = helix_raft::HardState {
        learner: true,
        ..Default::default()
    };
    vote.store(hs).expect("store");
    assert!(
        s.learner_at_open(
            &replica,
            true,
            Some(&[1]),
            Durability::ReplicationOnly,
            &ids(&[1, 2, 3])
        )
        .is_some()
    );
    s.set_opened();
    assert!(s.answer(NodeId(2)).page_cache_lost, "a learner left");
    hs.learner = false;
    vote.store(hs).expect("store");
    assert!(!s.answer(NodeId(2)).page_cache_lost, "restored");
    let fresh = settled(dir.path(), Membership::Member, None);
    assert!(!fresh.answer(NodeId(2)).page_cache_lost);
    assert!(fresh.answer(NodeId(2)).formed);
}

#[test]
fn a_rejoin_ends_once_the_controller_votes_and_its_log_is_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let controller = dir.path().join("controller");
    std::fs::create_dir_all(&controller).expect("mkdir");
    let s = settled(dir.path(), Membership::Rejoining, None);
    let vote = HardStateFile::new(&controller);
    let mut hs = helix_raft::HardState {
        learner: true,
        ..Default::default()
    };
    vote.store(hs).expect("store");
    let mut target = None;
    assert!(
        !s.finish_rejoin_when(&controller, 0, 5, &mut target)
            .expect("check")
    );
    hs.learner = false;
    vote.store(hs).expect("store");
    assert!(
        !s.finish_rejoin_when(&controller, 3, 5, &mut target)
            .expect("check")
    );
    assert_eq!(target, Some(5));
    // More arrived since: only what was there when it voted again counts.
    assert!(
        s.finish_rejoin_when(&controller, 5, 9, &mut target)
            .expect("check")
    );
    assert!(!s.rejoining());
    assert_eq!(
        NodeIdentity::load(dir.path(), "c", 1)
            .expect("load")
            .map(|i| i.membership),
        Some(Membership::Member)
    );
}
