//! Interim persistence of controller commands (docs/adr/0010): one JSON
//! command per line, fsynced before the command takes effect, replayed at
//! start. A torn last line (a crash mid-write) is cut off.
//!
//! This is where group 0's helix-wal log goes once the controller is a
//! replicated Raft group; the command type and apply step stay the same.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use super::Command;
use crate::error::{HelixError, Result};

/// The append-only command log.
#[derive(Debug)]
pub struct CommandLog {
    file: File,
}

impl CommandLog {
    /// Opens the log and returns it with every intact command, in order.
    pub fn open(path: &Path) -> Result<(CommandLog, Vec<Command>)> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let mut commands = Vec::new();
        let mut valid_len: u64 = 0;
        let mut reader = BufReader::new(file.try_clone()?);
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line)?;
            if n == 0 || !line.ends_with('\n') {
                break;
            }
            match serde_json::from_str::<Command>(line.trim_end()) {
                Ok(c) => commands.push(c),
                Err(e) => {
                    return Err(HelixError::CorruptState(format!(
                        "{}: command {} is unreadable: {e}",
                        path.display(),
                        commands.len() + 1
                    )));
                }
            }
            valid_len += n as u64;
        }
        if file.metadata()?.len() > valid_len {
            tracing::warn!(path = %path.display(), "cutting a torn controller command");
            file.set_len(valid_len)?;
        }
        Ok((CommandLog { file }, commands))
    }

    /// Appends a command durably.
    pub fn append(&mut self, command: &Command) -> Result<()> {
        let mut line = serde_json::to_string(command)
            .map_err(|e| HelixError::CorruptState(format!("cannot encode command: {e}")))?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()?;
        Ok(())
    }
}
