//go:build !benchlean

package main

import (
	"fmt"
	"strings"
	"time"
)

// The continuous-backup targets.
const (
	lagTarget         = 2 * time.Second // commit lag p99
	followerRSSTarget = 64 << 20        // the follower's peak, its own full included
	replayTarget      = 100_000         // events per second of offline replay
)

// renderContinuous writes the figures of the "pitr" subcommand.
func renderContinuous(c *pitrReport) string {
	var b strings.Builder
	b.WriteString("## Continuous backup\n\n")
	if c == nil {
		b.WriteString("Not measured by this run: `make bench` runs `etcdbackup-bench pitr` after the backup and restore modes.\n\n")
		return b.String()
	}
	full := "an empty etcd"
	if c.Full != "" {
		full = fmt.Sprintf("a copy of the %s etcd (%d keys)", c.Full, c.Keys)
	}
	fmt.Fprintf(&b, "Measured by `%s` (`etcdbackup-bench pitr`) on %s, one run. A follower (a process of its own, in the backup modes' lean binary) starts on %s and takes the chain's full backup itself, as a follower started on a cluster does; then %d writes of %d-byte values, asked at %d/s for %.0f s and done at %.0f/s, which it stores in %d segments (zstd, the default flush) on MinIO. The commit lag of a write is the time from etcd's answer to it to the commit of the manifest of the segment holding it, for every write; the follower's peak RSS is its VmHWM at its end, its own full backup included. Replay is the offline application of the events to the restored full backup (`PointResult.Replay`). The chain is then compacted into a synthetic full backup (`compact.Compactor`: replay, store, drill), and its last revision restored from it, next to restores of the full backup alone (as in the section below).\n\n",
		c.Command, c.Started.Format("2006-01-02 15:04 MST"), full, c.Writes, c.Value, c.Asked, c.Seconds, c.Rate, c.Segments)
	b.WriteString("| figure | measured | target |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| commit lag p50 | %s | |\n", c.LagP50.Round(time.Millisecond))
	fmt.Fprintf(&b, "| commit lag p99 | %s | <= %v: %s |\n", c.LagP99.Round(time.Millisecond), lagTarget, verdict(c.LagP99 <= lagTarget))
	fmt.Fprintf(&b, "| commit lag max | %s | |\n", c.LagMax.Round(time.Millisecond))
	fmt.Fprintf(&b, "| follower peak RSS (VmHWM), its full backup included | %s | <= %d MiB: %s |\n", formatBytes(c.HWM), followerRSSTarget>>20, verdict(c.HWM <= followerRSSTarget))
	if c.ChainHWM > 0 {
		fmt.Fprintf(&b, "| follower peak RSS when its chain started, after its full backup | %s | |\n", formatBytes(c.ChainHWM))
	}
	eps := rate(c.Events, c.Replay)
	fmt.Fprintf(&b, "| offline replay | %d events in %s: %.0f events/s | >= %d/s: %s |\n", c.Events, c.Replay.Round(time.Millisecond), eps, replayTarget, verdict(eps >= replayTarget))
	fmt.Fprintf(&b, "| restore of revision %d (full at %d, then replay) | %s | |\n", c.RestoredRevision, c.FullRevision, c.PointTotal.Round(time.Millisecond))
	fmt.Fprintf(&b, "| restore of the full backup alone | %s | |\n", c.FullOnly.Round(time.Millisecond))
	for _, r := range compactionRows(c.Compaction, c.FullOnly, c.PointTotal, false) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	b.WriteString("\n")
	return b.String()
}

// renderPointRestore writes the figures of the "pitr-restore" subcommand.
func renderPointRestore(p *pitrReport) string {
	var b strings.Builder
	b.WriteString("### Restoring a point after many writes\n\n")
	if p == nil {
		b.WriteString("Not measured by this run: `make bench` runs `etcdbackup-bench pitr-restore` last.\n\n")
		return b.String()
	}
	fmt.Fprintf(&b, "Measured by `%s` (`etcdbackup-bench pitr-restore`) on %s, one run. A full backup (zstd) of a copy of the %s etcd (%d keys, revision %d), then %d puts of %d-byte values of random letters, written as fast as etcd took them while a follower kept up, stored in %d segments on MinIO, then the chain compacted into a synthetic full backup (`compact.Compactor`, zstd) and its last revision restored from it. Each restore reads from MinIO, checks every digest and writes a member's data directory; the restores of the chain ran twice and the faster run is shown; %s.\n\n",
		p.Command, p.Started.Format("2006-01-02 15:04 MST"), p.Full, p.Keys, p.FullRevision, p.Writes, p.Value, p.Segments, compactRoundsText(p.Compaction))
	b.WriteString("| figure | measured | target |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| restore of the full backup alone (revision %d) | %s | |\n", p.FullRevision, p.FullOnly.Round(time.Millisecond))
	ratio := "—"
	if p.FullOnly > 0 {
		ratio = fmt.Sprintf("%.1fx the full alone", p.PointTotal.Seconds()/p.FullOnly.Seconds())
	}
	fmt.Fprintf(&b, "| restore of revision %d: the full backup, then %d segments | %s (%s) | |\n", p.RestoredRevision, p.Segments, p.PointTotal.Round(time.Millisecond), ratio)
	fmt.Fprintf(&b, "| of which the offline replay | %d events in %s: %.0f events/s | |\n", p.Events, p.Replay.Round(time.Millisecond), rate(p.Events, p.Replay))
	for _, r := range compactionRows(p.Compaction, p.FullOnly, p.PointTotal, true) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	b.WriteString("\n")
	return b.String()
}

// compactRoundsText says how the restores after compaction c ran.
func compactRoundsText(c *compactReport) string {
	if c == nil || len(c.Rounds) == 0 {
		return "the one after compaction once"
	}
	return fmt.Sprintf("after compaction, restores of the newest point (the synthetic full alone) and of the full backup alone ran next to each other in %d rounds, which first alternating, and the target judges them as the backup modes' wall times are judged (see Targets)", len(c.Rounds))
}

// rate returns n per second of d, 0 for no time.
func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// logicalModes are the rows of the logical backups' table, in order.
var logicalModes = []string{exportAgainstMode, "export-keys", "export-keys-mem", "export-keys-zip-mem", "cli-export", "import-keys", "import-keys-zip", "cli-import"}

// renderLogical writes the logical backups' figures of every size: the
// snapshot backup (c) they are read against, the exports and the
// imports, medians of the tables above.
func renderLogical(r *results) string {
	var b strings.Builder
	b.WriteString("## Logical backups\n\n")
	var sizes []sizeInfo
	rows := map[string]map[string]row{}
	for _, sz := range r.Sizes {
		m := r.byMode(sz.Label)
		for _, name := range logicalModes[1:] {
			if _, ok := m[name]; ok {
				sizes, rows[sz.Label] = append(sizes, sz), m
				break
			}
		}
	}
	if len(sizes) == 0 {
		b.WriteString("Not measured by this run (the export and import modes).\n\n")
		return b.String()
	}
	b.WriteString("Medians of the tables above: wall time, peak RSS (VmHWM), and for the exports the stored size; the targets for the CLI's rows are in Targets.\n\n| mode |")
	for _, sz := range sizes {
		fmt.Fprintf(&b, " %s etcd (%d keys) |", sz.Label, sz.Keys)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(sizes)) + "\n")
	for _, name := range logicalModes {
		var label string
		var cells []string
		for _, sz := range sizes {
			rw, ok := rows[sz.Label][name]
			if !ok {
				cells = append(cells, "—")
				continue
			}
			label = rw.Mode.Short
			cells = append(cells, logicalCell(rw, rows[sz.Label][exportAgainstMode], sz.Keys))
		}
		if label != "" {
			fmt.Fprintf(&b, "| %s | %s |\n", label, strings.Join(cells, " | "))
		}
	}
	b.WriteString("\n")
	return b.String()
}

// logicalCell writes one mode's figures on one size.
func logicalCell(rw, against row, keys int64) string {
	cell := fmt.Sprintf("%.2f s, %.0f MiB", rw.Wall, float64(rw.PeakRSS)/(1<<20))
	switch {
	case rw.Mode.Group == groupRestore && rw.Wall > 0:
		cell += fmt.Sprintf(", %.0f keys/s", float64(keys)/rw.Wall)
	case rw.Mode.Name != exportAgainstMode && against.Wall > 0:
		cell += fmt.Sprintf(" (%.2fx %s), %s stored", rw.Wall/against.Wall, against.Mode.Short, formatBytes(rw.Stored))
	}
	return cell
}
