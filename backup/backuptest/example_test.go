package backuptest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
	"github.com/etcdbackup/etcdbackup/schedule/scheduletest"
)

// controller stands for a host's own code under test: it turns a
// cluster's backup settings into a scheduler job.
type controller struct{ scheduler *schedule.Scheduler }

func (c *controller) reconcile(cluster string, keep int) error {
	return c.scheduler.Set(schedule.Job{
		ID: "backups/" + cluster, Schedule: "@hourly", Cluster: cluster, Name: "hourly",
		Destinations: []string{"s3-eu"}, Retention: retention.KeepLast(keep),
	})
}

// A host's controller unit test: real scheduling, pipeline, manifests and
// retention, with a fake etcd member, an in-memory destination and a
// manual clock. No etcd, no network, no sleep: three hours pass in
// microseconds. The member of prod-b drops its connection halfway
// through each snapshot, and nothing of it is stored.
func Example_controllerTest() {
	keys, rev, err := backuptest.KeysSnapshot(map[string]string{"/registry/pods/a": "pod a", "/registry/pods/b": "pod b"})
	if err != nil {
		fmt.Println(err)
		return
	}
	healthy := backuptest.NewSnapshotter(keys, rev)
	broken := backuptest.NewSnapshotter(keys, rev)
	broken.Err, broken.FailAt = errors.New("connection reset by peer"), int64(len(keys)/2)

	dests := backuptest.NewDestinations("s3-eu")
	defer dests.Close()
	clock := scheduletest.NewClock(time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC))
	runs := make(chan backup.Event, 16)
	s, err := schedule.New(schedule.Config{Clock: clock, Runner: &schedule.PipelineRunner{
		Snapshotter: func(_ context.Context, cluster string) (backup.Snapshotter, error) {
			if cluster == "prod-b" {
				return broken, nil
			}
			return healthy, nil
		},
		Uploader: dests.Uploader,
		Store:    dests.Store,
		Now:      clock.Now,
		Observer: backup.ObserverFunc(func(e backup.Event) {
			if e.Kind == backup.Completed || e.Kind == backup.Failed && e.Destination == "" {
				runs <- e
			}
		}),
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := &controller{scheduler: s}
	for _, cluster := range []string{"prod-a", "prod-b"} {
		if err := c.reconcile(cluster, 2); err != nil {
			fmt.Println(err)
			return
		}
	}

	// Each hour, start the scheduler, move the clock to the hour and wait
	// for both runs to end; stopping it waits for the prunes in flight.
	for hour := 10; hour <= 12; hour++ {
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error)
		go func() { stopped <- s.Start(ctx) }()
		_ = clock.BlockUntil(ctx, 1) // the scheduler waits for its next run
		clock.Set(time.Date(2026, 5, 1, hour, 0, 0, 0, time.UTC))
		for range 2 { // one run per cluster
			<-runs
		}
		cancel()
		<-stopped
	}

	for _, cluster := range []string{"prod-a", "prod-b"} {
		backups, err := backuptest.Backups(context.Background(), dests.Bucket("s3-eu"), cluster)
		fmt.Println(cluster, "holds", len(backups), "backups", err)
		for _, b := range backups {
			fmt.Println(" ", b.ID, "revision", b.Manifest.Etcd.Revision.Low)
		}
		st, _ := s.Get("backups/" + cluster)
		fmt.Println(" ", st.Successes, "successes,", st.Failures, "failures")
	}
	// Output:
	// prod-a holds 2 backups <nil>
	//   prod-a-hourly-20260501T110000.000Z revision 3
	//   prod-a-hourly-20260501T120000.000Z revision 3
	//   3 successes, 0 failures
	// prod-b holds 0 backups <nil>
	//   0 successes, 3 failures
}
