package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

func runFollow(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("follow", "--endpoints=HOST:PORT[,...] --destination=URL|NAME --cluster=NAME [--flush-interval=1s] [--compression=zstd|gzip|none] [--recipient=KEY]")
	var (
		dest     destinationFlags
		etcd     etcdFlags
		encoding encodingFlags
		flush    time.Duration
		maxBytes int
		recovery int64
		quiet    bool
	)
	dest.register(fs)
	etcd.register(fs)
	fs.DurationVar(&flush, "flush-interval", backup.DefaultFlushInterval, "longest time a revision waits before its segment is stored")
	fs.IntVar(&maxBytes, "max-segment-bytes", backup.DefaultMaxSegmentBytes, "segment size that triggers a store before the interval")
	fs.Int64Var(&recovery, "recovery-revisions", backup.DefaultRecoveryRevisions,
		"revisions behind etcd's head past which a full backup protects the head first and the chain's tail follows in the background (0: never)")
	encoding.register(fs)
	fs.Lookup("memory").Usage = "`bytes` of upload buffers and compressor, half each (e.g. 32MiB; 0 for the library's defaults: 32 MiB of parts, 40 MiB of zstd); a follower sets no process memory limit: what it holds can pass the budget"
	fs.BoolVar(&quiet, "quiet", false, "print no progress")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if err := etcd.validate(); err != nil {
		return err
	}
	if flush <= 0 || maxBytes <= 0 {
		return usagef("--flush-interval and --max-segment-bytes must be positive")
	}
	// No process memory limit: what a follower holds can pass the budget
	// (the watch responses held while a segment is stored, a segment of
	// up to --max-segment-bytes, a recovery's old chain beside the new
	// full backup), and under a limit below what is live Go collects
	// without end just when the follower must catch up.
	comp, enc, err := encoding.choice(s)
	if err != nil {
		return err
	}
	snapshotter, err := backup.NewEtcdSnapshotter(etcd.config(fs.logger(s)))
	if err != nil {
		return invalidInput(err)
	}
	// Fixed gRPC windows, as the scheduler's followers have them
	// (backup.EtcdSnapshotter.Client): no bandwidth pings after each
	// revision received.
	cli, err := etcd.client(backup.ExportDialOptions()...)
	if err != nil {
		return err
	}
	defer cli.Close()

	reg, d, err := openDestination(ctx, &dest, encoding.registry(fs.logger(s)))
	if err != nil {
		return err
	}
	defer reg.Close()
	f := &backup.Follower{
		Client:          cli,
		Pipeline:        &backup.Pipeline{Snapshotter: snapshotter, Compression: comp, Encryption: enc, Logger: fs.logger(s), MemoryBudget: encoding.compressorMemory()},
		Cluster:         dest.cluster,
		Targets:         []backup.Target{d.Target()},
		Catalogs:        []backup.Catalog{d},
		FlushInterval:   flush,
		MaxSegmentBytes: maxBytes,
		// Zero is the library's default: here it means never.
		RecoveryRevisions: cmp.Or(max(recovery, 0), -1),
	}
	if !quiet {
		f.Observer = &followProgress{w: s.stderr}
	}
	warnOtherFollower(ctx, s.stderr, d, dest.cluster, flush)
	// Run returns nil once ctx ends (SIGINT, SIGTERM) and the segment it
	// held is stored.
	return f.Run(ctx)
}

// warnOtherFollower warns when a delta segment of the cluster was stored
// on the destination within the last few flush intervals: another follow
// of the same cluster is probably running, and two followers write
// overlapping segments (restore copes, the store pays twice). Nothing
// stops it: the destination has no lock to take.
func warnOtherFollower(ctx context.Context, w io.Writer, c backup.Catalog, cluster string, flush time.Duration) {
	entries, err := backup.ListBackups(ctx, c, cluster)
	if err != nil {
		return
	}
	var newest time.Time
	for _, e := range entries {
		if e.Kind == backup.KindDelta && e.Created.After(newest) {
			newest = e.Created
		}
	}
	if age := time.Since(newest); !newest.IsZero() && age < 3*flush+5*time.Second {
		fmt.Fprintf(w, "warning: a delta segment of %s was stored %s ago: another follow of this cluster may be running, and two write overlapping segments\n",
			cluster, age.Round(time.Second))
	}
}

// followProgress prints a follower's events to stderr: chains and
// failures as they happen, segments one line each.
type followProgress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *followProgress) ObserveFollow(e backup.FollowEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case backup.ChainStarted:
		fmt.Fprintf(p.w, "chain of %s started after full backup %s, at revision %d\n", e.Cluster, e.Chain, e.Revision)
	case backup.ChainResumed:
		fmt.Fprintf(p.w, "chain of %s resumed at revision %d (full backup %s)\n", e.Cluster, e.Revision, e.Chain)
	case backup.SegmentCommitted:
		fmt.Fprintf(p.w, "  segment %d..%d: %d events, %s stored, lag %s\n", e.Revision, e.Committed, e.Events,
			size(e.StoredBytes), e.Lag.Round(time.Millisecond))
	case backup.SegmentFailed:
		fmt.Fprintf(p.w, "  segment from revision %d failed on %s, retrying: %s\n", e.Revision, e.Destination, oneLine(e.Err))
	case backup.ChainGap:
		fmt.Fprintf(p.w, "GAP: revision %d of %s was compacted before it was read; a new chain starts: %s\n", e.Revision, e.Cluster, oneLine(e.Err))
	case backup.ChainRewound:
		fmt.Fprintf(p.w, "REWOUND: %s is not the chain's history (restored to an earlier revision, or replaced); a new chain starts: %s\n", e.Cluster, oneLine(e.Err))
	case backup.TargetBehind:
		fmt.Fprintf(p.w, "BEHIND: %s fails from revision %d (retrying; other destinations go on): %s\n", e.Destination, e.Revision, oneLine(e.Err))
	case backup.TargetLost:
		if e.Chain != "" {
			fmt.Fprintf(p.w, "LOST: %s lacks revisions of chain %s's recovery tail from %d that are no longer held; they are a gap there: %s\n",
				e.Destination, e.Chain, e.Revision, oneLine(e.Err))
			break
		}
		fmt.Fprintf(p.w, "LOST: %s lacks revisions from %d that are no longer held; it takes a full backup of its own when it answers: %s\n",
			e.Destination, e.Revision, oneLine(e.Err))
	case backup.TargetRestarted:
		fmt.Fprintf(p.w, "chain of %s on %s started again after its own full backup %s, at revision %d\n", e.Cluster, e.Destination, e.Chain, e.Revision)
	case backup.TargetCaughtUp:
		fmt.Fprintf(p.w, "%s caught up to revision %d\n", e.Destination, e.Committed)
	case backup.WatchRestarted:
		fmt.Fprintf(p.w, "  watch restarted at revision %d: %s\n", e.Revision, oneLine(e.Err))
	case backup.RecoveryStarted:
		fmt.Fprintf(p.w, "RECOVERY: %s is %d revisions behind etcd's head (revision %d); a full backup protects the head first, the chain's tail from revision %d follows in the background\n",
			e.Cluster, max(e.HeadRevision-e.Committed, 0), e.HeadRevision, e.Revision)
	case backup.RecoverySegmentCommitted:
		fmt.Fprintf(p.w, "  tail segment %d..%d of chain %s: %d revisions left to catch up\n", e.Revision, e.Committed, e.Chain,
			max(e.HeadRevision-e.Committed, 0))
	case backup.RecoveryDone:
		if e.Err != nil {
			fmt.Fprintf(p.w, "GAP: the tail of chain %s ended at revision %d, short of %d: %s\n", e.Chain, e.Committed, e.HeadRevision, oneLine(e.Err))
			break
		}
		fmt.Fprintf(p.w, "recovery done: chain %s holds every revision up to %d\n", e.Chain, e.Committed)
	}
}
