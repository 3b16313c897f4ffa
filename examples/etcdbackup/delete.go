package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/retention"
)

func runDelete(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("delete", "--destination=URL|NAME --cluster=NAME --backup=ID [--dry-run] [--output=text|json]")
	var (
		dest       destinationFlags
		id, output string
		dryRun     bool
	)
	dest.register(fs)
	fs.StringVar(&id, "backup", "", "`ID` of the backup to delete (required)")
	fs.BoolVar(&dryRun, "dry-run", false, "say whether it would be deleted, delete nothing")
	fs.StringVar(&output, "output", "text", "text or json")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if id == "" {
		return usagef("--backup is required")
	}
	if output != "text" && output != "json" {
		return usagef("--output %q: want text or json", output)
	}
	reg, d, err := openDestination(ctx, &dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return err
	}
	defer reg.Close()
	p := &retention.Pruner{Store: d, Destination: d.Name(), DryRun: dryRun, Logger: fs.logger(s)}
	item, err := p.Delete(ctx, dest.cluster, id)
	if err != nil {
		return err
	}
	if output == "json" {
		return json.NewEncoder(s.stdout).Encode(pruneItem{Outcome: string(item.Outcome), ID: item.Entry.ID, Kind: string(item.Entry.Kind), Reason: item.Reason})
	}
	_, err = fmt.Fprintf(s.stdout, "%s %s\n", item.Outcome, item.Entry.ID)
	return err
}
