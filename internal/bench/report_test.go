//go:build !benchlean

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tc.in...)
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Errorf("median reordered its input: %v", tc.in)
			}
		}
	}
}

func TestParseAndFormatSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		text string
	}{
		{"256MiB", 256 << 20, "256 MiB"},
		{"1GiB", 1 << 30, "1 GiB"},
		{"1.5GiB", 3 << 29, "1.5 GiB"},
		{"4096", 4096, "4 KiB"},
	} {
		got, err := parseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if s := formatBytes(got); s != tc.text {
			t.Errorf("formatBytes(%d) = %q, want %q", got, s, tc.text)
		}
	}
	for _, bad := range []string{"", "0MiB", "-1GiB", "lots"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) succeeded", bad)
		}
	}
}

// testResults has three modes on two sizes: a baseline, a mode to compare
// and a reference mode that must not become the baseline.
func testResults() *results {
	r := &results{
		Modes: []modeInfo{
			{Name: "snapshot-read", Short: "read", Label: "read only", Group: "backup", Reference: true},
			{Name: "two-step", Short: "(a)", Label: "(a) two-step", Group: "backup"},
			{Name: "stream-zstd", Short: "(c)", Label: "(c) zstd", Group: "backup"},
		},
		Sizes: []sizeInfo{
			{Label: "256 MiB", Target: 256 << 20, Raw: 1000, Runs: 3},
			{Label: "1 GiB", Target: 1 << 30, Raw: 4000, Runs: 3},
			{Label: "2 GiB", Target: 2 << 30, Raw: 8000, Runs: 1},
		},
	}
	// Each round runs two-step, then (c) next to it, then the reference.
	seq := map[string]int{"two-step": 1, "stream-zstd": 2, "snapshot-read": 3}
	add := func(size, mode string, walls []float64, rss, stored int64) {
		for i, w := range walls {
			r.Samples = append(r.Samples, sample{Size: size, Mode: mode, Run: i + 1, Seq: seq[mode], Wall: w, PeakRSS: rss, Raw: 4000, Stored: stored})
		}
	}
	defer func() {
		// Round 2 of the large etcd is noisy, and one run of (c) there
		// peaks higher than the others.
		for i, s := range r.Samples {
			if s.Size == "1 GiB" && s.Run == 2 {
				r.Samples[i].OtherCores = 1
				if s.Mode == "stream-zstd" {
					r.Samples[i].PeakRSS = 140 << 20
				}
			}
		}
	}()
	add("256 MiB", "snapshot-read", []float64{1, 1, 1}, 30<<20, 0)
	add("256 MiB", "two-step", []float64{4, 5, 6}, 40<<20, 4000)
	add("256 MiB", "stream-zstd", []float64{3, 2, 4}, 100<<20, 1000)
	add("1 GiB", "snapshot-read", []float64{4, 4, 4}, 30<<20, 0)
	add("1 GiB", "two-step", []float64{20, 22, 21}, 40<<20, 4000)
	add("1 GiB", "stream-zstd", []float64{18, 19, 20}, 130<<20, 2000)
	add("2 GiB", "two-step", []float64{40}, 40<<20, 8000)
	add("2 GiB", "stream-zstd", []float64{38}, 143<<20, 4000)
	return r
}

func TestSummarize(t *testing.T) {
	rows := testResults().summarize("256 MiB")
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3", len(rows))
	}
	ref, base, zstd := rows[0], rows[1], rows[2]
	if base.Wall != 5 || base.WallMin != 4 || base.WallMax != 6 || base.Ratio != 1 {
		t.Errorf("baseline row = %+v", base)
	}
	if zstd.Wall != 3 || zstd.Ratio != 0.6 {
		t.Errorf("compared row: wall %v ratio %v, want 3 and 0.6", zstd.Wall, zstd.Ratio)
	}
	// Rounds: 3/4, 2/5, 4/6.
	if zstd.Paired != 0.6666666666666666 || zstd.PairedMin != 0.4 || zstd.PairedMax != 0.75 {
		t.Errorf("paired ratios: median %v, min %v, max %v; want 2/3, 0.4, 0.75", zstd.Paired, zstd.PairedMin, zstd.PairedMax)
	}
	// A reference listed before the baseline gets no ratio.
	if ref.Ratio != 0 {
		t.Errorf("reference row before the baseline has ratio %v", ref.Ratio)
	}
	if rows := testResults().summarize("no such size"); len(rows) != 0 {
		t.Errorf("rows for a size without samples: %v", rows)
	}
}

func TestRenderTable(t *testing.T) {
	got := renderTable(testResults().summarize("256 MiB"))
	want := []string{
		"| (a) two-step | 5.00 (4.00–6.00) | 1.00 | 5.00 | 40 | 3.9 KiB | 1.000 |",
		"| (c) zstd | 3.00 (2.00–4.00) | 0.60 | 3.00 | 100 | 1000 B | 0.250 |",
		"| read only | 1.00 (1.00–1.00) | — | 1.00 | 30 | — | — |",
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("table lacks %q:\n%s", w, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 5 {
		t.Errorf("table has %d lines, want a header, a rule and 3 rows:\n%s", n, got)
	}
}

func TestRenderTargets(t *testing.T) {
	r := testResults()
	got := renderTargets(r)
	for _, w := range []string{
		"### etcd of 256 MiB",
		"| wall time <= 0.8 x two-step | (c) | paired median **0.67** (0.40–0.75), ratio of medians **0.60**; 3 quiet rounds of 3; every round: median 0.67, 0.40–0.75 | unclear: 3 quiet rounds of 5 needed |",
		"| wall time <= 0.8 x two-step | (c) | paired median **0.93** (0.90–0.95), ratio of medians **0.93**; 2 quiet rounds of 3; every round: median 0.90, 0.86–0.95 | unclear: 2 quiet rounds of 5 needed |",
		// Every size is judged, 2 GiB too.
		"| wall time <= 0.8 x two-step | (c) | paired median **0.95** (0.95–0.95), ratio of medians **0.95**; 1 quiet rounds of 1; every round: median 0.95, 0.95–0.95 | unclear: 1 quiet rounds of 5 needed |",
		"| peak RSS <= 128 MiB | (c) | 130 MiB (max 140) | **missed** |",
		"| peak RSS <= 128 MiB | (c) | 143 MiB (max 143) | **missed** |",
		"| peak RSS flat: 1 GiB / 256 MiB <= 1.15 | (c) | 1.300 | **missed** |",
		"| zstd stores <= 0.4 x raw | (c) | 0.500 | **missed** |",
		"| wall time <= 1.10 x the raw drain | (c) | ratio of medians 4.75 | — (not run next to each other) |",
		"| (not a target) peak RSS 2 GiB / 1 GiB | (c) | 1.100 | — |",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("targets lack %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "| (a) |") || strings.Contains(got, "| read |") {
		t.Errorf("targets judge the baseline or a reference mode:\n%s", got)
	}

	// Five quiet rounds on 256 MiB: (c) 3/4, 2/5, 4/6, 3/5, 2/5 paired,
	// median 0.6 and 3/5 = 0.6 of medians: met. A median under the RSS
	// bound with one run above it is flagged.
	for i, m := range []string{"two-step", "stream-zstd"} {
		for run, w := range [][]float64{{5, 5}, {3, 2}}[i] {
			r.Samples = append(r.Samples, sample{Size: "256 MiB", Mode: m, Run: 4 + run, Seq: i + 1, Wall: w, PeakRSS: 100 << 20})
		}
	}
	for i, s := range r.Samples {
		if s.Size == "1 GiB" && s.Mode == "stream-zstd" && s.Run != 2 {
			r.Samples[i].PeakRSS = 120 << 20
		}
	}
	got = renderTargets(r)
	for _, w := range []string{
		"| wall time <= 0.8 x two-step | (c) | paired median **0.60** (0.40–0.75), ratio of medians **0.60**; 5 quiet rounds of 5; every round: median 0.60, 0.40–0.75 | met |",
		"| peak RSS <= 128 MiB | (c) | 120 MiB (max 140) | met by the median, not by every run |",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("targets lack %q:\n%s", w, got)
		}
	}
}

func TestRenderReport(t *testing.T) {
	got, err := renderReport(testResults(), "BENCHMARKS.png")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"# Benchmarks", "Each mode ran in 3 rounds on the 256 MiB etcd, in 3 rounds on the 1 GiB etcd,", "![wall time and peak RSS against etcd size](BENCHMARKS.png)", "## etcd of 256 MiB", "## etcd of 1 GiB", "## Targets", "## Notes"} {
		if !strings.Contains(got, w) {
			t.Errorf("report lacks %q", w)
		}
	}
}

func TestParseProc(t *testing.T) {
	stat := []byte("4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 12 0 100 1000 200 18446744073709551615")
	got, err := parseProcStatCPU(stat)
	if err != nil || got != 3.8 {
		t.Errorf("parseProcStatCPU = %v, %v; want 3.8", got, err)
	}
	busy, err := parseBusy([]byte("cpu  100 5 50 1000 20 3 2 10 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n"))
	if err != nil || busy != 1.7 {
		t.Errorf("parseBusy = %v, %v; want 1.7", busy, err)
	}
	if n := countCPUs([]byte("cpu  1 2 3\ncpu0 1 1\ncpu1 1 1\nintr 5\ncpufreq 3\n")); n != 2 {
		t.Errorf("countCPUs = %d, want 2", n)
	}
	if w, err := parseIOWait([]byte("cpu  100 5 50 1000 20 3 2 10 0 0\n")); err != nil || w != 0.2 {
		t.Errorf("parseIOWait = %v, %v; want 0.2", w, err)
	}
	if _, err := parseBusy([]byte("intr 1 2 3\n")); err == nil {
		t.Error("parseBusy accepted a file without a cpu line")
	}
}

func TestGenDeterministicAndKubernetesLike(t *testing.T) {
	a, b := newGen(7), newGen(7)
	kinds := map[string]int{}
	for range 2000 {
		ka, va := a.next()
		kb, vb := b.next()
		if ka != kb || !bytes.Equal(va, vb) {
			t.Fatalf("same seed, different objects: %s and %s", ka, kb)
		}
		if !strings.HasPrefix(ka, "/registry/") {
			t.Fatalf("key %q is not under /registry/", ka)
		}
		if !bytes.HasPrefix(va, []byte("k8s\x00")) {
			t.Fatalf("value of %s lacks the protobuf envelope", ka)
		}
		kinds[strings.Split(ka, "/")[2]]++
	}
	for _, kw := range kindWeights {
		name := kw.kind
		if name == "customresourcedefinitions" {
			name = "apiextensions.k8s.io"
		}
		if kinds[name] == 0 {
			t.Errorf("no %s among 2000 objects: %v", kw.kind, kinds)
		}
	}
}

func TestRoundTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 31, "0 5 10 15 20 25 30"},
		{0, 185, "0 20 40 60 80 100 120 140 160 180"},
		{0, 1.7, "0 0.2 0.4 0.6 0.8 1 1.2 1.4 1.6"},
	} {
		var labels []string
		for _, tk := range (roundTicks{}).Ticks(tc.lo, tc.hi) {
			labels = append(labels, tk.Label)
		}
		if got := strings.Join(labels, " "); got != tc.want {
			t.Errorf("ticks(%v, %v) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}

// TestRestoreRows checks that restore modes get a table of their own,
// compared with their group's baseline, and targets on the anonymous peak.
func TestRestoreRows(t *testing.T) {
	r := testResults()
	r.Modes = append(r.Modes,
		modeInfo{Name: "download-restore", Short: "(f)", Label: "(f) download, etcdutl", Group: groupRestore, Source: "stream"},
		modeInfo{Name: "restore", Short: "(g)", Label: "(g) restore", Group: groupRestore, Source: "stream"},
		modeInfo{Name: "restore-zstd", Short: "(h)", Label: "(h) restore zstd", Group: groupRestore, Source: "stream-zstd"},
		modeInfo{Name: "download", Short: "dl", Label: "download only", Group: groupRestore, Reference: true, Source: "stream"},
	)
	for i, w := range []float64{10, 12, 11} {
		r.Samples = append(r.Samples,
			sample{Size: "1 GiB", Mode: "download-restore", Run: i + 1, Seq: 2, Wall: w, PeakRSS: 1100 << 20, PeakAnon: 40 << 20, Raw: 4000, Stored: 4000},
			sample{Size: "1 GiB", Mode: "restore", Run: i + 1, Seq: 1, Wall: w * 0.8, PeakRSS: 1090 << 20, PeakAnon: int64(60+10*i) << 20, Raw: 4000, Stored: 4000},
			sample{Size: "1 GiB", Mode: "restore-zstd", Run: i + 1, Seq: 3, Wall: w * 1.5, PeakRSS: 1090 << 20, PeakAnon: 50 << 20, Raw: 4000, Stored: 1000},
			sample{Size: "1 GiB", Mode: "download", Run: i + 1, Seq: 4, Wall: 3, PeakRSS: 30 << 20, PeakAnon: 20 << 20, Raw: 4000, Stored: 4000},
		)
	}
	rows := r.summarize("1 GiB")
	backups, restores := inGroup(rows, groupBackup), inGroup(rows, groupRestore)
	if len(backups) != 3 || len(restores) != 4 {
		t.Fatalf("got %d backup and %d restore rows, want 3 and 4", len(backups), len(restores))
	}
	if restores[1].Ratio != 0.8 || restores[1].PeakAnon != 70<<20 || restores[1].PeakAnonMax != 80<<20 {
		t.Errorf("restore row: ratio %v, anon %d, max %d; want 0.8 against (f), 70 MiB, 80 MiB", restores[1].Ratio, restores[1].PeakAnon>>20, restores[1].PeakAnonMax>>20)
	}
	table := renderRestoreTable(restores)
	for _, w := range []string{
		"| (g) restore | 8.80 (8.00–9.60) | 0.80 | 70 (max 80) | 1090 |",
		"| download only | 3.00 (3.00–3.00) | 0.27 | 20 | 30 |",
	} {
		if !strings.Contains(table, w) {
			t.Errorf("restore table lacks %q:\n%s", w, table)
		}
	}
	got := renderTargets(r)
	for _, w := range []string{
		"| restore wall time <= 1.0 x download-then-restore | (g) | paired median **0.80** (0.80–0.80), ratio of medians **0.80**; 3 quiet rounds of 3",
		"| restore peak RSS <= 128 MiB (anonymous; VmHWM in the table) | (g) | 70 MiB (max 80) | met |",
		"| (not a target: another object) restore wall time / download-then-restore | (h) | paired median **1.50** (1.50–1.50), ratio of medians **1.50**; 3 quiet rounds of 3 | — |",
		"| restore peak RSS <= 128 MiB (anonymous; VmHWM in the table) | (h) | 50 MiB (max 50) | met |",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("targets lack %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "| (f) |") || strings.Contains(got, "| dl |") {
		t.Errorf("targets judge the restore baseline or a reference:\n%s", got)
	}
	r.Sizes[1].RestoreRuns = 6
	report, err := renderReport(r, "c.png")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Restore of a backup of this etcd", "in 3 rounds (restore modes in 6) on the 1 GiB etcd"} {
		if !strings.Contains(report, w) {
			t.Errorf("report lacks %q", w)
		}
	}
}

// TestCommandLines checks the command lines the report quotes: make
// bench's own -cli is not a flag of the user's, and the continuous-backup
// steps name their make variable.
func TestCommandLines(t *testing.T) {
	got := strings.Join(benchFlags([]string{"-cli", "/tmp/x/etcdbackup", "-runs", "5", "-cli=/y", "-sizes", "1GiB"}), " ")
	if got != "-runs 5 -sizes 1GiB" {
		t.Errorf("benchFlags = %q", got)
	}
	if got := pitrCommand("pitr", nil); got != "make bench" {
		t.Errorf("pitrCommand without flags = %q", got)
	}
	if got := pitrCommand("pitr-restore", []string{"-writes", "100"}); got != "make bench PITR_RESTORE_FLAGS='-writes 100'" {
		t.Errorf("pitrCommand = %q", got)
	}
	env := modeEnv{S3: "127.0.0.1:9000", Bucket: "bench", Access: "AKIA", Secret: "s3cr3t"}
	if got := cliDestination(env); strings.Contains(got, "AKIA") || strings.Contains(got, "s3cr3t") || !strings.HasPrefix(got, "s3://bench?") {
		t.Errorf("cliDestination = %q: want the bucket's URL without credentials", got)
	}
}

// TestRemoteStoreTables: the modes of a remote store form a group of their
// own, compared with the two-step through the same store, and the report
// gives them a table of their own naming the store.
func TestRemoteStoreTables(t *testing.T) {
	r := testResults()
	r.Modes = append(r.Modes,
		modeInfo{Name: "two-step-tls-100ms", Label: "(a) two-step remote", Group: "backup-tls-100ms"},
		modeInfo{Name: "cli-save-tls-100ms", Label: "CLI save remote", Group: "backup-tls-100ms"})
	for i, w := range []float64{10, 8} {
		mode := []string{"two-step-tls-100ms", "cli-save-tls-100ms"}[i]
		r.Samples = append(r.Samples, sample{Size: "256 MiB", Mode: mode, Run: 1, Seq: 4 + i, Wall: w, Raw: 4000, Stored: 1000})
	}
	rows := r.summarize("256 MiB")
	var remote row
	for _, rw := range rows {
		if rw.Mode.Name == "cli-save-tls-100ms" {
			remote = rw
		}
	}
	if remote.Ratio != 0.8 {
		t.Errorf("remote CLI save's ratio = %v, want 0.8 (against the remote two-step, not the loopback one)", remote.Ratio)
	}
	got := renderRemoteTables(r, rows)
	if !strings.Contains(got, "Backup to MinIO over TLS at 100ms RTT, against two-step to the same store") || !strings.Contains(got, "| CLI save remote | 8.00 | 0.80 |") {
		t.Errorf("remote tables:\n%s", got)
	}
	if strings.Contains(got, "(c) zstd") {
		t.Errorf("the loopback modes are in a remote table:\n%s", got)
	}
	if !isBackupGroup("backup-tls") || !isRestoreGroup("restore-tls-50ms") || isBackupGroup("backups") || isRestoreGroup("backup") {
		t.Error("group kinds")
	}
}

// TestCPUTarget judges the CLI's CPU per GiB against twice the save's plus
// zstd's own (the save then zstd, less the save).
func TestCPUTarget(t *testing.T) {
	lg := map[string]row{
		"cli-save":  {Mode: modeInfo{Short: "CLI save"}, CPU: 9, Runs: 3},
		"save":      {CPU: 3, Runs: 3},
		"save-zstd": {CPU: 5, Runs: 3},
	}
	got := cpuTarget(lg, 1<<30)
	if want := "| 9.00 s/GiB; bound 8.00: save 3.00 s/GiB, zstd's own 2.00 | **missed** |"; !strings.Contains(got, want) {
		t.Errorf("got %q, want %q in it", got, want)
	}
	lg["cli-save"] = row{Mode: modeInfo{Short: "CLI save"}, CPU: 7.9, Runs: 3}
	if got := cpuTarget(lg, 1<<30); !strings.Contains(got, "| met |") {
		t.Errorf("7.9 s against 8: %q", got)
	}
	delete(lg, "save")
	if got := cpuTarget(lg, 1<<30); got != "" {
		t.Errorf("without the save reference: %q", got)
	}
}

// TestPeakRowSampled: a peak that some run sampled (a CLI smaller than the
// binary that started it) is marked as such, and so is a verdict it meets.
func TestPeakRowSampled(t *testing.T) {
	rw := row{Mode: modeInfo{Short: "CLI import"}, PeakRSS: 50 << 20, PeakRSSMax: 51 << 20}
	if got := peakRow("peak RSS <= 64 MiB", rw, 64<<20); got != "| peak RSS <= 64 MiB | CLI import | 50 MiB (max 51) | met |\n" {
		t.Errorf("measured peak: %q", got)
	}
	rw.SampledPeak = true
	if got := peakRow("peak RSS <= 64 MiB", rw, 64<<20); got != "| peak RSS <= 64 MiB | CLI import | 50 MiB (max 51, sampled) | met (by a sampled peak) |\n" {
		t.Errorf("sampled peak: %q", got)
	}
}
