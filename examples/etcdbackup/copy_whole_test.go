package main

import (
	"testing"

	"github.com/etcdbackup/etcdbackup/replicate"
)

// TestCopyNotWholeFails: a copy with no failed backup still fails when the
// target does not hold every selected backup (a chain stopped at a hole in
// the source's chain, a backup pending).
func TestCopyNotWholeFails(t *testing.T) {
	whole := &replicate.Report{Target: "b", Items: []replicate.Item{{Outcome: replicate.Copied}},
		Chains: []replicate.Chain{{Full: "f", Segments: 1, Through: 12, Whole: true}}}
	if err := notWhole(whole); err != nil {
		t.Fatalf("a whole copy: %v", err)
	}
	hole := &replicate.Report{Target: "b", Items: []replicate.Item{{Outcome: replicate.Copied}, {Outcome: replicate.NotCopied}},
		Chains: []replicate.Chain{{Full: "f", Segments: 2, Through: 12}}}
	if err := notWhole(hole); err == nil {
		t.Fatal("a chain stopped at a hole passed as whole")
	}
	pending := &replicate.Report{Target: "b", Items: []replicate.Item{{Outcome: replicate.Pending}}}
	if err := notWhole(pending); err == nil {
		t.Fatal("a pending backup passed as copied")
	}
}
