package destination_test

import (
	"errors"
	"testing"

	"github.com/etcdbackup/etcdbackup/destination"
)

// TestApplyEachRefusesAlone: a spec Apply refuses as a whole (a cloud
// without its driver, an invalid URL, a location taken) is refused alone
// by ApplyEach, and the others converge; the same desired set gives the
// same registry after a restart.
func TestApplyEachRefusesAlone(t *testing.T) {
	ctx := t.Context()
	desired := destination.Desired{Destinations: []destination.Spec{
		mem("default", "mem://main"),
		mem("cloud", "gs://bucket/backups"),
		mem("typo", "s4://bucket"),
		mem("copy", "mem://main"),
		mem("offsite", "mem://offsite"),
	}}
	if _, err := newRegistry(t, destination.Options{}).Apply(ctx, desired); err == nil {
		t.Fatal("Apply accepted a bad set")
	}
	for _, run := range []string{"first", "after a restart"} {
		r := newRegistry(t, destination.Options{})
		ch, refused, err := r.ApplyEach(ctx, desired)
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		if got := names(r.List()); len(got) != 2 || got[0] != "default" || got[1] != "offsite" {
			t.Errorf("%s: registry %q, want default and offsite", run, got)
		}
		if len(ch.Added) != 2 || ch.Default != "default" {
			t.Errorf("%s: changes %+v", run, ch)
		}
		if !errors.Is(refused["cloud"], destination.ErrNoDriver) || !errors.Is(refused["copy"], destination.ErrLocationInUse) ||
			refused["typo"] == nil || len(refused) != 3 {
			t.Errorf("%s: refused %v", run, refused)
		}
	}

	// A refused update of the default keeps its current spec; a refused
	// new spec of another destination leaves it out.
	r := newRegistry(t, destination.Options{})
	if _, _, err := r.ApplyEach(ctx, destination.Desired{Destinations: []destination.Spec{mem("default", "mem://main"), mem("offsite", "mem://offsite")}}); err != nil {
		t.Fatal(err)
	}
	_, refused, err := r.ApplyEach(ctx, destination.Desired{Destinations: []destination.Spec{mem("default", "gs://x"), mem("offsite", "gs://y")}})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := r.Get("default"); err != nil || d.Spec().URL != "mem://main" || refused["default"] == nil {
		t.Errorf("default after a refused update: %v, %v", d, err)
	}
	if _, err := r.Get("offsite"); !errors.Is(err, destination.ErrNotFound) || refused["offsite"] == nil {
		t.Errorf("offsite after a refused update: %v", err)
	}
}
