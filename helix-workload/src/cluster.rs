//! A local Helix cluster for the tool to run against when it is given no
//! broker: `nodes` helix-server processes on free ports of 127.0.0.1, each
//! with its own data directory under a temporary folder, killed when the
//! cluster is dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;

use crate::admin;

const START_LIMIT: Duration = Duration::from_secs(60);

pub struct LocalCluster {
    pub bootstrap: String,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

/// The helix-server binary: `$HELIX_SERVER_BIN`, else the one beside this
/// executable (target/<profile>/, also from target/<profile>/deps/).
pub fn server_binary() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("HELIX_SERVER_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let near = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("helix-server"))
        .find(|bin| bin.is_file());
    near.ok_or_else(|| {
        format!("no helix-server beside {}: build it (cargo build --release -p helix-server) or set HELIX_SERVER_BIN", exe.display())
    })
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

impl LocalCluster {
    /// Starts `nodes` nodes from `binary` and waits until every one is listed
    /// in Metadata. `extra` goes to every node's command line.
    pub fn start(nodes: u32, binary: &Path, extra: &[String]) -> Result<LocalCluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("helix-workload-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let mut conf = String::new();
        let mut kafka = Vec::new();
        for id in 1..=nodes {
            let (k, p) = (free_port()?, free_port()?);
            conf.push_str(&format!(
                "[[nodes]]\nid = {id}\nkafka = \"127.0.0.1:{k}\"\npeer = \"127.0.0.1:{p}\"\n\n"
            ));
            kafka.push(format!("127.0.0.1:{k}"));
        }
        let conf_path = dir.path().join("cluster.toml");
        std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
        let mut cluster = LocalCluster {
            bootstrap: kafka.join(","),
            children: Vec::new(),
            dir,
        };
        for id in 1..=nodes {
            let log = std::fs::File::create(cluster.log_path(id)).map_err(|e| e.to_string())?;
            let child = Command::new(binary)
                .arg("--config")
                .arg(&conf_path)
                .args(["--node-id", &id.to_string(), "--data-dir"])
                .arg(cluster.dir.path().join(format!("node{id}")))
                .args(extra)
                .env(
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log)
                .spawn()
                .map_err(|e| format!("{}: {e}", binary.display()))?;
            cluster.children.push(child);
        }
        cluster.wait_for(nodes as usize)?;
        Ok(cluster)
    }

    fn log_path(&self, id: u32) -> PathBuf {
        self.dir.path().join(format!("node{id}.log"))
    }

    fn wait_for(&mut self, nodes: usize) -> Result<(), String> {
        let reader = admin::reader(&self.bootstrap)?;
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let exited = self.children.iter_mut().enumerate().find_map(|(i, child)| {
                let status = child.try_wait().ok().flatten()?;
                Some((i as u32 + 1, status))
            });
            if let Some((id, status)) = exited {
                let log = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                return Err(format!(
                    "node {id} exited ({status}); its log ends:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
            if let Ok(metadata) = reader.fetch_metadata(None, Duration::from_secs(2))
                && metadata.brokers().len() == nodes
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the cluster did not list {nodes} brokers within {START_LIMIT:?} (logs in {})",
                    self.dir.path().display()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The process ids, for CPU and memory figures.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
