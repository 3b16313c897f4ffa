package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/retention"
)

func runPrune(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("prune", "--destination=URL|NAME --cluster=NAME --keep=N [--name=NAME] [--kind=snapshot|keys-json] [--dry-run]")
	var (
		dest       destinationFlags
		keep       int
		name, kind string
		dryRun     bool
	)
	dest.register(fs)
	fs.IntVar(&keep, "keep", 0, "keep the `N` newest backups (required, at least 1)")
	fs.StringVar(&name, "name", "", "prune only the backups of this backup `name` (one config's), keeping its N newest; default: every backup of the cluster")
	fs.StringVar(&kind, "kind", "snapshot", "the kind of backup to count: snapshot or keys-json (never counted together)")
	fs.BoolVar(&dryRun, "dry-run", false, "say what would be deleted, delete nothing")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if keep < 1 {
		return usagef("--keep must be at least 1")
	}
	if name != "" {
		if err := backup.ValidateName("backup", name); err != nil {
			return invalidInput(err)
		}
	}
	kinds := map[string]backup.Kind{"snapshot": backup.KindBackup, "keys-json": backup.KindKeysJSON}
	if _, ok := kinds[kind]; !ok {
		return usagef("--kind %q: want snapshot or keys-json", kind)
	}

	reg, d, err := openDestination(ctx, &dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return err
	}
	defer reg.Close()
	p := &retention.Pruner{Store: d, Destination: d.Name(), Policy: retention.KeepLast(keep), Name: name, Kind: kinds[kind],
		DryRun: dryRun, Logger: fs.logger(s)}
	report, err := p.Prune(ctx, dest.cluster)
	if report != nil {
		tw := tabwriter.NewWriter(s.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OUTCOME\tID\tKIND\tREASON")
		for _, it := range report.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.Outcome, it.Entry.ID, it.Entry.Kind, it.Reason)
		}
		tw.Flush()
		if dryRun {
			fmt.Fprintf(s.stdout, "dry run: %d would be deleted, %d kept\n", report.Count(retention.WouldDelete), report.Count(retention.Kept))
		} else {
			fmt.Fprintf(s.stdout, "%d deleted, %d kept, %d skipped\n", report.Count(retention.Deleted), report.Count(retention.Kept), report.Count(retention.Skipped))
		}
	}
	if err != nil {
		return fmt.Errorf("prune %s: %w", d.Name(), err)
	}
	return nil
}
