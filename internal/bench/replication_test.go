//go:build !benchlean

package main

import (
	"strings"
	"testing"
	"time"
)

// TestReplicationFromResults renders the replication section from its
// figures, and says when the subcommand did not run.
func TestReplicationFromResults(t *testing.T) {
	if got := renderReplication(nil); !strings.Contains(got, "Not measured") {
		t.Fatalf("no figures: %q", got)
	}
	fill := replicationReport{Asked: 1000, Value: 1024, Interval: time.Second}
	err := fillReplication(&fill,
		[]written{{rev: 2, at: time.Unix(10, 0)}, {rev: 3, at: time.Unix(11, 0)}},
		[]pitrLine{{ID: "s1", First: 2, Last: 3, Committed: time.Unix(12, 0).UnixNano()}},
		[]replicaLine{{ID: "s1", Committed: time.Unix(13, 500e6).UnixNano()}},
		[]replicaLine{{RSS: 30 << 20, Committed: time.Unix(10, 0).UnixNano()}, {RSS: 31 << 20, Committed: time.Unix(14, 0).UnixNano()}},
		40<<20, time.Unix(12, 0))
	if err != nil {
		t.Fatal(err)
	}
	got := renderReplication(&fill)
	for _, want := range []string{"| replication lag p99 | 1.5s | <= 3s", "| write on etcd to its segment on the target, p99 | 3.5s |", "40 MiB", "30 MiB / 31 MiB"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
}
