#!/usr/bin/env bash
# Hand-made mutants of helix-raft's safety-relevant code. Each is applied in
# turn, helix-raft's tests run (release build, the default seed counts CI
# runs), and the mutant must be caught: some test must fail. The table in
# docs/raft.md is this script's output.
#
#   scripts/raft-mutants.sh            # all mutants
#   scripts/raft-mutants.sh 3          # only mutant 3
#
# The source is restored after each mutant (and on exit, whatever happens).
set -euo pipefail
cd "$(dirname "$0")/.."

SRC=helix-raft/src
BACKUP=$(mktemp -d)
trap 'cp -r "$BACKUP/src/." "$SRC/"; rm -rf "$BACKUP"' EXIT
cp -r "$SRC" "$BACKUP/src"

# name | file | exact text | replacement  (several lines: several edits)
MUTANTS=(
"forget voted_for on restart|group/mod.rs|(restored.hard_state.term, restored.hard_state.voted_for)|(restored.hard_state.term, None)"
"accept AppendEntries responses from a lower term|group/step.rs|} else if m.term < self.term {|} else if m.term < self.term \&\& !matches!(m.body, MessageBody::AppendResponse { .. } \| MessageBody::HeartbeatResponse { .. }) {"
"acknowledge an older term's entry (no current-term condition; Raft Figure 8)|group/replication.rs|if n > self.acknowledged \&\& self.log.term_at(n) == Some(self.term) {|if n > self.acknowledged {"
"acknowledge at the match index, not the durable index|group/replication.rs|let n = self.quorum_position(mine, \|pr\| pr.durable);|let n = self.quorum_position(mine, \|pr\| pr.matched);"
"grant votes ignoring log freshness|group/election.rs|let grant = can_vote \&\& self.log.is_up_to_date(last_index, last_term);|let grant = can_vote;"
"keep leader_match across a term change|group/mod.rs|        self.leader_match = LogIndex(0);\n        self.durable_reported = LogIndex(0);\n    }|        self.durable_reported = LogIndex(0);\n    }"
"report the durable index unclamped by leader_match|group/follower.rs|self.log.durable().min(self.leader_match)|self.log.durable()"
"commit beyond what matches the leader (unclamped commit)|group/follower.rs|self.log.commit_to(commit.min(self.leader_match));|self.log.commit_to(commit);"
)

apply() {
  python3 - "$SRC/$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
unescape = lambda s: s.replace("\\n", "\n").replace("\\&", "&").replace("\\|", "|")
old, new = unescape(old), unescape(new)
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"mutant text found {text.count(old)} times in {path}: {old!r}")
open(path, "w").write(text.replace(old, new))
PY
}

only=${1:-}
survivors=0
printf '| # | mutant | caught by (failing tests) | seeds that failed (of the default run) |\n|---|---|---|---|\n'
for i in "${!MUTANTS[@]}"; do
  n=$((i + 1))
  [[ -n "$only" && "$only" != "$n" ]] && continue
  # Split on unescaped '|'.
  mapfile -t f < <(python3 -c 'import re,sys; print("\n".join(re.split(r"(?<!\\)\|", sys.argv[1])))' "${MUTANTS[$i]}")
  apply "${f[1]}" "${f[2]}" "${f[3]}"
  log=$(mktemp)
  cargo test -q -p helix-raft --release --no-fail-fast >"$log" 2>&1 || true
  cp -r "$BACKUP/src/." "$SRC/"
  failing=$(grep -E '^    [a-z_:]+$' "$log" | sed 's/^ *//' | sort -u | paste -sd, - || true)
  seeds=$(grep -oE '[0-9]+ seeds violated' "$log" | head -1 | cut -d' ' -f1 || true)
  if grep -q "error\[E" "$log"; then
    failing="(does not compile: fix the mutant)"
  fi
  if [[ -z "$failing" ]]; then
    failing="SURVIVED"
    survivors=$((survivors + 1))
  fi
  printf '| %s | %s | %s | %s |\n' "$n" "${f[0]}" "$failing" "${seeds:--}"
  rm -f "$log"
done
exit "$survivors"
