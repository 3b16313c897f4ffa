package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
)

// States of a tracked runnable.
const (
	notStarted int32 = iota
	running
	returned
)

// tracked runs a leader-only part (the scheduler, the registry's checks)
// for the manager and records whether it runs, for the probes. Without
// NeedLeaderElection, the manager runs it on the leader only.
type tracked struct {
	name  string
	run   func(context.Context) error
	state atomic.Int32
}

// Start runs the part until ctx ends.
func (p *tracked) Start(ctx context.Context) error {
	p.state.Store(running)
	defer p.state.Store(returned)
	return p.run(ctx)
}

// err says why the part is not running.
func (p *tracked) err() error {
	switch p.state.Load() {
	case notStarted:
		return fmt.Errorf("the %s has not started yet", p.name)
	case returned:
		return fmt.Errorf("the %s has stopped", p.name)
	}
	return nil
}

// probes are the Controllers' health checks.
type probes struct {
	elected <-chan struct{}
	loaded  *gate
	parts   []*tracked
}

// leading reports whether this replica is the elected leader (always, in
// a manager without leader election).
func (p *probes) leading() bool {
	select {
	case <-p.elected:
		return true
	default:
		return false
	}
}

// Ready is a readiness check (a healthz.Checker: give it to the manager's
// AddReadyzCheck). The leader is ready once the destinations controller
// applied the BackupDestinations to the registry after the election, and
// the scheduler and the registry's checks run; until then it backs up,
// restores and tears down nothing. A replica that is not the leader is a
// standby, ready to take over: it reports ready, so that a rolling update
// is not held back by the replicas that wait for the lease. The error
// names everything the leader still waits for.
func (c *Controllers) Ready(*http.Request) error {
	p := &c.probes
	if !p.leading() {
		return nil
	}
	var errs []error
	if !p.loaded.isOpen() {
		errs = append(errs, errNotLoaded)
	}
	for _, part := range p.parts {
		errs = append(errs, part.err())
	}
	return errors.Join(errs...)
}

// Live is a liveness check (give it to the manager's AddHealthzCheck): it
// fails once the leader's scheduler or the registry's checks stopped while
// the process runs on, which only a restart mends. It does not wait for
// the destinations: a leader that cannot read its Secrets yet is not
// ready, and a restart would not help it.
func (c *Controllers) Live(*http.Request) error {
	var errs []error
	for _, part := range c.probes.parts {
		if part.state.Load() == returned {
			errs = append(errs, part.err())
		}
	}
	return errors.Join(errs...)
}
