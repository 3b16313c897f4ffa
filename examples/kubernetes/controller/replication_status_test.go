package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// TestReplicationStatusCountsInvalidSourceApart: a manifest on the source
// the copy cannot read is counted in InvalidSourceManifests, not as a
// backup the target lags behind on; a backup that failed is behind.
func TestReplicationStatusCountsInvalidSourceApart(t *testing.T) {
	var r replicas
	now := time.Now()
	done := func(it replicate.Item) replicate.Event {
		return replicate.Event{Kind: replicate.Done, Target: "vault", Time: now, Item: &it}
	}
	r.observe("job", replicate.Event{Kind: replicate.Planned, Target: "vault", Time: now})
	r.observe("job", done(replicate.Item{ID: "x.manifest.json", Outcome: replicate.NotCopied, Created: now.Add(-time.Hour),
		Err: fmt.Errorf("%w: format 9 is not supported", replicate.ErrInvalidSource)}))
	r.observe("job", done(replicate.Item{ID: "b", Outcome: replicate.Copied, Created: now}))
	st := r.status("job", []string{"vault"}, schedule.Status{}).Targets[0]
	if st.InvalidSourceManifests != 1 || st.BackupsBehind != 0 || st.LagSeconds != "0" || st.Copied != 1 {
		t.Fatalf("status %+v: want one invalid source manifest, in step", st)
	}
	r.observe("job", done(replicate.Item{ID: "c", Outcome: replicate.Failed, Created: now.Add(-time.Minute), Err: errors.New("boom")}))
	st = r.status("job", []string{"vault"}, schedule.Status{}).Targets[0]
	if st.BackupsBehind != 1 || st.LagSeconds != "60.000" {
		t.Fatalf("status %+v: want one backup behind by a minute", st)
	}
}
