package retention

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// ChainPolicy is the retention rule of continuous backups (backup.Follower):
// a chain is a full backup and the contiguous delta segments after it, and
// every revision of the last Window stays restorable.
//
// Applied to a Plan made by MakePlan, it works within the plan's scope: with
// PlanOptions.Name set, the full backups of that backup config and the
// segments its follower wrote, so that each continuous config keeps its
// own window. A segment's manifest does not name the follower's config: a
// segment belongs to the config of the full backup its chain starts from,
// unless that config is not continuous (not listed in Others), in which
// case the chain was adopted (a follower may resume after the newest full
// backup of any config) and belongs to this config, so that no segment is
// left without a window that deletes it. Segments of the chains of the
// configs in Others are kept, out of scope. With PlanOptions.Scope set, only
// the full backups and segments whose manifests it accepts count: the others
// never base the window and are never deleted (a replication job's window
// prunes its copies alone, replicate.IsCopy). It:
//
//   - keeps the base of the window: the newest full backup completed, and
//     stored (by the store's clock, when the plan has it), at or before
//     now-Window less the plan's clock skew, unless a full backup after
//     that records a lower revision (a date that is not to be trusted);
//     when the window reaches back past every full backup, or no date can
//     be trusted, the one with the lowest revision;
//   - keeps every full backup a chain reaching into the window starts
//     from, or continues from (a synthetic full backup compacted from it,
//     see backup.Entry.Continues), when it is newer than the base by
//     revision, even when the plan would delete it;
//   - for a chain the base does not continue (a scheduled full backup
//     taken while the chain ran is restored alone, see restore.FindPoint),
//     keeps the newest full backup at or before the base's revision that
//     the chain continues, and the chain's segments from there: restore
//     replays the window's points on that chain from it;
//   - keeps every other delta segment that ends after the base's revision:
//     the restore points from the base to now depend on them;
//   - counts a chain whose tail a follower's recovery catches up
//     (backup.Manifest.Recovery, recorded by the recovery's full backup
//     and the new chain's segments) as ending at the tail's last
//     revision, stored or not: the segments the tail has yet to store
//     continue the chain's full backup and segments, which stay;
//   - deletes the delta segments that end at or before the full backup
//     their chain restores from (the base, or the one above): no kept
//     restore point of the window needs them, and full backups kept by the
//     plan beyond the window restore on their own.
//
// It never deletes a segment that a segment of its chain out of the scope
// (kept) continues: a prune never leaves a hole in a chain whose later
// segments stay, whichever scope wrote or copied them.
//
// It never deletes a full backup and never turns a kept entry into a
// deleted one, except segments: the plan's invariants (newest backup kept,
// legacy, foreign and invalid entries kept, one cluster only) hold.
type ChainPolicy struct {
	// Window is how far back every revision stays restorable.
	Window time.Duration
	// Others names the other continuous configs of the cluster on the
	// destination: the segments of chains that start from their full
	// backups are theirs. Segments of chains that start from a full backup
	// of any other config are this config's.
	Others []string
	// FromOldestKept, with no Window, bases the rule on the plan's full
	// backups instead of a time: the base is the full backup of the
	// lowest revision among those the plan keeps (its keep rules, not a
	// misdated date), so every revision from it on that a chain holds
	// stays restorable. A chain whose full backup the plan deletes is
	// then kept while it reaches past that base (a follower's live chain
	// outlives its full backup's place in a keep-last), and deleted whole,
	// its full backup with it, once it ends at or before it. A replication
	// target without a point-in-time window prunes its copied chains so
	// (see replicate.Selection). A chain the store wrote any of (its full
	// backup or a segment) within Grace is kept whole, whatever the plan
	// says of its full backup: a copy may be extending it right now.
	FromOldestKept bool
	// Grace is, with FromOldestKept, how long after the store wrote a
	// chain's newest object (its full backup or a segment) the chain is
	// kept whole: a copy writes a chain's full backup, then the chain's
	// segments one by one (after the other full backups it copies, for a
	// chain continued by a later synthetic full backup), and a prune
	// running meanwhile (another replication job's on a shared target, an
	// etcdbackup prune) must not delete what the copy goes on to extend
	// (a copy that finds it deleted reports the chain not whole). Set it above the longest pause a copy makes between two
	// objects of a chain. The store's times (PlanOptions.ModTimes) are
	// compared with the newest time the store gave, so a quiet store keeps
	// its newest chain until something newer is stored; a plan without
	// them (a copy's selection, replicate.Selection) keeps no chain for
	// its age. Zero means DefaultChainGrace.
	Grace time.Duration
}

// DefaultChainGrace is the default ChainPolicy.Grace: one hour.
const DefaultChainGrace = time.Hour

// OldestKept returns the ChainPolicy that keeps the chains reaching past
// the oldest full backup a plan keeps (see ChainPolicy.FromOldestKept).
func OldestKept() ChainPolicy { return ChainPolicy{FromOldestKept: true} }

// PointInTime returns the ChainPolicy that keeps every revision of the last
// window restorable, alongside a Policy (keep-last, GFS) for full backups.
func PointInTime(window time.Duration) ChainPolicy { return ChainPolicy{Window: window} }

// Validate checks the window.
func (c ChainPolicy) Validate() error {
	switch {
	case c.FromOldestKept && c.Window != 0:
		return errors.New("chain rule has both a point-in-time window and FromOldestKept")
	case c.FromOldestKept:
		return nil
	case c.Window <= 0:
		return errors.New("point-in-time window must be positive")
	}
	return nil
}

// String describes the rule.
func (c ChainPolicy) String() string {
	if c.FromOldestKept {
		return "chains from the oldest full backup kept"
	}
	return fmt.Sprintf("point-in-time %s", c.Window)
}

// Reasons of chain decisions.
const (
	ReasonWindowBase  = "full backup at the base of the point-in-time window: kept"
	ReasonChainBase   = "full backup a chain in the point-in-time window starts from: kept"
	ReasonSegmentKept = "delta segment a restore point of the point-in-time window depends on: kept"
	ReasonNoFull      = "delta segment of a cluster without a full backup with a known revision: kept"
	ReasonSharedChain = "delta segment recording no config, on a chain another config's segments continue: kept"
	// ReasonBeforeOthers keeps a segment that later segments of its chain,
	// out of the plan's scope (another config's, another writer's), restore
	// on top of: a prune never leaves a hole in a chain whose later
	// segments stay.
	ReasonBeforeOthers = "delta segment that later segments of its chain out of this scope continue: kept, no hole"
	// ReasonRecentChain keeps, with FromOldestKept, a chain the store
	// wrote any of within the grace (ChainPolicy.Grace): a copy may be
	// extending it.
	ReasonRecentChain = "chain stored within the grace period, a copy may be extending it: kept"
)

// Apply returns plan with the chain rule applied (plan is not changed). The
// decisions keep their order.
func (c ChainPolicy) Apply(plan *Plan) (*Plan, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if k := plan.Options.Kind; k != "" && k != backup.KindBackup {
		// Chains are of snapshots: a plan of another kind has no say
		// over their segments.
		return plan, nil
	}
	out := *plan
	out.Decisions = slices.Clone(plan.Decisions)
	ds := out.Decisions
	name := plan.Options.Name
	configOf := map[string]string{} // full backup ID -> its config
	var fulls []int                 // full backups of the scope that may base a chain
	for i, d := range ds {
		e := d.Entry
		if e.Cluster != plan.Cluster || e.Kind != backup.KindBackup || e.Manifest == nil {
			continue
		}
		configOf[e.ID] = e.Manifest.Name
		if (name == "" || e.Manifest.Name == name) && inScope(plan, e.Manifest) && e.ChainBase() {
			fulls = append(fulls, i)
		}
	}
	var segments []int           // delta segments of the scope
	outside := map[string]bool{} // chains of segments out of the Scope or of Others
	shared := map[string]bool{}  // chains of segments of Others
	// The highest first revision of the segments of each chain out of the
	// Scope or of Others: they are kept, and restore on top of every
	// segment of the chain before them.
	outsideFrom := map[string]int64{}
	for i := range ds {
		e := ds[i].Entry
		if e.Cluster != plan.Cluster || e.Kind != backup.KindDelta || e.Manifest == nil {
			continue
		}
		if !inScope(plan, e.Manifest) {
			ds[i].Action, ds[i].Reason = Keep, ReasonOutOfScope
			outside[e.Manifest.Chain] = true
			outsideFrom[e.Manifest.Chain] = max(outsideFrom[e.Manifest.Chain], e.Manifest.FirstRevision)
			continue
		}
		cfg := e.Manifest.Config
		if cfg == "" {
			cfg = chainConfig(plan.Cluster, e.Manifest.Chain, configOf)
		}
		if name != "" && cfg != name && slices.Contains(c.Others, cfg) {
			ds[i].Action, ds[i].Reason = Keep, fmt.Sprintf("delta segment of a chain of config %q: out of the scope of config %q", cfg, name)
			// Its config prunes it, and may keep it on top of a full
			// backup of this config (its follower started its chain on
			// the cluster's newest full backup): kept while it is.
			outside[e.Manifest.Chain], shared[e.Manifest.Chain] = true, true
			outsideFrom[e.Manifest.Chain] = max(outsideFrom[e.Manifest.Chain], e.Manifest.FirstRevision)
			continue
		}
		segments = append(segments, i)
		ds[i].Action, ds[i].Reason = Keep, ReasonNoFull
	}
	// The segments out of the Scope or of another config are kept, and so
	// is every full backup they may restore on top of.
	for i, d := range ds {
		for chain := range outside {
			if d.Entry.Cluster == plan.Cluster && d.Entry.Continues(chain) {
				keep(&ds[i], ReasonChainBase)
			}
		}
	}
	if len(fulls) == 0 {
		return &out, nil
	}
	base := c.base(plan, fulls)
	if c.FromOldestKept {
		base = oldestKept(plan, fulls)
	}
	baseRev := ds[base].Entry.Manifest.Etcd.Revision.Low
	keep(&ds[base], ReasonWindowBase)

	// Each chain's segments are cut at the newest full backup at or
	// before the base that they continue (backup.Entry.Continues): the
	// base itself when it does, else the chain's own full backup or a
	// synthetic one compacted from it. Restore replays a full backup only
	// with the segments that continue it, so the window's restore points
	// on that chain replay from there.
	// A chain that ends at or before the base's revision has no point in
	// the window: it is cut at the base, whole.
	ends := map[string]int64{}
	for _, i := range segments {
		m := ds[i].Entry.Manifest
		ends[m.Chain] = max(ends[m.Chain], m.LastRevision)
	}
	// A recovery's tail reaches its chain's restore points up to its last
	// revision, stored or not yet: the segments it has yet to store need
	// the chain's full backup and segments.
	tails := recoveryTails(ds, append(slices.Clone(fulls), segments...))
	for chain, until := range tails {
		ends[chain] = max(ends[chain], until)
	}
	recent := c.recentChains(plan, fulls, segments)
	cut := map[string]int{} // chain -> index of its cut full backup, -1 for the base's revision
	for chain, end := range ends {
		cut[chain] = -1
		if end > baseRev {
			cut[chain] = chainCut(plan, ds, chain, base, baseRev)
		}
	}
	chainKept := map[string]bool{}
	for _, i := range segments {
		e := ds[i].Entry
		cutRev, cutID := baseRev, ds[base].Entry.ID
		j := cut[e.Manifest.Chain]
		if j >= 0 {
			cutRev, cutID = ds[j].Entry.Manifest.Etcd.Revision.Low, ds[j].Entry.ID
		}
		if j != cutOutOfScope && e.Manifest.LastRevision <= cutRev && e.Manifest.Config == "" && shared[e.Manifest.Chain] {
			// A segment of an older version, counted by its chain's full
			// backup: it may be another config's follower's, whose later
			// segments (recording that config) continue it.
			ds[i].Action, ds[i].Reason = Keep, ReasonSharedChain
			continue
		}
		if j != cutOutOfScope && e.Manifest.LastRevision <= cutRev && e.Manifest.LastRevision < outsideFrom[e.Manifest.Chain] {
			// Later segments of the chain, out of the scope, are kept:
			// deleting it would leave them a hole to restore across.
			ds[i].Action, ds[i].Reason = Keep, ReasonBeforeOthers
			continue
		}
		if j != cutOutOfScope && e.Manifest.LastRevision <= cutRev && recent[e.Manifest.Chain] {
			ds[i].Action, ds[i].Reason = Keep, ReasonRecentChain
			continue
		}
		if j != cutOutOfScope && e.Manifest.LastRevision <= cutRev {
			ds[i].Action = Delete
			ds[i].Reason = fmt.Sprintf("delta segment ends at revision %d, at or before the full backup its chain restores from %s (%s, revision %d)",
				e.Manifest.LastRevision, c.where(), cutID, cutRev)
			continue
		}
		ds[i].Action, ds[i].Reason = Keep, ReasonSegmentKept
		chainKept[e.Manifest.Chain] = true
	}
	for chain := range tails {
		if ends[chain] > baseRev {
			chainKept[chain] = true
		}
	}
	for chain := range recent {
		for i, d := range ds {
			if d.Entry.Cluster == plan.Cluster && d.Entry.Continues(chain) {
				keep(&ds[i], ReasonRecentChain)
			}
		}
	}
	// The full backups a kept chain continues from are kept whatever
	// their config: the segments kept need them.
	for chain := range chainKept {
		if j := cut[chain]; j >= 0 {
			keep(&ds[j], ReasonChainBase)
		}
		for i, d := range ds {
			e := d.Entry
			if e.Cluster == plan.Cluster && e.Continues(chain) && e.Manifest.Etcd.Revision.Low > baseRev {
				keep(&ds[i], ReasonChainBase)
			}
		}
	}
	return &out, nil
}

// recentChains returns, for a FromOldestKept rule, the chains (by their
// full backup's ID) of which a full backup of fulls or a segment of
// segments (indexes of plan's decisions) was stored within the grace
// before the newest time the store gave (one clock, the store's). A plan
// without the store's times (a copy's selection) has none.
func (c ChainPolicy) recentChains(plan *Plan, fulls, segments []int) map[string]bool {
	recent := map[string]bool{}
	if !c.FromOldestKept {
		return recent
	}
	grace := c.Grace
	if grace <= 0 {
		grace = DefaultChainGrace
	}
	since := latest(plan.Options.ModTimes).Add(-grace)
	for _, i := range append(slices.Clone(fulls), segments...) {
		e := plan.Decisions[i].Entry
		if stored, ok := plan.Options.ModTimes[e.ManifestKey]; !ok || !stored.After(since) {
			continue
		}
		if chain := e.Manifest.Chain; e.Kind == backup.KindDelta {
			recent[chain] = true
		} else {
			recent[e.ID] = true
		}
	}
	return recent
}

// recoveryTails returns, from the manifests of the entries of ds at idx,
// the chains whose tail a follower's recovery catches up
// (backup.Manifest.Recovery: its full backup and the new chain's segments
// record it) and the last revision of each tail.
func recoveryTails(ds []Decision, idx []int) map[string]int64 {
	tails := map[string]int64{}
	for _, i := range idx {
		if r := ds[i].Entry.Manifest.Recovery; r != nil && r.Chain != "" {
			tails[r.Chain] = max(tails[r.Chain], r.Until)
		}
	}
	return tails
}

// inScope reports whether the plan's Scope accepts m (no Scope accepts all).
func inScope(plan *Plan, m *backup.Manifest) bool {
	return plan.Options.Scope == nil || plan.Options.Scope(m)
}

// cutOutOfScope is the chainCut of a chain that only full backups out of
// the plan's Scope continue at or before the base: their writer may
// delete them any time, so none of the chain's segments is deleted.
const cutOutOfScope = -2

// chainCut returns the full backup (an index of ds) that the restore
// points of chain after the window's base replay from: the base when it
// continues the chain, else the one of the plan's Scope at or before the
// base's revision, the newest by revision, that does; -1 when none does
// (the chain's restore points then start at its first full backup after
// the base), cutOutOfScope when only full backups out of the Scope do.
func chainCut(plan *Plan, ds []Decision, chain string, base int, baseRev int64) int {
	if ds[base].Entry.Continues(chain) {
		return base
	}
	cut := -1
	for i, d := range ds {
		e := d.Entry
		if e.Cluster != plan.Cluster || !e.Continues(chain) || e.Manifest.Etcd.Revision.Low > baseRev {
			continue
		}
		if !inScope(plan, e.Manifest) {
			if cut < 0 {
				cut = cutOutOfScope
			}
			continue
		}
		if cut < 0 || e.Manifest.Etcd.Revision.Low > ds[cut].Entry.Manifest.Etcd.Revision.Low {
			cut = i
		}
	}
	return cut
}

// keepChainBases returns plan with every full backup that a delta segment
// of the cluster names as its chain, or continues from (a synthetic full
// backup), kept, and so every chain a recovery's tail continues
// (backup.Manifest.Recovery): without a ChainPolicy no segment is
// deleted, so every restore point of every chain stays restorable.
func keepChainBases(plan *Plan) *Plan {
	chains := map[string]bool{}
	for _, d := range plan.Decisions {
		e := d.Entry
		if e.Cluster != plan.Cluster || e.Manifest == nil {
			continue
		}
		if e.Kind == backup.KindDelta {
			chains[e.Manifest.Chain] = true
		}
		if r := e.Manifest.Recovery; r != nil && r.Chain != "" {
			chains[r.Chain] = true // a recovery's tail continues it
		}
	}
	if len(chains) == 0 {
		return plan
	}
	out := *plan
	out.Decisions = slices.Clone(plan.Decisions)
	for i := range out.Decisions {
		e := out.Decisions[i].Entry
		if e.Cluster != plan.Cluster || e.Kind != backup.KindBackup {
			continue
		}
		for chain := range chains {
			if chains[e.ID] || e.Continues(chain) {
				keep(&out.Decisions[i], ReasonChainBase)
				break
			}
		}
	}
	return &out
}

// base returns the full backup (an index of plan's decisions) at the base
// of the window. A full backup counts as before the window when it
// completed at least the clock skew before the window's start, the store
// wrote its manifest before then too (when the plan knows the store's
// times), and no full backup after the start, or completed after it,
// records a lower revision: dates may lie, the store's clock and the
// revisions of one cluster do not.
func (c ChainPolicy) base(plan *Plan, fulls []int) int {
	ds := plan.Decisions
	skew := plan.Options.ClockSkew
	if skew <= 0 {
		skew = DefaultClockSkew
	}
	start := plan.ageNow().Add(-c.Window - skew)
	low := func(i int) int64 { return ds[i].Entry.Manifest.Etcd.Revision.Low }
	before := func(i int) bool {
		e := ds[i].Entry
		mod, ok := plan.Options.ModTimes[e.ManifestKey]
		return !completed(e).After(start) && (!ok || !mod.After(start))
	}
	lowestAfter := int64(math.MaxInt64)
	for _, i := range fulls {
		if !before(i) {
			lowestAfter = min(lowestAfter, low(i))
		}
	}
	// consistent: no full backup completed after i records a lower
	// revision. Where dates and revisions disagree, a date lies.
	consistent := func(i int) bool {
		for _, j := range fulls {
			if completed(ds[j].Entry).After(completed(ds[i].Entry)) && low(j) < low(i) {
				return false
			}
		}
		return true
	}
	base, found := -1, false
	for _, i := range fulls {
		if !before(i) || low(i) > lowestAfter || !consistent(i) {
			continue
		}
		if !found || completed(ds[i].Entry).After(completed(ds[base].Entry)) ||
			completed(ds[i].Entry).Equal(completed(ds[base].Entry)) && low(i) > low(base) {
			base, found = i, true
		}
	}
	if found {
		return base
	}
	// The window reaches back past every full backup (or their times
	// cannot be trusted: a copy between buckets restamps the store's): the
	// lowest revision keeps the most.
	base = fulls[0]
	for _, i := range fulls {
		if low(i) < low(base) {
			base = i
		}
	}
	return base
}

// where says what bases the rule, for reasons.
func (c ChainPolicy) where() string {
	if c.FromOldestKept {
		return "from the oldest full backup kept"
	}
	return fmt.Sprintf("in the %s point-in-time window", c.Window)
}

// oldestKept returns the full backup of fulls (indexes of plan's
// decisions) with the lowest revision among those the plan keeps by its
// rules (a misdated one is kept by none); the lowest revision of all when
// it keeps none.
func oldestKept(plan *Plan, fulls []int) int {
	ds := plan.Decisions
	low := func(i int) int64 { return ds[i].Entry.Manifest.Etcd.Revision.Low }
	base, found := fulls[0], false
	for _, i := range fulls {
		if ds[i].Action != Keep || strings.HasPrefix(ds[i].Reason, reasonMisdatedPrefix) {
			continue
		}
		if !found || low(i) < low(base) {
			base, found = i, true
		}
	}
	if found {
		return base
	}
	for _, i := range fulls {
		if low(i) < low(base) {
			base = i
		}
	}
	return base
}

// ChainName returns the backup name of the full backup whose ID is chain,
// as the ID tells it (a scheduled backup's, "<cluster>-<name>-<timestamp>"
// with maybe "-<run>"): the config a chain's delta segments belong to,
// whose manifests do not name it; "" when the ID does not tell.
func ChainName(cluster, chain string) string { return chainConfig(cluster, chain, nil) }

// SegmentConfig returns the backup config a delta segment belongs to: the
// one its follower recorded (backup.Manifest.Config), else, for segments
// of older versions, ChainName of its chain.
func SegmentConfig(m *backup.Manifest) string {
	if m.Config != "" {
		return m.Config
	}
	return ChainName(m.Cluster, m.Chain)
}

// chainConfig returns the backup config of the chain that starts from the
// full backup id: its manifest's name when the full backup is listed,
// else the name its ID carries ("<cluster>-<name>-<timestamp>[-<run>]"),
// "" when neither tells.
func chainConfig(cluster, id string, configOf map[string]string) string {
	if cfg, ok := configOf[id]; ok {
		return cfg
	}
	rest, ok := strings.CutPrefix(id, cluster+"-")
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(rest, '-'); i >= 0 && isRun(rest[i+1:]) {
		rest = rest[:i]
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || !isTimestamp(rest[i+1:]) {
		return ""
	}
	return rest[:i]
}

func isRun(s string) bool {
	if len(s) != backup.RunLen {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func isTimestamp(s string) bool {
	for _, layout := range []string{backup.TimestampLayoutMilli, backup.TimestampLayout} {
		if t, err := time.Parse(layout, s); err == nil && t.Format(layout) == s {
			return true
		}
	}
	return false
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
