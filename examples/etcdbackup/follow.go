package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
)

func runFollow(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("follow", "--endpoints=HOST:PORT[,...] --destination=URL|NAME --cluster=NAME [--flush-interval=1s] [--compression=zstd|gzip|none] [--recipient=KEY]")
	var (
		dest                  destinationFlags
		endpoints, recipients stringList
		cacert, cert, key     string
		compression           string
		recipientFile         string
		dialTimeout, flush    time.Duration
		maxBytes              int
		quiet                 bool
	)
	dest.register(fs)
	fs.Var(&endpoints, "endpoints", "etcd client `URLs` (HOST:PORT or https://HOST:PORT), comma-separated (required)")
	fs.StringVar(&cacert, "cacert", "", "CA certificate `file` of the etcd server certificates")
	fs.StringVar(&cert, "cert", "", "client certificate `file` for etcd")
	fs.StringVar(&key, "key", "", "client key `file` for etcd")
	fs.DurationVar(&dialTimeout, "dial-timeout", backup.DefaultDialTimeout, "bound on connecting to etcd")
	fs.DurationVar(&flush, "flush-interval", backup.DefaultFlushInterval, "longest time a revision waits before its segment is stored")
	fs.IntVar(&maxBytes, "max-segment-bytes", backup.DefaultMaxSegmentBytes, "segment size that triggers a store before the interval")
	fs.StringVar(&compression, "compression", string(backup.Zstd), "zstd, gzip or none")
	fs.Var(&recipients, "recipient", "age public `key` to encrypt to; repeatable")
	fs.StringVar(&recipientFile, "recipient-file", "", "`file` of age public keys, one a line (- for stdin)")
	fs.BoolVar(&quiet, "quiet", false, "print no progress")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if len(endpoints) == 0 {
		return usagef("--endpoints is required")
	}
	if flush <= 0 || maxBytes <= 0 {
		return usagef("--flush-interval and --max-segment-bytes must be positive")
	}
	comp := backup.Compression(compression)
	if err := comp.Validate(); err != nil || comp == "" {
		return usagef("--compression %q: want zstd, gzip or none", compression)
	}
	if (cert == "") != (key == "") {
		return usagef("--cert and --key go together")
	}
	if recipientFile != "" {
		more, err := readRecipients(s, recipientFile)
		if err != nil {
			return err
		}
		recipients = append(recipients, more...)
	}
	enc := backup.Encryption{Recipients: recipients}
	if err := enc.Validate(); err != nil {
		return invalidInput(err)
	}
	etcd := backup.EtcdConfig{Endpoints: endpoints, DialTimeout: dialTimeout, Logger: fs.logger(s)}
	cliCfg := clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout, Logger: zap.NewNop()}
	if cacert != "" || cert != "" {
		etcd.TLS = &transport.TLSInfo{TrustedCAFile: cacert, CertFile: cert, KeyFile: key}
		tc, err := etcd.TLS.ClientConfig()
		if err != nil {
			return invalidInput(fmt.Errorf("etcd tls: %w", err))
		}
		cliCfg.TLS = tc
	}
	snapshotter, err := backup.NewEtcdSnapshotter(etcd)
	if err != nil {
		return invalidInput(err)
	}
	cli, err := clientv3.New(cliCfg)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()

	reg, d, err := openDestination(ctx, &dest, fs.logger(s))
	if err != nil {
		return err
	}
	defer reg.Close()
	f := &backup.Follower{
		Client:          cli,
		Pipeline:        &backup.Pipeline{Snapshotter: snapshotter, Compression: comp, Encryption: enc, Logger: fs.logger(s)},
		Cluster:         dest.cluster,
		Targets:         []backup.Target{d.Target()},
		Catalogs:        []backup.Catalog{d},
		FlushInterval:   flush,
		MaxSegmentBytes: maxBytes,
	}
	if !quiet {
		f.Observer = &followProgress{w: s.stderr}
	}
	// Run returns nil once ctx ends (SIGINT, SIGTERM) and the segment it
	// held is stored.
	return f.Run(ctx)
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
	case backup.WatchRestarted:
		fmt.Fprintf(p.w, "  watch restarted at revision %d: %s\n", e.Revision, oneLine(e.Err))
	}
}
