package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/retention"
)

func runPrune(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("prune", "--destination=URL|NAME --cluster=NAME --keep-last=N|--gfs=...|--keep-within=D|--max-age=D|--point-in-time=D [--name=NAME] [--kind=snapshot|keys-json] [--copies] [--dry-run] [--output=table|json]")
	var (
		dest               destinationFlags
		policy             policyFlags
		name, kind, output string
		dryRun, copies     bool
	)
	dest.register(fs)
	policy.register(fs)
	fs.StringVar(&name, "name", "", "prune only the backups of this backup `name` (one config's); default: every backup of the cluster")
	fs.StringVar(&kind, "kind", "snapshot", "the kind of backup to count: snapshot or keys-json (never counted together)")
	fs.BoolVar(&copies, "copies", false, "the destination holds copies made by etcdbackup copy or a replication job: date a copy by the time its source's store wrote it, which the copy records; without it a copy is dated as any backup (one written long after its backup is misdated and kept), since anyone who can write to the destination can make a backup look like a copy")
	fs.BoolVar(&dryRun, "dry-run", false, "say what would be deleted, delete nothing")
	fs.StringVar(&output, "output", "table", "table or json")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	pol, chains, err := policy.policy()
	if err != nil {
		return err
	}
	if name != "" {
		if err := backup.ValidateName("backup", name); err != nil {
			return invalidInput(err)
		}
	}
	kinds := map[string]backup.Kind{"snapshot": backup.KindBackup, "keys-json": backup.KindKeysJSON, "keys": backup.KindKeys}
	if _, ok := kinds[kind]; !ok {
		return usagef("--kind %q: want snapshot or keys-json", kind)
	}
	if output != "table" && output != "json" {
		return usagef("--output %q: want table or json", output)
	}

	reg, d, err := openDestination(ctx, &dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return err
	}
	defer reg.Close()
	p := &retention.Pruner{Store: d, Destination: d.Name(), Policy: pol, Chains: chains, Name: name, Kind: kinds[kind],
		DryRun: dryRun, Logger: fs.logger(s)}
	if copies {
		// Trusting a copy's recorded time is a choice: on a primary, a
		// writer that cannot delete could commit a backdated backup that
		// looks like a copy and push a genuine one out of its slot.
		p.Copies = replicate.IsCopy
	}
	report, err := p.Prune(ctx, dest.cluster)
	if report != nil {
		if werr := printPruneReport(s, report, output == "json"); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return fmt.Errorf("prune %s: %w", d.Name(), err)
	}
	return nil
}

// policyFlags are the rules of a retention policy.
type policyFlags struct {
	keepLast, keep int
	keepWithin     time.Duration
	maxAge         time.Duration
	pointInTime    time.Duration
	gfs            string
}

func (f *policyFlags) register(fs *flagSet) {
	fs.IntVar(&f.keepLast, "keep-last", 0, "keep the `N` newest backups")
	fs.IntVar(&f.keep, "keep", 0, "the same as --keep-last")
	fs.DurationVar(&f.keepWithin, "keep-within", 0, "keep every backup younger than this `duration`")
	fs.StringVar(&f.gfs, "gfs", "", "keep the newest backup of each of the last hours, days, weeks and months: `hours=24,days=7,weeks=4,months=12` (any of them)")
	fs.DurationVar(&f.maxAge, "max-age", 0, "delete backups older than this `duration`, even those a keep rule selects; alone, keep every backup younger than it")
	fs.DurationVar(&f.pointInTime, "point-in-time", 0, "keep every revision of the last `duration` restorable (continuous backup): the full backup at the window's base, the segments after it, and every full a kept segment's chain starts from; segments before the base are deleted; alone, also keep every full backup of the window")
}

// policy returns the retention policy of the flags, and the chain rule of
// --point-in-time (nil without it). At least one rule is required: prune
// never guesses what to keep. Without --point-in-time no delta segment is
// deleted, and no full backup a segment's chain starts from.
func (f *policyFlags) policy() (retention.Policy, *retention.ChainPolicy, error) {
	p, err := f.fullPolicy()
	if err != nil || f.pointInTime == 0 {
		return p, nil, err
	}
	chains := retention.PointInTime(f.pointInTime)
	if err := chains.Validate(); err != nil {
		return retention.Policy{}, nil, invalidInput(err)
	}
	return p, &chains, nil
}

// fullPolicy returns the rules for full backups.
func (f *policyFlags) fullPolicy() (retention.Policy, error) {
	if f.keep > 0 && f.keepLast > 0 && f.keep != f.keepLast {
		return retention.Policy{}, usagef("--keep and --keep-last disagree")
	}
	if f.pointInTime < 0 {
		return retention.Policy{}, usagef("--point-in-time must be positive")
	}
	p := retention.Policy{KeepLast: max(f.keep, f.keepLast), KeepWithin: f.keepWithin, MaxAge: f.maxAge}
	if f.gfs != "" {
		fields := map[string]*int{"hours": &p.Hours, "days": &p.Days, "weeks": &p.Weeks, "months": &p.Months}
		for part := range strings.SplitSeq(f.gfs, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			n, err := strconv.Atoi(v)
			field := fields[k]
			if !ok || err != nil || n < 1 || field == nil {
				return retention.Policy{}, usagef("--gfs %q: want hours=N,days=N,weeks=N,months=N, each at least 1", f.gfs)
			}
			*field = n
		}
	}
	if p.KeepLast == 0 && p.KeepWithin == 0 && p.Hours == 0 && p.Days == 0 && p.Weeks == 0 && p.Months == 0 {
		switch {
		case f.pointInTime > 0 && p.MaxAge == 0:
			p.KeepWithin = f.pointInTime
		case p.MaxAge == 0:
			return retention.Policy{}, usagef("say what to keep: --keep-last, --gfs, --keep-within, --max-age or --point-in-time")
		}
	}
	if err := p.Validate(); err != nil {
		return retention.Policy{}, invalidInput(err)
	}
	return p, nil
}

// pruneItem is a line of prune's JSON output.
type pruneItem struct {
	Outcome string `json:"outcome"`
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Reason  string `json:"reason"`
}

// printPruneReport prints what prune did or would do, as a table with a
// summary line, or as JSON.
func printPruneReport(s *streams, report *retention.Report, asJSON bool) error {
	if asJSON {
		items := make([]pruneItem, 0, len(report.Items))
		for _, it := range report.Items {
			items = append(items, pruneItem{Outcome: string(it.Outcome), ID: it.Entry.ID, Kind: string(it.Entry.Kind), Reason: it.Reason})
		}
		enc := json.NewEncoder(s.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"dryRun": report.DryRun, "items": items})
	}
	tw := tabwriter.NewWriter(s.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTCOME\tID\tKIND\tREASON")
	for _, it := range report.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.Outcome, it.Entry.ID, it.Entry.Kind, it.Reason)
	}
	tw.Flush()
	if report.DryRun {
		_, err := fmt.Fprintf(s.stdout, "dry run: %d would be deleted, %d kept\n", report.Count(retention.WouldDelete), report.Count(retention.Kept))
		return err
	}
	_, err := fmt.Fprintf(s.stdout, "%d deleted, %d kept, %d skipped\n", report.Count(retention.Deleted), report.Count(retention.Kept), report.Count(retention.Skipped))
	return err
}
