package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
)

// The follower of the continuous-backup subcommands runs in the backup
// modes' lean binary (see leanBinary), so that its peak RSS counts what a
// host following links, as the backup modes' do.

// pitrLine is one line the follower child writes on stdout.
type pitrLine struct {
	// "chain", "segment", "end"; for a recovery, "recovery" (started),
	// "tail" (a segment of the old chain's tail) and "recovered".
	Kind        string `json:"kind"`
	First, Last int64  `json:",omitempty"`
	Committed   int64  `json:",omitempty"` // Unix nanoseconds
	HWM         int64  `json:",omitempty"`
	ID          string `json:",omitempty"` // the segment's, for "segment"
	// Head is etcd's revision as the follower saw it, Lag the event's lag
	// in nanoseconds (FollowEvent.Lag).
	Head int64  `json:",omitempty"`
	Lag  int64  `json:",omitempty"`
	Err  string `json:",omitempty"`
}

// runPITRFollower is the "pitr-follow" subcommand: a follower of env's
// etcd into env's bucket until SIGTERM, reporting segments on stdout.
func runPITRFollower() error {
	var env modeEnv
	if err := json.NewDecoder(os.Stdin).Decode(&env); err != nil {
		return fmt.Errorf("read environment: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{env.Etcd}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{env.Etcd}})
	if err != nil {
		return err
	}
	bucket, err := env.bucket()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(l pitrLine) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(l)
	}
	f := &backup.Follower{
		Client:   cli,
		Pipeline: &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.Zstd, Logger: traceLogger()},
		Cluster:  "bench",
		Targets:  []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: bucket}}},
		Catalogs: []backup.Catalog{bucket},
		Observer: backup.FollowObserverFunc(func(e backup.FollowEvent) {
			switch e.Kind {
			case backup.ChainStarted, backup.ChainResumed:
				// The peak so far: the chain's full backup's, for a new chain.
				emit(pitrLine{Kind: "chain", First: e.Revision, Committed: e.Time.UnixNano(), HWM: selfHWM()})
			case backup.SegmentCommitted:
				l := pitrLine{Kind: "segment", First: e.Revision, Last: e.Committed, Committed: e.Time.UnixNano(), Head: e.HeadRevision, Lag: int64(e.Lag)}
				if len(e.Manifests) > 0 {
					l.ID = e.Manifests[0].ID
				}
				emit(l)
			case backup.RecoveryStarted:
				emit(pitrLine{Kind: "recovery", First: e.Revision, Head: e.HeadRevision, Committed: e.Time.UnixNano()})
			case backup.RecoverySegmentCommitted:
				emit(pitrLine{Kind: "tail", First: e.Revision, Last: e.Committed, Head: e.HeadRevision, Committed: e.Time.UnixNano()})
			case backup.RecoveryDone:
				l := pitrLine{Kind: "recovered", First: e.Revision, Last: e.Committed, Head: e.HeadRevision, Committed: e.Time.UnixNano()}
				if e.Err != nil {
					l.Err = e.Err.Error()
				}
				emit(l)
			}
		}),
	}
	if err := f.Run(ctx); err != nil {
		return err
	}
	emit(pitrLine{Kind: "end", HWM: selfHWM()})
	return nil
}
