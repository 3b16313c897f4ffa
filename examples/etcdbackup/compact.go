package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/compact"
)

func runCompact(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("compact", "--destination=URL|NAME --cluster=NAME [--to-revision=N] [--identity=FILE] [--compression=zstd|gzip|none] [--recipient=KEY]").withOutput()
	var (
		dest     destinationFlags
		sel      selectFlags
		encoding encodingFlags
		rev      int64
		tempDir  string
		allowEnc bool
	)
	dest.register(fs)
	fs.Var(&sel.identities, "identity", "age identity `file` to decrypt the chain and drill the new backup with (- for stdin); repeatable")
	fs.BoolVar(&sel.quiet, "quiet", false, "print no progress")
	encoding.register(fs)
	// The replay holds etcd's index of every key and revision it applies,
	// far more than the budget: a process limit of the budget would keep
	// the collector running without end. --memory bounds the encoding of
	// the new full backup alone.
	fs.Lookup("memory").Usage = "`bytes` of upload buffers and compressor of the new full backup, half each (e.g. 32MiB; 0 for the library's defaults: 32 MiB of parts, 40 MiB of zstd); the replay's memory is etcd's and no process memory limit is set"
	fs.Int64Var(&rev, "to-revision", 0, "`revision` of the synthetic full backup (default: the chain's last committed revision)")
	fs.StringVar(&tempDir, "temp-dir", "", "`directory` for the replayed database and the drill, as large as the cluster's (default: the system's)")
	fs.BoolVar(&allowEnc, "allow-encryption-change", false, "store the synthetic full backup even when it would be encrypted and the chain's full backup is not, or the other way round (without --recipient over an encrypted chain: in plaintext)")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if rev < 0 {
		return usagef("--to-revision %d is negative", rev)
	}
	comp, enc, err := encoding.choice(s)
	if err != nil {
		return err
	}
	r, err := sel.restorer(s, fs)
	if err != nil {
		return err
	}
	r.TempDir = tempDir
	reg, d, err := openDestination(ctx, &dest, encoding.registry(fs.logger(s)))
	if err != nil {
		return err
	}
	defer reg.Close()
	c := &compact.Compactor{
		Restorer: r,
		Pipeline: &backup.Pipeline{Compression: comp, Encryption: enc, Logger: fs.logger(s), MemoryBudget: encoding.compressorMemory()},
		Logger:   fs.logger(s),
	}
	res, err := c.Compact(ctx, compact.Request{Cluster: dest.cluster, ToRevision: rev, Sources: restoreSources(d), AllowEncryptionChange: allowEnc,
		Targets: []compact.Target{{Target: d.Target(), Catalog: d}}})
	if errors.Is(err, compact.ErrEncryptionChanged) {
		return fmt.Errorf("%w (--recipient or --recipient-file encrypts it; --allow-encryption-change stores it as asked)", err)
	}
	if err != nil {
		return err
	}
	return fs.emit(s.stdout, compactOutput{ID: res.ID, Cluster: res.Cluster, Destination: d.Name(), Revision: res.Revision,
		Base: res.Synthetic.Base, BaseRevision: res.Synthetic.BaseRevision, Chain: res.Synthetic.Chain, Segments: res.Synthetic.Segments,
		Events: res.Events, Duration: res.Elapsed.Seconds()},
		func(w io.Writer) error {
			if !sel.quiet {
				fmt.Fprintf(s.stderr, "compacted %s from revision %d to %d: %d segments, %d events replayed, drilled, stored on %s\n",
					res.Synthetic.Base, res.Synthetic.BaseRevision, res.Revision, res.Synthetic.Segments, res.Events, d.Name())
			}
			_, err := fmt.Fprintln(w, res.ID)
			return err
		})
}

// compactOutput is compact's result as JSON.
type compactOutput struct {
	ID           string  `json:"id"`
	Cluster      string  `json:"cluster"`
	Destination  string  `json:"destination"`
	Revision     int64   `json:"revision"`
	Base         string  `json:"base"`
	BaseRevision int64   `json:"baseRevision"`
	Chain        string  `json:"chain"`
	Segments     int64   `json:"segments"`
	Events       int64   `json:"events"`
	Duration     float64 `json:"durationSeconds"`
}
