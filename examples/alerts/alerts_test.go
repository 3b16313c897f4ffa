package alerts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
)

const rulesFile = "etcdbackup.rules.yaml"

// ruleFile is the shape of a Prometheus rules file. Decoding is strict, so
// a misspelt key (anotations, exp) fails the test.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var f ruleFile
	require.NoError(t, dec.Decode(&f))
	var rules []rule
	for _, g := range f.Groups {
		require.NotEmpty(t, g.Name)
		require.NotEmpty(t, g.Rules, "group %s", g.Name)
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestRulesShape checks what promtool would not: every rule is an alert
// with a severity a pager can route on and annotations a person can act
// on.
func TestRulesShape(t *testing.T) {
	rules := loadRules(t)
	require.GreaterOrEqual(t, len(rules), 4)
	seen := map[string]bool{}
	for _, r := range rules {
		require.Regexp(t, `^EtcdBackup[A-Z][A-Za-z]+$`, r.Alert)
		require.False(t, seen[r.Alert], "alert %s twice", r.Alert)
		seen[r.Alert] = true
		require.NotEmpty(t, strings.TrimSpace(r.Expr), r.Alert)
		require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		require.NotEmpty(t, r.Annotations["description"], r.Alert)
		if r.For != "" {
			d, err := time.ParseDuration(r.For)
			require.NoError(t, err, r.Alert)
			require.Positive(t, d, r.Alert)
		}
	}
	// The four things the rules exist for.
	for _, name := range []string{"EtcdBackupTooOld", "EtcdBackupRepeatedFailures", "EtcdBackupDestinationUnavailable", "EtcdBackupRestoreDrillFailing"} {
		require.True(t, seen[name], "no alert %s", name)
	}
}

// TestRulesUseExportedMetrics builds every collector of the library,
// exercises it until each of its series exists, gathers them, and checks
// every metric, label and label value the rules name against what was
// gathered.
func TestRulesUseExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)

	// Each package's documented names are all there: the exercise below is
	// complete, so a miss in a rule is the rule's fault.
	for _, name := range []string{
		backup.MetricLastSuccess, backup.MetricDuration, backup.MetricStoredBytes, backup.MetricRawBytes,
		backup.MetricSuccesses, backup.MetricFailures, backup.MetricInFlight,
		destination.MetricAvailable, destination.MetricConsecutiveFailures, destination.MetricLastCheck,
		destination.MetricInventoryEntries, destination.MetricLastSync, destination.MetricBackups, destination.MetricNewestBackup,
		schedule.MetricJobs, schedule.MetricRunsInFlight, schedule.MetricRunsQueued, schedule.MetricNextRun,
		schedule.MetricLastRun, schedule.MetricLastSuccess, schedule.MetricLastDuration, schedule.MetricRunning,
		schedule.MetricConsecutiveFailures, schedule.MetricRuns, schedule.MetricSkippedRuns, schedule.MetricPruneFailures, schedule.MetricHeartbeat,
		restore.MetricDrillLastSuccess, restore.MetricDrillLastRun, restore.MetricDrillBackupCreated,
		restore.MetricDrillDuration, restore.MetricDrillSuccesses, restore.MetricDrillFailures,
	} {
		require.Contains(t, exported, name, "the collectors were not exercised enough")
	}

	var used []string
	for _, r := range loadRules(t) {
		require.Empty(t, check(r.Expr, exported), "alert %s: %s", r.Alert, r.Expr)
		used = append(used, metricName.FindAllString(r.Expr, -1)...)
		// Annotations are text for people, but a metric they name must
		// exist too.
		for _, text := range r.Annotations {
			for _, name := range metricName.FindAllString(text, -1) {
				_, ok := lookup(name, exported)
				require.True(t, ok, "alert %s: annotation names %s, which the library does not export", r.Alert, name)
			}
		}
	}
	// Written against each part of the library.
	for _, prefix := range []string{"etcdbackup_backup_", "etcdbackup_destination_", "etcdbackup_schedule_", "etcdbackup_restore_drill_"} {
		require.True(t, slices.ContainsFunc(used, func(n string) bool { return strings.HasPrefix(n, prefix) }),
			"no rule uses a metric %s*", prefix)
	}
}

// TestCheckFindsMistakes shows that the check fails on what it is meant
// to catch, so that a passing TestRulesUseExportedMetrics means something.
func TestCheckFindsMistakes(t *testing.T) {
	exported := exportedMetrics(t)
	for _, tc := range []struct {
		expr string
		want string
	}{
		{`time() - etcdbackup_backup_last_sucess_timestamp_seconds > 3600`, "etcdbackup_backup_last_sucess_timestamp_seconds"},
		{`etcdbackup_restore_drill_failures > 0`, "etcdbackup_restore_drill_failures"},
		{`rate(etcdbackup_backup_raw_bytes_bucket[5m])`, "etcdbackup_backup_raw_bytes_bucket"},
		{`etcdbackup_destination_available{cluster="a"} == 0`, `label "cluster"`},
		{`etcdbackup_destination_inventory_entries{kind="broken"} > 0`, `value "broken"`},
		{`sum by (destination) (etcdbackup_schedule_running)`, `label "destination"`},
		{`etcdbackup_schedule_consecutive_failures{job="ns/a"} > 0`, `label "job"`},
		{`max by (job) (etcdbackup_schedule_consecutive_failures)`, `label "job"`},
	} {
		got := check(tc.expr, exported)
		require.NotEmpty(t, got, tc.expr)
		require.Contains(t, strings.Join(got, "\n"), tc.want, tc.expr)
	}
	for _, ok := range []string{
		`histogram_quantile(0.9, sum by (le, cluster) (rate(etcdbackup_backup_duration_seconds_bucket[1h])))`,
		`etcdbackup_backup_duration_seconds_count + etcdbackup_backup_duration_seconds_sum`,
		`etcdbackup_schedule_skipped_runs_total{reason=~"overlap|locked"}`,
		`sum by (instance, cluster) (etcdbackup_schedule_running)`,
	} {
		require.Empty(t, check(ok, exported), ok)
	}
}

// metricName finds the library's metric names in an expression or a text.
var metricName = regexp.MustCompile(`\betcdbackup_[a-z0-9_]+`)

var (
	// selector is a metric name with its label matchers.
	selector = regexp.MustCompile(`\b(etcdbackup_[a-z0-9_]+)\s*\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	// grouping is a clause that names labels.
	grouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
)

// targetLabels are the labels Prometheus adds to every scraped series. The
// scheduler labels its jobs backup_job; a rule that names "job" would mean
// Prometheus's scrape job, not the backup's, so none may.
var targetLabels = []string{"instance"}

// family is what the collectors export under one name.
type family struct {
	typ dto.MetricType
	// values holds, for each label, the values seen.
	values map[string]map[string]bool
}

// check returns the problems of one expression: metric names the library
// does not export (histogram suffixes allowed on histograms only), and
// labels or label values its series do not have.
func check(expr string, exported map[string]family) []string {
	var problems []string
	labels := map[string]bool{}
	for _, l := range targetLabels {
		labels[l] = true
	}
	for _, name := range metricName.FindAllString(expr, -1) {
		f, ok := lookup(name, exported)
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s is not exported by the library", name))
			continue
		}
		for l := range f.values {
			labels[l] = true
		}
		if f.typ == dto.MetricType_HISTOGRAM && strings.HasSuffix(name, "_bucket") {
			labels["le"] = true
		}
	}
	for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
		f, ok := lookup(sel[1], exported)
		if !ok {
			continue // reported above
		}
		for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
			label, op, value := m[1], m[2], m[3]
			vals, ok := f.values[label]
			if !ok || label == "job" {
				problems = append(problems, fmt.Sprintf("metric %s has no label %q", sel[1], label))
				continue
			}
			if op == "=" && !vals[value] {
				problems = append(problems, fmt.Sprintf("metric %s: label %q never has the value %q", sel[1], label, value))
			}
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(g[2], ",") {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			if !labels[l] || l == "job" {
				problems = append(problems, fmt.Sprintf("%s (...) names label %q, which no metric of the expression has", g[1], l))
			}
		}
	}
	return problems
}

// lookup finds the family of a name as a rule writes it: a histogram's
// series are NAME_bucket, NAME_count and NAME_sum.
func lookup(name string, exported map[string]family) (family, bool) {
	if f, ok := exported[name]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := exported[base]; ok && f.typ == dto.MetricType_HISTOGRAM {
				return f, true
			}
		}
	}
	return family{}, false
}

// exportedMetrics registers every collector of the library on one
// registry, drives each until all its series exist, and gathers them.
func exportedMetrics(t *testing.T) map[string]family {
	t.Helper()
	ctx := t.Context()
	reg := prometheus.NewPedanticRegistry()

	// Backups: one committed, one failed on a destination.
	bm := backup.NewMetrics()
	require.NoError(t, reg.Register(bm))
	now := time.Now()
	bm.Observe(backup.Event{Kind: backup.Started, Time: now, ID: "prod-x", Cluster: "prod"})
	bm.Observe(backup.Event{Kind: backup.Uploaded, Time: now, ID: "prod-x", Cluster: "prod", Destination: "main",
		RawBytes: 4096, StoredBytes: 1024, Elapsed: 3 * time.Second})
	bm.Observe(backup.Event{Kind: backup.Failed, Time: now, ID: "prod-x", Cluster: "prod", Destination: "offsite", Err: errors.New("upload")})
	bm.Observe(backup.Event{Kind: backup.Completed, Time: now, ID: "prod-x", Cluster: "prod", RawBytes: 4096})

	// Destinations: checked and synced.
	dr, err := destination.NewRegistry(destination.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { dr.Close() })
	_, err = dr.Add(ctx, destination.Spec{Name: "main", URL: "mem://alerts"})
	require.NoError(t, err)
	_, err = dr.Check(ctx, "main")
	require.NoError(t, err)
	_, err = dr.Sync(ctx, "main")
	require.NoError(t, err)
	// A backup committed through the registry: the inventory's series of
	// its cluster.
	d, err := dr.Get("main")
	require.NoError(t, err)
	stream := backuptest.Stream(8, 1)
	snap := snapshotterFunc(func(context.Context) (*backup.Snapshot, error) {
		return backup.NewSnapshot(io.NopCloser(bytes.NewReader(stream)), backup.SnapshotInfo{RevisionLow: 1}, nil), nil
	})
	_, err = (&backup.Pipeline{Snapshotter: snap}).Run(ctx, backup.Request{Cluster: "prod", Name: "hourly", Scheduled: true, Targets: []backup.Target{d.Target()}})
	require.NoError(t, err)
	require.NoError(t, reg.Register(dr.Collector()))

	// A follower's segment.
	fm := backup.NewFollowerMetrics()
	require.NoError(t, reg.Register(fm))
	for _, kind := range []backup.FollowEventKind{backup.ChainStarted, backup.SegmentCommitted, backup.SegmentFailed, backup.ChainGap,
		backup.TargetBehind, backup.TargetRestarted, backup.SegmentStored, backup.RecoveryStarted} {
		fm.ObserveFollow(backup.FollowEvent{Kind: kind, Time: now, Cluster: "prod", Destination: "main", HeadRevision: 10, Committed: 8,
			Revision: 2, ChainLength: 1, RawBytes: 100, StoredBytes: 50, Events: 3, Revisions: 2, Err: errors.New("x")})
	}
	// A destination that lost revisions of a recovery's tail.
	fm.ObserveFollow(backup.FollowEvent{Kind: backup.TargetLost, Time: now, Cluster: "prod", Chain: "old", Destination: "main", Revision: 2,
		Err: errors.New("x")})

	// The scheduler: one job that succeeds and one that fails, each run
	// once on a one-second schedule.
	runner := schedule.RunnerFuncs{BackupFunc: func(_ context.Context, job schedule.Job, _ time.Time) error {
		if job.Cluster == "broken" {
			return errors.New("snapshot")
		}
		return nil
	}}
	s, err := schedule.New(schedule.Config{Runner: runner})
	require.NoError(t, err)
	for _, c := range []string{"prod", "broken"} {
		require.NoError(t, s.Set(schedule.Job{ID: "ns/" + c, Schedule: "@every 1s", Cluster: c, Name: "frequent", Destinations: []string{"main"}}))
	}
	runCtx, stop := context.WithCancel(ctx)
	started := make(chan error, 1)
	go func() { started <- s.Start(runCtx) }()
	require.Eventually(t, func() bool {
		for _, j := range s.List() {
			if j.LastRun.IsZero() || j.Running || (j.LastSuccess.IsZero() && j.Failures == 0) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, reg.Register(s.Collector()))

	// Retention: a report with a skip of every reason and a misdated
	// backup.
	rm := retention.NewMetrics()
	require.NoError(t, reg.Register(rm))
	report := &retention.Report{Cluster: "prod", Destination: "main", Plan: &retention.Plan{Cluster: "prod",
		Decisions: []retention.Decision{{Action: retention.Keep, Reason: retention.ReasonFuture}}}}
	for _, skip := range []string{retention.SkipLocked, retention.SkipPinned, retention.SkipLockUnreadable, retention.SkipDeleteFailed} {
		report.Items = append(report.Items, retention.Item{Outcome: retention.Skipped, Skip: skip})
	}
	rm.Record(report)

	// Drills: one passed, one failed.
	dm := restore.NewDrillMetrics()
	require.NoError(t, reg.Register(dm))
	dm.Record(ctx, &restore.DrillResult{Source: "main", Cluster: "prod", Created: now.Add(-time.Hour), Started: now, Duration: time.Second, Restored: true})
	dm.Record(ctx, &restore.DrillResult{Source: "main", Cluster: "broken", Started: now, Duration: time.Second, Err: restore.ErrIntegrity})

	families, err := reg.Gather()
	lastGathered = families
	stop()
	require.NoError(t, <-started)
	require.NoError(t, err)
	out := map[string]family{}
	for _, f := range families {
		fam := family{typ: f.GetType(), values: map[string]map[string]bool{}}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if fam.values[l.GetName()] == nil {
					fam.values[l.GetName()] = map[string]bool{}
				}
				fam.values[l.GetName()][l.GetValue()] = true
			}
		}
		out[f.GetName()] = fam
	}
	return out
}

// lastGathered is what the last exportedMetrics gathered.
var lastGathered []*dto.MetricFamily

// snapshotterFunc adapts a function to a backup.Snapshotter.
type snapshotterFunc func(context.Context) (*backup.Snapshot, error)

func (f snapshotterFunc) Snapshot(ctx context.Context) (*backup.Snapshot, error) { return f(ctx) }

// TestExposition writes every collector's series in the text format to
// the file $ETCDBACKUP_EXPOSITION names, for `promtool check metrics`
// (make rules), and checks the exposition is not empty.
func TestExposition(t *testing.T) {
	exportedMetrics(t) // the same exercise as the rules' check
	out := os.Getenv("ETCDBACKUP_EXPOSITION")
	fams := lastGathered
	require.NotEmpty(t, fams)
	var b bytes.Buffer
	for _, f := range fams {
		_, err := expfmt.MetricFamilyToText(&b, f)
		require.NoError(t, err)
	}
	require.Contains(t, b.String(), "etcdbackup_schedule_heartbeat_timestamp_seconds")
	if out != "" {
		require.NoError(t, os.WriteFile(out, b.Bytes(), 0o644))
	}
}
