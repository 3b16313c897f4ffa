//go:build !benchlean

package main

import (
	"fmt"
	"strings"
	"time"
)

// Targets of the issue.
const (
	streamRatioTarget = 0.8  // streaming wall time / two-step's
	rssFlatTarget     = 1.15 // peak RSS at 1 GiB / at 256 MiB
	zstdRatioTarget   = 0.4  // stored / raw bytes with zstd
	restoreTarget     = 1.0  // restore wall time / download-then-restore's
	cpuSaveFactor     = 2.0  // the CLI's CPU per GiB / etcdctl save's, plus zstd's own
	// The footprint targets: against the raw drain of the snapshot stream
	// (drainMode), and the peak RSS of the CLI's backup at its default
	// --memory (memoryMode).
	drainMode        = "snapshot-read"
	memoryMode       = "cli-save"
	zstdDrainTarget  = 1.1  // zstd backup wall time / the drain's
	plainDrainTarget = 1.05 // uncompressed backup wall time / the drain's
	memoryRSSTarget  = 48 << 20
	// The logical backup targets, on the CLI's export and import: peak
	// RSS, and the export's wall time against the zstd backup (c).
	logicalRSSTarget  = 64 << 20
	exportWallTarget  = 1.5
	exportAgainstMode = "stream-zstd"
	// The distant store's targets, on the CLI's backup at its defaults
	// through the store at remoteJudgedRTT: wall time against two-step
	// through the same store, and peak RSS.
	remoteJudgedRTT   = 100 * time.Millisecond
	remoteRatioTarget = 0.8
	remoteRSSTarget   = 64 << 20
)

// renderReport writes BENCHMARKS.md: every figure and verdict in it comes
// from r, the notes' too (renderNotes).
func renderReport(r *results, chart string) (string, error) {
	notes, err := renderNotes(r, false)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("# Benchmarks\n\n")
	w("Written by `%s` (the command in `internal/bench`) on %s. Every figure and verdict below comes from that run's `bench-out/results.json`, the notes' too. Do not edit by hand, and do not remove figures: run `make bench` again to regenerate the whole file, or `bench-out/etcdbackup-bench report` to render it again from `bench-out/results.json`.\n\n",
		r.Command, r.Started.Format("2006-01-02 15:04 MST"))
	w("Every backup mode takes a backup of one etcd member to a MinIO bucket on the same machine. etcd, MinIO and each run of a mode are separate processes, so the peak RSS and CPU time of a mode are those of the backup process alone. ")
	w("Each mode ran %s, modes interleaved round after round; in each round every mode compared with its group's baseline ran right next to a run of the baseline, which so ran more than once a round. The tables show medians, with the range of wall times in parentheses.\n\n", runCounts(r))
	w("![wall time and peak RSS against etcd size](%s)\n\n", chart)
	w("Medians; the same colour is the same mode in both plots; grey lines are references, not backups.\n\n")

	w("## Machine\n\n")
	w("| | |\n|---|---|\n")
	w("| CPUs | %d (%s) |\n", r.Machine.CPUs, r.Machine.CPUModel)
	w("| memory | %s |\n", formatBytes(r.Machine.MemoryBytes))
	w("| Go | %s %s |\n", r.Machine.GoVersion, r.Machine.OS)
	w("| etcd | %s (go.etcd.io/etcd/server/v3/embed in its own process, fsync on) |\n", r.Machine.EtcdVersion)
	w("| MinIO | %s (single drive, local disk, plain HTTP on 127.0.0.1) |\n", r.Machine.MinIO)
	w("| etcdbackup | %s |\n", r.Machine.Library)
	lo, hi, others := loadRange(r)
	w("| load | one-minute load average %.2f to %.2f at the start of the runs; other processes used a median %.2f cores during a run (the machine is shared) |\n", lo, hi, others)
	w("| commit | %s |\n", commitText(r.Commit))
	w("| date | %s |\n\n", dateText(r))
	w("%s", renderGroups(r))

	for _, sz := range r.Sizes {
		w("## etcd of %s\n\n", sz.Label)
		how := fmt.Sprintf("filled in %s", (time.Duration(sz.FillSeconds * float64(time.Second))).Round(time.Second))
		if sz.Cached {
			how += ", reused from the fill cache"
		}
		w("Database %s (%s in use), %d keys holding %s of keys and values (%s); the snapshot stream is %s (%d bytes).\n\n",
			formatBytes(sz.DBSize), formatBytes(sz.DBSizeInUse), sz.Keys, formatBytes(sz.KVBytes), how, formatBytes(sz.Raw), sz.Raw)
		rows := r.summarize(sz.Label)
		if br := inGroup(rows, groupBackup); len(br) > 0 {
			w("%s\n", renderTable(br))
		}
		if rr := inGroup(rows, groupRestore); len(rr) > 0 {
			w("Restore of a backup of this etcd into a new member data directory:\n\n")
			w("%s\n", renderRestoreTable(rr))
		}
		w("%s", renderRemoteTables(r, rows))
		if cr := inGroup(rows, groupCopy); len(cr) > 0 {
			w("Copy of the backup (b) took of this etcd (uncompressed: the size of its snapshot) from the bench's MinIO server to a second one on the same machine:\n\n")
			w("%s\n", renderCopyTable(cr))
		}
		if o := sizeOthers(r, sz.Label); o >= quietCores {
			w("Other processes used a median %.2f cores during these runs: compare these wall times with each other, not with the other sizes'.\n\n", o)
		}
	}

	w("## Targets\n\n")
	w("%s\n", renderTargets(r))
	w("%s", renderLogical(r))
	w("%s%s", renderContinuous(r.Continuous), sectionCommit(r, r.Continuous))
	w("%s%s", renderContinuousRemote(r.ContinuousRemote), stepCommit(r, r.remoteStep))
	w("%s%s", renderPointRestore(r.PointRestore), sectionCommit(r, r.PointRestore))
	w("%s%s", renderReplication(r.Replication), stepCommit(r, r.Replication.step))
	w("%s%s", renderSeed(r.Seed, r.Machine.CPUs), stepCommit(r, r.Seed.step))
	w("%s%s", renderRecovery(r.Recovery), stepCommit(r, r.Recovery.step))

	w("## How to read the figures\n\n")
	w("- **wall**: from the first request to etcd to the last byte stored (for etcdbackup: the manifest committed), timed inside the process; process start is not included.\n")
	w("- **vs (a)**: median wall time divided by that of the two-step approach on the same etcd.\n")
	w("- **peak RSS**: the high-water mark of the resident set of the mode's process (`VmHWM`, read by the process at its end), the floor of the binary it runs in included (the idle row: backup modes run in `etcdbackup-bench-lean`, which links what a host backing up links; restore modes in the bench binary, with etcd's server). The CLI rows run the etcdbackup command built as `make release` builds it, a process started by the mode's process: their peak is the CLI's `ru_maxrss`, which the bench accepts only when it is 1 MiB above the starting process' own peak (Linux carries the latter into it); when it is not (a CLI smaller than the binary that starts it), their peak is the CLI's `VmHWM` as last sampled (every 10 ms) before it ended, which misses what it reached in its last moments, and the row says \"sampled\"; their anonymous peak is sampled, and their wall time includes the process' start. The other modes report their own `VmHWM`, not `ru_maxrss`: Linux carries into `ru_maxrss` the resident set of the parent, whose memory a child started by Go's `os/exec` shares until `execve`, which is why a CLI row's `ru_maxrss` counts only when it is above that.\n")
	w("- **stored / raw**: stored object size over the snapshot stream's size.\n")
	w("- **etcd stream open**: how long etcd's snapshot stream, and so its read transaction, stayed open.\n")
	w("- **CPU**: user + system seconds of the backup process, and of etcd and MinIO during the run. On %d cores the three share the CPU, so CPU seconds explain wall times.\n", r.Machine.CPUs)
	w("- **others**: CPU used by other processes during the run, in cores: noise from the shared machine.\n")
	w("- **restore wall**: from the first request to MinIO to the data directory in place, timed inside the process. **vs (f)**: median wall time divided by that of download-then-`etcdutl snapshot restore`.\n")
	w("- **copy**: (j) and (k) copy the object (b) stored, untimed, once per etcd size, to a second MinIO server with the same credentials; wall from the first request to the last byte stored (for (k): the manifest committed, and the process' start); **MiB/s** is the stored object's size over the median wall; **vs (j)** divides by the minio-go baseline's wall. `mc` is not on the bench machine, so (j) is what `mc cp` does between two aliases, in the lean binary. MinIO's CPU is both servers'.\n")
	w("- **peak anon RSS**: the highest anonymous resident memory (`RssAnon`) of the restore process, sampled every %v. Its `VmHWM` counts file pages as well, and etcd's restore maps the database it builds with `MAP_POPULATE`, so the `VmHWM` of any restore, `etcdutl`'s included, holds the whole database: page cache the kernel can drop, not memory the restore holds. The restore targets judge the anonymous peak.\n\n", anonSampleEvery)
	w("Two-step (a) is what `etcdctl snapshot save` then `mc cp` do, in one process: `snapshot.SaveWithVersion` (write a `.part` file, fsync, rename), then minio-go `FPutObject` of the file in %d MiB parts, four in parallel. The etcdbackup modes use `backup.Pipeline` with `backup.NewEtcdSnapshotter` and `backup.BucketUploader` over `storage/s3` with its defaults (8 MiB parts, 4 in flight); (d) encrypts to one generated X25519 age recipient; (e) spools to a temporary file on the same disk.\n\n", twoStepPartSize>>20)
	w("The restore modes restore backups taken once per etcd size, untimed, by (b) (for (f), (g) and the download reference) and by (d) (for (h)), each into a new data directory of one member on the same disk. (f) downloads the object with minio-go `FGetObject`, what `mc cp` does, then runs `etcdutl snapshot restore` (`snapshot.NewV3(...).Restore`, which checks the sha256 trailer first). (g) and (h) find the backup by ID with `restore.Find` (listing the cluster's folder and reading its manifest), then call `Restorer.Restore`: download, decrypt and decompress as the bytes arrive, check the manifest's sha256 and etcd's trailer, write a staging file, restore it with the same etcd function.\n\n")
	if hasRemote(r) {
		w("The remote-store tables run the same jobs against MinIO as a distant S3 endpoint looks to a client: the bench puts a proxy of its own in front of the loopback MinIO, which serves HTTPS with a certificate generated for the run (the client trusts it as a private CA, `s3.Options.CACertFile`, or `caFile` in the CLI's config) and holds each request half the round-trip time before passing it on and each answer the other half before returning it. The client does all of a real client's TLS work; the server's side of TLS is the proxy's, in the bench's own process, counted neither as the mode's CPU nor as others'. Bandwidth is not limited: the delays model the round trip of each request, not a congested link, and a connection's setup costs no extra round trips. Each table's baseline is two-step, or (f), through the same proxy in the same run.\n\n")
	}
	w("The data is Kubernetes-like (internal/bench/gen.go): objects in the apiserver's protobuf envelope with the mix of a real cluster — pods and ReplicaSets repeating their templates with unique names, UIDs, IPs and container IDs; events; leases; ConfigMaps of configuration text and dashboards; Secrets that are mostly high-entropy (TLS keys, service account tokens, Helm releases stored gzipped and base64 encoded); EndpointSlices, Services and a few large CRDs.\n\n")

	w("## Notes\n\n")
	w("%s", notes)
	return b.String(), nil
}

// hasRemote reports whether r measured a mode against a remote store.
func hasRemote(r *results) bool {
	for _, m := range r.Modes {
		if m.Group != groupBackup && m.Group != groupRestore && (isBackupGroup(m.Group) || isRestoreGroup(m.Group)) {
			return true
		}
	}
	return false
}

// renderRemoteTables writes one size's tables of the remote stores'
// groups (see remoteStores), each against its own two-step or (f).
func renderRemoteTables(r *results, rows []row) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, m := range r.Modes {
		g := m.Group
		if g == groupBackup || g == groupRestore || !(isBackupGroup(g) || isRestoreGroup(g)) || seen[g] {
			continue
		}
		seen[g] = true
		gr := inGroup(rows, g)
		if len(gr) == 0 {
			continue
		}
		st, _ := findStore(strings.TrimPrefix(strings.TrimPrefix(g, groupBackup+"-"), groupRestore+"-"))
		if isRestoreGroup(g) {
			fmt.Fprintf(&b, "Restore from %s, against (f) from the same store:\n\n%s\n", st.describe(), renderRestoreTable(gr))
		} else {
			fmt.Fprintf(&b, "Backup to %s, against two-step to the same store:\n\n%s\n", st.describe(), renderTable(gr))
		}
	}
	return b.String()
}

// inGroup returns the rows of one group of modes.
func inGroup(rows []row, group string) []row {
	var out []row
	for _, rw := range rows {
		if rw.Mode.Group == group {
			out = append(out, rw)
		}
	}
	return out
}

// renderRestoreTable writes one size's table of restore modes.
func renderRestoreTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| mode | wall s | vs (f) | peak anon RSS MiB | peak RSS (VmHWM) MiB | object read | snapshot | CPU s: restore / MinIO | others (cores) |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, rw := range rows {
		wall := fmt.Sprintf("%.2f (%.2f–%.2f)", rw.Wall, rw.WallMin, rw.WallMax)
		if rw.Runs == 1 {
			wall = fmt.Sprintf("%.2f", rw.Wall)
		}
		ratio := "—"
		if rw.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", rw.Ratio)
		}
		anon := fmt.Sprintf("%.0f", float64(rw.PeakAnon)/(1<<20))
		if rw.PeakAnonMax > rw.PeakAnon+(1<<20) {
			anon += fmt.Sprintf(" (max %.0f)", float64(rw.PeakAnonMax)/(1<<20))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f | %s | %s | %.1f / %.1f | %.2f |\n",
			rw.Mode.Label, wall, ratio, anon, float64(rw.PeakRSS)/(1<<20), formatBytes(rw.Stored), formatBytes(rw.Raw), rw.CPU, rw.MinCPU, rw.OtherCores)
	}
	return b.String()
}

// renderCopyTable writes one size's table of copy modes: throughput is
// the stored object's size over the median wall time.
func renderCopyTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| mode | wall s | vs (j) | MiB/s | peak RSS MiB | object | CPU s: copy / MinIO (both servers) | others (cores) |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, rw := range rows {
		wall := fmt.Sprintf("%.2f (%.2f–%.2f)", rw.Wall, rw.WallMin, rw.WallMax)
		if rw.Runs == 1 {
			wall = fmt.Sprintf("%.2f", rw.Wall)
		}
		ratio, speed := "—", "—"
		if rw.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", rw.Ratio)
		}
		if rw.Wall > 0 {
			speed = fmt.Sprintf("%.0f", float64(rw.Stored)/(1<<20)/rw.Wall)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f | %s | %.1f / %.1f | %.2f |\n",
			rw.Mode.Label, wall, ratio, speed, float64(rw.PeakRSS)/(1<<20), formatBytes(rw.Stored), rw.CPU, rw.MinCPU, rw.OtherCores)
	}
	return b.String()
}

// renderTable writes one size's table of backup modes.
func renderTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| mode | wall s | vs (a) | vs drain | peak RSS MiB | stored | stored / raw | etcd stream open s | CPU s: backup / etcd / MinIO | others (cores) |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	var drain float64
	for _, rw := range rows {
		if rw.Mode.Name == drainMode {
			drain = rw.Wall
		}
	}
	for _, rw := range rows {
		wall, ratio, vsDrain, stored, sr, open := "—", "—", "—", "—", "—", "—"
		if rw.Wall > 0 && drain > 0 {
			vsDrain = fmt.Sprintf("%.2f", rw.Wall/drain)
		}
		if rw.Wall > 0 {
			wall = fmt.Sprintf("%.2f (%.2f–%.2f)", rw.Wall, rw.WallMin, rw.WallMax)
			if rw.Runs == 1 {
				wall = fmt.Sprintf("%.2f", rw.Wall)
			}
		}
		if rw.SnapshotOpen > 0 { // modes that open no snapshot stream, or cannot tell
			open = fmt.Sprintf("%.2f", rw.SnapshotOpen)
		}
		if rw.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", rw.Ratio)
		}
		if rw.Stored > 0 {
			stored = formatBytes(rw.Stored)
			if rw.Raw > 0 {
				sr = fmt.Sprintf("%.3f", float64(rw.Stored)/float64(rw.Raw))
			}
		}
		rss := fmt.Sprintf("%.0f", float64(rw.PeakRSS)/(1<<20))
		if rw.PeakRSSMax > rw.PeakRSS+(1<<20) {
			rss += fmt.Sprintf(" (max %.0f)", float64(rw.PeakRSSMax)/(1<<20))
		}
		if rw.SampledPeak {
			rss += " (sampled)"
		}
		others := "—" // meaningless over a run of milliseconds
		if rw.Wall > 0 {
			others = fmt.Sprintf("%.2f", rw.OtherCores)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %.1f / %.1f / %.1f | %s |\n",
			rw.Mode.Label, wall, ratio, vsDrain, rss, stored, sr, open, rw.CPU, rw.EtcdCPU, rw.MinCPU, others)
	}
	return b.String()
}

// targetSizes returns the labels of the sizes the flatness target
// compares: the small one (256 MiB, else the smallest) and the large one
// (1 GiB, else the largest).
func targetSizes(r *results) (small, large string) {
	if len(r.Sizes) == 0 {
		return "", ""
	}
	small, large = r.Sizes[0].Label, r.Sizes[len(r.Sizes)-1].Label
	for _, s := range r.Sizes {
		switch s.Target {
		case 256 << 20:
			small = s.Label
		case 1 << 30:
			large = s.Label
		}
	}
	return small, large
}

// byMode returns the rows of size by mode name.
func (r *results) byMode(size string) map[string]row {
	m := map[string]row{}
	for _, rw := range r.summarize(size) {
		m[rw.Mode.Name] = rw
	}
	return m
}

// modesWhere returns r's modes that keep says to, in report order.
func (r *results) modesWhere(keep func(modeInfo) bool) []modeInfo {
	var out []modeInfo
	for _, m := range r.Modes {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// renderTargets checks the targets on the measured figures of every size.
func renderTargets(r *results) string {
	small, large := targetSizes(r)
	if large == "" {
		return "No figures.\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Judged on every etcd size. A wall-time ratio divides a run by the run of its group's baseline (two-step for backups, (f) for restores) next to it in the same round; a round is quiet when other processes used less than %.2f cores during both runs. A wall-time verdict rests on the quiet rounds: it needs %d of them, and is met only when both the median of the paired ratios and the ratio of the medians are within the bound, missed when both are above it, unclear otherwise. Ratios between two modes that do not run next to each other (against the raw drain, the export against (c)) show the ratio of medians and get no verdict.\n\n", quietCores, minQuietRounds)
	names := r.modesWhere(func(m modeInfo) bool { return m.Group == groupBackup && !m.Reference && m.Name != "two-step" })
	for _, sz := range r.Sizes {
		lg := r.byMode(sz.Label)
		fmt.Fprintf(&b, "### etcd of %s\n\n| target | mode | figure | verdict |\n|---|---|---|---|\n", sz.Label)
		for _, m := range names {
			if rw, ok := lg[m.Name]; ok && len(rw.Pairs) > 0 {
				b.WriteString(wallRow(fmt.Sprintf("wall time <= %.1f x two-step", streamRatioTarget), m, rw, streamRatioTarget))
			}
		}
		for _, m := range names {
			if rw, ok := lg[m.Name]; ok {
				b.WriteString(rssRow("peak RSS <= 128 MiB", m, rw))
			}
		}
		b.WriteString(drainTargets(lg, names))
		b.WriteString(flatRows(r, sz, small, large, names))
		for _, m := range names {
			if rw, ok := lg[m.Name]; ok && rw.Raw > 0 && strings.Contains(m.Name, "zstd") {
				f := float64(rw.Stored) / float64(rw.Raw)
				fmt.Fprintf(&b, "| zstd stores <= %.1f x raw | %s | %.3f | %s |\n", zstdRatioTarget, m.Short, f, verdict(f <= zstdRatioTarget))
			}
		}
		b.WriteString(cliTargets(lg))
		b.WriteString(cpuTarget(lg, sz.Raw))
		b.WriteString(remoteTargets(lg))
		b.WriteString(restoreTargets(r, lg))
		b.WriteString("\n")
	}
	return b.String()
}

// flatRows judges the peak RSS of the large size against the small one,
// and shows that of every larger size against the large one.
func flatRows(r *results, sz sizeInfo, small, large string, names []modeInfo) string {
	var b strings.Builder
	against, target := small, true
	switch {
	case sz.Label == large && small != large:
	case sz.Target > 1<<30 && sz.Label != large:
		against, target = large, false
	default:
		return ""
	}
	lg, sm := r.byMode(sz.Label), r.byMode(against)
	for _, m := range names {
		l, ok1 := lg[m.Name]
		s, ok2 := sm[m.Name]
		if !ok1 || !ok2 || s.PeakRSS == 0 {
			continue
		}
		f := float64(l.PeakRSS) / float64(s.PeakRSS)
		if target {
			fmt.Fprintf(&b, "| peak RSS flat: %s / %s <= %.2f | %s | %.3f | %s |\n", sz.Label, against, rssFlatTarget, m.Short, f, verdict(f <= rssFlatTarget))
		} else {
			fmt.Fprintf(&b, "| (not a target) peak RSS %s / %s | %s | %.3f | — |\n", sz.Label, against, m.Short, f)
		}
	}
	return b.String()
}

// restoreTargets judges the restore modes of one size: the modes that
// read the baseline's object against it, the others shown.
func restoreTargets(r *results, lg map[string]row) string {
	var b strings.Builder
	var baseSource string
	for _, m := range r.Modes {
		if m.Group == groupRestore && !m.Reference {
			baseSource = m.Source
			break
		}
	}
	restores := r.modesWhere(func(m modeInfo) bool {
		return m.Group == groupRestore && !m.Reference && m.Name != "download-restore"
	})
	for _, m := range restores {
		rw, ok := lg[m.Name]
		if !ok || len(rw.Pairs) == 0 {
			continue
		}
		if m.Source != baseSource {
			fmt.Fprintf(&b, "| (not a target: another object) restore wall time / download-then-restore | %s | %s | — |\n", m.Short, rw.Judged)
			continue
		}
		b.WriteString(wallRow(fmt.Sprintf("restore wall time <= %.1f x download-then-restore", restoreTarget), m, rw, restoreTarget))
	}
	for _, m := range restores {
		if rw, ok := lg[m.Name]; ok {
			anon := row{PeakRSS: rw.PeakAnon, PeakRSSMax: rw.PeakAnonMax}
			b.WriteString(rssRow("restore peak RSS <= 128 MiB (anonymous; VmHWM in the table)", m, anon))
		}
	}
	return b.String()
}

// drainTargets shows the backup modes against the raw drain of the
// snapshot stream (medians of the same size), which does not run next to
// them: no verdict.
func drainTargets(lg map[string]row, names []modeInfo) string {
	var b strings.Builder
	drain, ok := lg[drainMode]
	if !ok || drain.Wall == 0 {
		return ""
	}
	for _, m := range names {
		rw, ok := lg[m.Name]
		if !ok || rw.Wall == 0 {
			continue
		}
		target := zstdDrainTarget
		if m.Name == "stream" {
			target = plainDrainTarget
		} else if !strings.Contains(m.Name, "zstd") {
			continue
		}
		fmt.Fprintf(&b, "| wall time <= %.2f x the raw drain | %s | ratio of medians %.2f | — (not run next to each other) |\n", target, m.Short, rw.Wall/drain.Wall)
	}
	return b.String()
}

// cliTargets judges the CLI as shipped: its backup's peak at the default
// --memory, its export's and its import's peaks; the export's wall time
// against (c) gets no verdict, as the two do not run next to each other.
func cliTargets(lg map[string]row) string {
	var b strings.Builder
	if rw, ok := lg[memoryMode]; ok {
		b.WriteString(peakRow(fmt.Sprintf("peak RSS <= %d MiB at the default --memory", memoryRSSTarget>>20), rw, memoryRSSTarget))
	}
	for _, name := range []string{"cli-export", "cli-import"} {
		if rw, ok := lg[name]; ok {
			b.WriteString(peakRow(fmt.Sprintf("peak RSS <= %d MiB", logicalRSSTarget>>20), rw, logicalRSSTarget))
		}
	}
	if ex, ok := lg["cli-export"]; ok {
		if c, ok := lg[exportAgainstMode]; ok && c.Wall > 0 {
			fmt.Fprintf(&b, "| wall time <= %.1f x %s | %s | ratio of medians %.2f | — (not run next to each other) |\n", exportWallTarget, c.Mode.Short, ex.Mode.Short, ex.Wall/c.Wall)
		}
	}
	return b.String()
}

// cpuTarget judges the process CPU per GiB of the CLI's backup at its
// defaults: at most twice that of `etcdctl snapshot save` plus the zstd
// level's own cost (the save then zstd reference, less the save alone);
// medians of the runs, raw the snapshot's size.
func cpuTarget(lg map[string]row, raw int64) string {
	cli, ok1 := lg[memoryMode]
	save, ok2 := lg["save"]
	zs, ok3 := lg["save-zstd"]
	if !ok1 || !ok2 || !ok3 || raw <= 0 || cli.Runs == 0 || save.Runs == 0 || zs.Runs == 0 {
		return ""
	}
	gib := float64(raw) / (1 << 30)
	own := max(zs.CPU-save.CPU, 0) / gib
	bound := cpuSaveFactor*save.CPU/gib + own
	got := cli.CPU / gib
	return fmt.Sprintf("| process CPU per GiB <= %.0f x `etcdctl snapshot save`'s + the zstd level's own | %s | %.2f s/GiB; bound %.2f: save %.2f s/GiB, zstd's own %.2f | %s |\n",
		cpuSaveFactor, cli.Mode.Short, got, bound, save.CPU/gib, own, verdict(got <= bound))
}

// remoteTargets judges the CLI's backup at its defaults through the
// distant store at remoteJudgedRTT against two-step through the same
// store, and its peak RSS; through the other stores its wall-time ratio
// is shown without a verdict. The restore of the baseline's object is
// judged through every store.
func remoteTargets(lg map[string]row) string {
	var b strings.Builder
	for _, st := range remoteStores {
		rw, ok := lg["cli-save-"+st.name]
		if !ok {
			continue
		}
		judged := st.rtt == remoteJudgedRTT
		switch {
		case len(rw.Pairs) == 0:
		case judged:
			b.WriteString(wallRow(fmt.Sprintf("wall time <= %.1f x two-step through %s", remoteRatioTarget, st.describe()), rw.Mode, rw, remoteRatioTarget))
		default:
			fmt.Fprintf(&b, "| (not a target) wall time / two-step through %s | %s | %s | — |\n", st.describe(), rw.Mode.Short, rw.Judged)
		}
		if judged {
			b.WriteString(peakRow(fmt.Sprintf("peak RSS <= %d MiB through %s", remoteRSSTarget>>20, st.describe()), rw, remoteRSSTarget))
		}
	}
	// The restore of (f)'s object through each store is held to the
	// loopback's bound: the two read the same object through the same
	// store.
	for _, st := range remoteStores {
		if rw, ok := lg["restore-"+st.name]; ok && len(rw.Pairs) > 0 {
			b.WriteString(wallRow(fmt.Sprintf("restore wall time <= %.1f x download-then-restore through %s", restoreTarget, st.describe()), rw.Mode, rw, restoreTarget))
		}
		if rw, ok := lg["restore-zstd-"+st.name]; ok && len(rw.Pairs) > 0 {
			fmt.Fprintf(&b, "| (not a target: another object) restore wall time / download-then-restore through %s | %s | %s | — |\n", st.describe(), rw.Mode.Short, rw.Judged)
		}
	}
	return b.String()
}

// wallRow judges a mode's wall time against its baseline's over the
// quiet rounds (wallFigure.verdictAtMost).
func wallRow(target string, m modeInfo, rw row, bound float64) string {
	return fmt.Sprintf("| %s | %s | %s; every round: median %.2f, %.2f–%.2f | %s |\n",
		target, m.Short, rw.Judged, rw.Paired, rw.PairedMin, rw.PairedMax, rw.Judged.verdictAtMost(bound))
}

// rssRow judges a mode's median peak against the 128 MiB bound.
func rssRow(target string, m modeInfo, rw row) string {
	rw.Mode = m
	return peakRow(target, rw, rssTarget)
}

// peakRow judges a median peak against bound: met only by every run.
func peakRow(target string, rw row, bound int64) string {
	peak, peakMax := rw.PeakRSS, rw.PeakRSSMax
	v := verdict(peak <= bound)
	if peak <= bound && peakMax > bound {
		v = "met by the median, not by every run"
	}
	sampled := ""
	if rw.SampledPeak {
		// A lower bound: the process' last moments are not seen.
		sampled = ", sampled"
		if peak <= bound {
			v += " (by a sampled peak)"
		}
	}
	return fmt.Sprintf("| %s | %s | %.0f MiB (max %.0f%s) | %s |\n", target, rw.Mode.Short, float64(peak)/(1<<20), float64(peakMax)/(1<<20), sampled, v)
}

// sizeOthers returns the median CPU other processes used during the runs
// on one etcd size.
func sizeOthers(r *results, size string) float64 {
	var o []float64
	for _, s := range r.Samples {
		if s.Size == size && s.Wall > 0 {
			o = append(o, s.OtherCores)
		}
	}
	return median(o)
}

// runCounts says how often each mode ran on each etcd size.
func runCounts(r *results) string {
	var parts []string
	for _, s := range r.Sizes {
		times := fmt.Sprintf("in %d rounds", s.Runs)
		if s.Runs == 1 {
			times = "in one round"
		}
		if other := otherGroupRounds(r, s); other != "" {
			times += " (groups " + other + ")"
		} else if s.RestoreRuns > 0 && s.RestoreRuns != s.Runs && hasGroup(r, groupRestore) && len(r.Groups) == 0 {
			times += fmt.Sprintf(" (restore modes in %d)", s.RestoreRuns)
		}
		parts = append(parts, fmt.Sprintf("%s on the %s etcd", times, s.Label))
	}
	out := strings.Join(parts, ", ")
	if r.RefRuns > 0 {
		out += fmt.Sprintf(" (reference modes, marked (ref), in at most %d rounds; the rounds of every group are under Machine)", r.RefRuns)
	}
	return out
}

// otherGroupRounds lists the groups r records on size s that ran in
// another number of rounds than s.Runs (rounds are added only to the
// judged groups), "" when none did.
func otherGroupRounds(r *results, s sizeInfo) string {
	var parts []string
	for _, g := range r.Groups {
		if g.Size == s.Label && g.Group != groupBackup && g.Rounds != s.Runs {
			parts = append(parts, fmt.Sprintf("%s in %d", g.Group, g.Rounds))
		}
	}
	return strings.Join(parts, ", ")
}

// hasGroup reports whether r measured a mode of group.
func hasGroup(r *results, group string) bool {
	for _, m := range r.Modes {
		if m.Group == group {
			return true
		}
	}
	return false
}

// loadRange returns the lowest and highest load average seen at the start
// of a run, and the median of other processes' CPU use during runs.
func loadRange(r *results) (lo, hi, others float64) {
	var o []float64
	for i, s := range r.Samples {
		if i == 0 || s.Load1 < lo {
			lo = s.Load1
		}
		hi = max(hi, s.Load1)
		if s.Wall > 0 {
			o = append(o, s.OtherCores)
		}
	}
	return lo, hi, median(o)
}
