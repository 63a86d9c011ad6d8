//! The node identity file, `<data-dir>/node-identity`: which cluster and
//! node this data directory belongs to, a random incarnation id, and
//! whether the node is still rejoining (ADR 0018). Written and fsynced
//! before the node takes part in any group: a data directory without it
//! has never taken part, or was replaced.

use std::path::{Path, PathBuf};

use crate::error::{HelixError, Result};

const FILE: &str = "node-identity";

/// Where the node stands with the cluster it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// Takes part with whatever its replicas hold.
    Member,
    /// Started on a directory that lost what it held while the cluster
    /// existed: replicas it opens with no stored state start as learners
    /// until the controller's log is restored and applied.
    Rejoining,
}

/// The contents of the identity file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub cluster_id: String,
    pub node_id: i32,
    /// Random, new for each data directory: tells two lives of one node
    /// apart in logs.
    pub incarnation: String,
    pub membership: Membership,
}

impl NodeIdentity {
    fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(FILE)
    }

    /// The identity stored in `data_dir`, if any. One of another cluster or
    /// another node is refused: the directory is not this node's.
    pub fn load(data_dir: &Path, cluster_id: &str, node_id: i32) -> Result<Option<NodeIdentity>> {
        let path = NodeIdentity::path(data_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let bad = |why: &str| HelixError::CorruptState(format!("{}: {why}", path.display()));
        let mut fields = std::collections::BTreeMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| bad("a line without '='"))?;
            fields.insert(k.trim(), v.trim());
        }
        let field = |k: &str| {
            fields
                .get(k)
                .copied()
                .ok_or_else(|| bad(&format!("no {k}")))
        };
        let identity = NodeIdentity {
            cluster_id: field("cluster_id")?.to_string(),
            node_id: field("node_id")?.parse().map_err(|_| bad("node_id"))?,
            incarnation: field("incarnation")?.to_string(),
            membership: match field("membership")? {
                "member" => Membership::Member,
                "rejoining" => Membership::Rejoining,
                _ => return Err(bad("membership")),
            },
        };
        if identity.cluster_id != cluster_id || identity.node_id != node_id {
            return Err(HelixError::Config(format!(
                "{} belongs to node {} of cluster {:?}, not node {node_id} of cluster {cluster_id:?}: wrong data directory",
                path.display(),
                identity.node_id,
                identity.cluster_id
            )));
        }
        Ok(Some(identity))
    }

    /// Replaces the file atomically, durable when this returns.
    pub fn store(&self, data_dir: &Path) -> Result<()> {
        use std::io::Write;
        std::fs::create_dir_all(data_dir)?;
        let path = NodeIdentity::path(data_dir);
        let tmp = path.with_extension("tmp");
        let membership = match self.membership {
            Membership::Member => "member",
            Membership::Rejoining => "rejoining",
        };
        let text = format!(
            "cluster_id={}\nnode_id={}\nincarnation={}\nmembership={membership}\n",
            self.cluster_id, self.node_id, self.incarnation
        );
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(data_dir)?.sync_all()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_survives_a_restart_and_refuses_another_node() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(NodeIdentity::load(dir.path(), "c", 1).expect("none"), None);
        let id = NodeIdentity {
            cluster_id: "c".into(),
            node_id: 1,
            incarnation: "abc".into(),
            membership: Membership::Rejoining,
        };
        id.store(dir.path()).expect("store");
        assert_eq!(
            NodeIdentity::load(dir.path(), "c", 1).expect("load"),
            Some(id.clone())
        );
        assert!(NodeIdentity::load(dir.path(), "c", 2).is_err());
        assert!(NodeIdentity::load(dir.path(), "other", 1).is_err());
        let member = NodeIdentity {
            membership: Membership::Member,
            ..id
        };
        member.store(dir.path()).expect("store");
        assert_eq!(
            NodeIdentity::load(dir.path(), "c", 1).expect("load"),
            Some(member)
        );
        std::fs::write(dir.path().join(FILE), "cluster_id=c\n").expect("write");
        assert!(NodeIdentity::load(dir.path(), "c", 1).is_err());
    }
}
