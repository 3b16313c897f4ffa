//go:build !benchlean

package main

import (
	"strings"
	"testing"
	"time"
)

// TestRecoveryObserve: the old chain's tail left is counted to where the
// tail ends, the recovery's full backup's revision, not to etcd's head,
// which moves on under the writes; the lag in revisions is etcd's head as
// the follower saw it less what it committed.
func TestRecoveryObserve(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(s int) int64 { return start.Add(time.Duration(s) * time.Second).UnixNano() }
	r := &recoveryReport{StartHead: 301932}
	var tailLeft int64
	for _, l := range []pitrLine{
		{Kind: "recovery", First: 1933, Head: 301932, Committed: at(1)},
		{Kind: "chain", First: 302111, Committed: at(20)},
		{Kind: "segment", First: 302111, Last: 304000, Head: 306000, Lag: int64(time.Second), Committed: at(21)},
		{Kind: "tail", First: 1933, Last: 100000, Head: 400000, Committed: at(40)},
		{Kind: "segment", First: 304001, Last: 380000, Head: 382000, Lag: int64(time.Second), Committed: at(41)},
		{Kind: "recovered", First: 1933, Last: 302110, Committed: at(60)},
	} {
		r.observe(l, start, &tailLeft)
	}
	if r.Behind != 300000 || r.FullRevision != 302110 || r.TailDone != 60*time.Second {
		t.Fatalf("behind %d, full %d, tail done %v", r.Behind, r.FullRevision, r.TailDone)
	}
	if len(r.Lags) != 2 || r.Lags[0].Revisions != 2000 || r.Lags[0].Tail != 0 || r.Lags[1].Tail != 202110 {
		t.Fatalf("lags %+v", r.Lags)
	}
	if got := renderRecovery(r); !strings.Contains(got, "41s: 2000 revisions, 1s (old chain's tail: 202110 revisions left)") {
		t.Errorf("rendered:\n%s", got)
	}
}
