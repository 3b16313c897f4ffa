package main

import (
	"context"
	"flag"
	"time"

	"github.com/etcdbackup/etcdbackup/restore"
)

// newestPoint returns the end of the newest chain of continuous backup
// when it reaches past the full backup it starts from: what restore with
// neither --backup nor a point restores, so that the default never drops
// the revisions follow stored after the newest full backup. It returns
// nil when --backup was given, or when no chain reaches past its full
// (the newest full backup is then the newest point).
func newestPoint(ctx context.Context, fs *flagSet, sources []restore.Source, cluster string) *restore.Point {
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "backup" })
	if explicit {
		return nil
	}
	plan, err := restore.FindPoint(ctx, sources, restore.Point{Cluster: cluster, Time: time.Now()})
	if err != nil || len(plan.Segments) == 0 {
		return nil
	}
	return &restore.Point{Cluster: cluster, Revision: plan.Segments[len(plan.Segments)-1].Manifest.LastRevision}
}
