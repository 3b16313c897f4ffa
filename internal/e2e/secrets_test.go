package e2e_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
)

// capture records everything the library says: logs, events of backups and
// destinations, restore events.
type capture struct {
	mu   sync.Mutex
	logs bytes.Buffer
	text []string
}

func (c *capture) add(v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.text = append(c.text, fmt.Sprintf("%+v", v), fmt.Sprintf("%#v", v))
}

func (c *capture) all() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String() + strings.Join(c.text, "\n")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestSecretsNeverLeak runs backups, failures, availability checks,
// inventory, retention and a restore with canary credentials and checks
// that neither the real secret nor a wrong one appears in any error, log
// line, event, metric or stored object.
func TestSecretsNeverLeak(t *testing.T) {
	ctx := t.Context()
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(ctx, etcd.Client(t), etcdtest.FillOptions{Keys: 300, Seed: 5})
	require.NoError(t, err)

	const wrongSecret = "CANARY-wrong-secret-7f3a9c"
	etcdPassword := "CANARY-etcd-password-51be"
	etcdtest.EnableAuth(t, etcdPassword, etcd)
	identity, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	canaries := []string{srv.SecretKey(), wrongSecret, etcdPassword, identity.String(), string(identity.String()[len("AGE-SECRET-KEY-1"):])}

	c := &capture{}
	logger := slog.New(slog.NewTextHandler(lockedWriter{&c.mu, &c.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	secrets := destination.StaticSecrets{
		"good": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()},
		"bad":  {AccessKey: srv.AccessKey(), SecretKey: wrongSecret},
	}
	reg, err := destination.NewRegistry(destination.Options{
		Secrets: secrets, Logger: logger,
		Observer: destination.ObserverFunc(func(e destination.Event) { c.add(e) }),
	})
	require.NoError(t, err)
	defer reg.Close()
	url := func(prefix string) string {
		return fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true&region=us-east-1&pathStyle=true", bucket, prefix, srv.Endpoint())
	}
	good, err := reg.Add(ctx, destination.Spec{Name: "good", URL: url("good"),
		Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "good"}})
	require.NoError(t, err)
	bad, err := reg.Add(ctx, destination.Spec{Name: "bad", URL: url("bad"),
		Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "bad"}})
	require.NoError(t, err)

	var errs []error
	record := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Availability checks: one passes, one fails with "auth".
	st, err := reg.Check(ctx, "good")
	record(err)
	c.add(st)
	require.True(t, st.Available(), "%+v", st)
	st, err = reg.Check(ctx, "bad")
	record(err)
	c.add(st)
	require.Equal(t, destination.ReasonAuth, st.Reason, "%+v", st)

	// A backup to both: one commits, one fails.
	metrics := backup.NewMetrics()
	promReg := prometheus.NewRegistry()
	require.NoError(t, promReg.Register(metrics))
	require.NoError(t, promReg.Register(reg.Collector()))
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{
		Endpoints: etcd.Endpoints(), Username: "root", Password: etcdPassword, Logger: logger})
	require.NoError(t, err)
	c.add(snapshotter)
	p := &backup.Pipeline{Snapshotter: snapshotter, Logger: logger,
		Encryption: backup.Encryption{Recipients: []string{identity.Recipient().String()}},
		Observer:   backup.Observers{metrics, backup.ObserverFunc(func(e backup.Event) { c.add(e) })}}
	res, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "once", Targets: []backup.Target{good.Target(), bad.Target()}})
	require.Error(t, err)
	record(err)
	c.add(res)
	require.Equal(t, []string{"good"}, res.Succeeded())

	// A snapshot with a wrong etcd password.
	wrongAuth, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{
		Endpoints: etcd.Endpoints(), Username: "root", Password: wrongSecret, DialTimeout: 2 * time.Second, Logger: logger})
	require.NoError(t, err)
	_, err = (&backup.Pipeline{Snapshotter: wrongAuth, Logger: logger}).Run(ctx,
		backup.Request{Cluster: "prod-a", Name: "twice", Targets: []backup.Target{good.Target()}})
	require.Error(t, err)
	record(err)

	// Inventory, retention and a restore drill.
	inv, err := reg.Sync(ctx, "good")
	record(err)
	c.add(inv)
	_, err = reg.Sync(ctx, "bad")
	record(err)
	report, err := (&retention.Pruner{Store: good, Destination: "good", Policy: retention.KeepLast(1), Logger: logger}).Prune(ctx, "prod-a")
	record(err)
	c.add(report)
	_, err = (&retention.Pruner{Store: bad, Destination: "bad", Logger: logger}).Prune(ctx, "prod-a")
	record(err)
	restorer := &restore.Restorer{Logger: logger, Observer: restore.ObserverFunc(func(e restore.Event) { c.add(e) }),
		Identities: []age.Identity{identity}}
	c.add(restorer)
	b, err := restore.Find(ctx, []restore.Source{{Name: "good", Catalog: good}}, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	drill, err := restorer.Drill(ctx, b)
	require.NoError(t, err)
	c.add(drill)
	_, err = restore.Find(ctx, []restore.Source{{Name: "bad", Catalog: bad}}, restore.Query{Cluster: "prod-a"})
	require.Error(t, err)
	record(err)

	// Metrics.
	families, err := promReg.Gather()
	require.NoError(t, err)
	var metricText bytes.Buffer
	for _, f := range families {
		_, err := expfmt.MetricFamilyToText(&metricText, f)
		require.NoError(t, err)
	}

	// Stored objects: manifests and data.
	var stored bytes.Buffer
	for info, err := range good.List(ctx, "") {
		require.NoError(t, err)
		rc, err := good.Get(ctx, info.Key)
		require.NoError(t, err)
		_, err = io.Copy(&stored, rc)
		require.NoError(t, err)
		rc.Close()
	}

	require.NotEmpty(t, errs)
	var errText strings.Builder
	for _, err := range errs {
		fmt.Fprintf(&errText, "%v\n%+v\n%#v\n", err, err, err)
	}
	everything := map[string]string{
		"errors":          errText.String(),
		"logs and events": c.all(),
		"metrics":         metricText.String(),
		"stored objects":  stored.String(),
		"specs":           fmt.Sprintf("%+v %#v %s", good.Spec(), bad.Spec(), good),
	}
	require.Contains(t, everything["logs and events"], "auth", "the failures were logged or reported")
	for what, text := range everything {
		for _, canary := range canaries {
			require.NotContains(t, text, canary, "a secret leaked into %s", what)
		}
	}

}
