package destination

import (
	"testing"
)

// TestApplyEachDecidesUnderTheWriteLock: ApplyEach asks who uses a
// destination, and so decides, while it holds the lock every other change
// takes: no Add, Update, Remove or Apply runs between its decision and its
// change.
func TestApplyEachDecidesUnderTheWriteLock(t *testing.T) {
	var r *Registry
	unlocked := 0
	r, err := NewRegistry(Options{Users: func(string) []string {
		if r.writeMu.TryLock() {
			r.writeMu.Unlock()
			unlocked++
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := t.Context()
	specs := []Spec{{Name: "default", URL: "mem://main"}, {Name: "old", URL: "mem://old"}}
	if _, err := r.Apply(ctx, Desired{Destinations: specs}); err != nil {
		t.Fatal(err)
	}
	unlocked = 0
	if _, _, err := r.ApplyEach(ctx, Desired{Destinations: []Spec{specs[0], {Name: "old", URL: "mem://moved"}}}); err != nil {
		t.Fatal(err)
	}
	if unlocked != 0 {
		t.Errorf("ApplyEach asked for users %d times outside the write lock", unlocked)
	}
}
