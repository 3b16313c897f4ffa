package destination_test

import (
	"errors"
	"testing"
	"time"

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

// TestApplyEachAsksUsersOnce: a destination whose users change while
// ApplyEach runs is judged by one answer: the change it decided is
// applied, never failed as a whole by a second answer.
func TestApplyEachAsksUsersOnce(t *testing.T) {
	ctx := t.Context()
	var asked int
	r := newRegistry(t, destination.Options{Users: func(name string) []string {
		if name != "old" {
			return nil
		}
		asked++
		if asked == 1 {
			return nil // free when first asked, then a config takes it
		}
		return []string{"ns/nightly"}
	}})
	if _, err := r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{mem("default", "mem://main"), mem("old", "mem://old")}}); err != nil {
		t.Fatal(err)
	}
	ch, refused, err := r.ApplyEach(ctx, destination.Desired{Destinations: []destination.Spec{mem("default", "mem://main"), mem("new", "mem://new")}})
	if err != nil || len(refused) != 0 {
		t.Fatalf("ApplyEach: %v, refused %v", err, refused)
	}
	if got := names(r.List()); len(got) != 2 || got[0] != "default" || got[1] != "new" || len(ch.Removed) != 1 {
		t.Errorf("registry %q, changes %+v; want default and new", got, ch)
	}
}

// TestApplyEachKeepsAConcurrentUpdate: a destination in use whose new
// spec ApplyEach refuses keeps its spec, and an Update racing with
// ApplyEach (credentials rotated by another writer) is never reverted to
// the spec ApplyEach saw before it.
func TestApplyEachKeepsAConcurrentUpdate(t *testing.T) {
	ctx := t.Context()
	r := newRegistry(t, destination.Options{Users: func(name string) []string {
		if name == "offsite" {
			return []string{"ns/nightly"}
		}
		return nil
	}})
	desired := destination.Desired{Destinations: []destination.Spec{mem("default", "mem://main"), mem("offsite", "gs://moved")}}
	for i := range 200 {
		if _, err := r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{mem("default", "mem://main"), mem("offsite", "mem://offsite")}}); err != nil {
			t.Fatal(err)
		}
		rotated := destination.Spec{Name: "offsite", URL: "mem://offsite", CheckInterval: time.Duration(i+1) * time.Minute}
		errs := make(chan error, 2)
		go func() {
			_, refused, err := r.ApplyEach(ctx, desired)
			if err == nil && refused["offsite"] == nil {
				err = errors.New("the moved spec was not refused")
			}
			errs <- err
		}()
		go func() {
			_, err := r.Update(ctx, "offsite", rotated)
			errs <- err
		}()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		d, err := r.Get("offsite")
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Spec(); got != rotated {
			t.Fatalf("run %d: offsite's spec %+v, want the update's %+v", i, got, rotated)
		}
	}
}
