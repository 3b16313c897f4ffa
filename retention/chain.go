package retention

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// ChainPolicy is the retention rule of continuous backups (backup.Follower):
// a chain is a full backup and the contiguous delta segments after it, and
// every revision of the last Window stays restorable.
//
// Applied to a Plan made by MakePlan, it:
//
//   - keeps the base of the window: the newest full backup completed at or
//     before now-Window (or the oldest full backup, when the window reaches
//     back past every one), and every full backup a chain reaching into
//     the window starts from, even when the plan would delete them;
//   - keeps every delta segment that ends after the base's revision: the
//     restore points from the base to now depend on them;
//   - deletes the delta segments that end at or before the base's
//     revision: no kept restore point of the window needs them, and full
//     backups kept by the plan beyond the window restore on their own.
//
// It never deletes a full backup and never turns a kept entry into a
// deleted one, except segments: the plan's invariants (newest backup kept,
// legacy, foreign and invalid entries kept, one cluster only) hold.
type ChainPolicy struct {
	// Window is how far back every revision stays restorable.
	Window time.Duration
}

// PointInTime returns the ChainPolicy that keeps every revision of the last
// window restorable, alongside a Policy (keep-last, GFS) for full backups.
func PointInTime(window time.Duration) ChainPolicy { return ChainPolicy{Window: window} }

// Validate checks the window.
func (c ChainPolicy) Validate() error {
	if c.Window <= 0 {
		return errors.New("point-in-time window must be positive")
	}
	return nil
}

// String describes the rule.
func (c ChainPolicy) String() string { return fmt.Sprintf("point-in-time %s", c.Window) }

// Reasons of chain decisions.
const (
	ReasonWindowBase  = "full backup at the base of the point-in-time window: kept"
	ReasonChainBase   = "full backup a chain in the point-in-time window starts from: kept"
	ReasonSegmentKept = "delta segment a restore point of the point-in-time window depends on: kept"
	ReasonNoFull      = "delta segment of a cluster without a full backup with a known revision: kept"
)

// Apply returns plan with the chain rule applied (plan is not changed). The
// decisions keep their order.
func (c ChainPolicy) Apply(plan *Plan) (*Plan, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	out := *plan
	out.Decisions = slices.Clone(plan.Decisions)
	ds := out.Decisions
	var fulls []int // full backups that may base a chain, by completion
	for i, d := range ds {
		e := d.Entry
		if e.Cluster == plan.Cluster && e.ChainBase() {
			fulls = append(fulls, i)
		}
	}
	slices.SortStableFunc(fulls, func(a, b int) int { return completed(ds[a].Entry).Compare(completed(ds[b].Entry)) })

	for i := range ds {
		if e := ds[i].Entry; e.Cluster == plan.Cluster && e.Kind == backup.KindDelta {
			ds[i].Action, ds[i].Reason = Keep, ReasonNoFull
		}
	}
	if len(fulls) == 0 {
		return &out, nil
	}
	start := plan.Now.Add(-c.Window)
	base := fulls[0]
	for _, i := range fulls {
		if !completed(ds[i].Entry).After(start) {
			base = i
		}
	}
	baseRev := ds[base].Entry.Manifest.Etcd.Revision.Low
	keep(&ds[base], ReasonWindowBase)

	chainBases := map[string]bool{}
	for i := range ds {
		e := ds[i].Entry
		if e.Cluster != plan.Cluster || e.Kind != backup.KindDelta {
			continue
		}
		if e.Manifest.LastRevision <= baseRev {
			ds[i].Action = Delete
			ds[i].Reason = fmt.Sprintf("delta segment ends at revision %d, at or before the base of the %s point-in-time window (%s, revision %d)",
				e.Manifest.LastRevision, c.Window, ds[base].Entry.ID, baseRev)
			continue
		}
		ds[i].Action, ds[i].Reason = Keep, ReasonSegmentKept
		chainBases[e.Manifest.Chain] = true
	}
	for _, i := range fulls {
		if chainBases[ds[i].Entry.ID] && completed(ds[i].Entry).After(completed(ds[base].Entry)) {
			keep(&ds[i], ReasonChainBase)
		}
	}
	return &out, nil
}

// keepChainBases returns plan with every full backup that a delta segment
// of the cluster names as its chain kept: without a ChainPolicy no segment
// is deleted, so every restore point of every chain stays restorable.
func keepChainBases(plan *Plan) *Plan {
	chains := map[string]bool{}
	for _, d := range plan.Decisions {
		if e := d.Entry; e.Cluster == plan.Cluster && e.Kind == backup.KindDelta && e.Manifest != nil {
			chains[e.Manifest.Chain] = true
		}
	}
	if len(chains) == 0 {
		return plan
	}
	out := *plan
	out.Decisions = slices.Clone(plan.Decisions)
	for i := range out.Decisions {
		if e := out.Decisions[i].Entry; e.Cluster == plan.Cluster && e.Kind == backup.KindBackup && chains[e.ID] {
			keep(&out.Decisions[i], ReasonChainBase)
		}
	}
	return &out
}

// keep turns d into a keep, keeping the plan's own reason to keep.
func keep(d *Decision, reason string) {
	if d.Action != Keep {
		d.Action, d.Reason = Keep, reason
	}
}

// completed is when a full backup's snapshot ended: its state is no newer.
func completed(e backup.Entry) time.Time {
	if e.Manifest != nil && !e.Manifest.Completed.IsZero() {
		return e.Manifest.Completed
	}
	return e.Created
}
