package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

func runSave(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("save", "--endpoints=HOST:PORT[,...] --destination=URL|NAME|- --cluster=NAME [flags]")
	var (
		dest     destinationFlags
		etcd     etcdFlags
		encoding encodingFlags
		name     string
		quiet    bool
	)
	dest.register(fs)
	etcd.register(fs)
	fs.StringVar(&name, "name", "manual", "backup `name`: the ID is CLUSTER-NAME-TIMESTAMP")
	encoding.register(fs)
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
	if err := backup.ValidateName("backup", name); err != nil {
		return invalidInput(err)
	}
	comp, enc, err := encoding.parse(s)
	if err != nil {
		return err
	}
	snapshotter, err := backup.NewEtcdSnapshotter(etcd.config(fs.logger(s)))
	if err != nil {
		return invalidInput(err)
	}

	progress := &saveProgress{w: s.stderr}
	pipeline := &backup.Pipeline{
		Snapshotter:  snapshotter,
		Compression:  comp,
		Encryption:   enc,
		Logger:       fs.logger(s),
		MemoryBudget: encoding.compressorMemory(),
	}
	// Scheduled appends the timestamp to the ID: a one-shot ID
	// ("<cluster>-<name>") could be used once only, and every save needs
	// one of its own.
	req := backup.Request{Cluster: dest.cluster, Name: name, Scheduled: true}
	if dest.destination == streamDestination {
		// The stored bytes go to stdout, with no manifest: restore
		// --from=- checks etcd's trailer.
		req.Targets = []backup.Target{{Destination: "stdout", Uploader: &streamUploader{w: s.stdout}}}
		_, err = pipeline.Run(ctx, req)
		return err
	}
	reg, d, err := openDestination(ctx, &dest, encoding.registry(fs.logger(s)))
	if err != nil {
		return err
	}
	defer reg.Close()
	req.Targets = []backup.Target{d.Target()}
	if !quiet {
		pipeline.Observer = progress
	}
	res, err := pipeline.Run(ctx, req)
	if err != nil {
		return err
	}
	for _, o := range res.Outcomes {
		if o.Err != nil {
			return o.Err
		}
	}
	fmt.Fprintln(s.stdout, res.ID)
	return nil
}

// readRecipients reads age public keys, one a line; empty lines and lines
// starting with # are skipped, as in age's recipients files.
func readRecipients(s *streams, name string) ([]string, error) {
	r, err := openInput(s, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, invalidInput(fmt.Errorf("recipient file %s: %w", name, err))
	}
	if len(out) == 0 {
		return nil, usagef("recipient file %s holds no recipient", name)
	}
	return out, nil
}

// saveProgress prints a backup's events to stderr; a failure is left to
// the error line. Events of different destinations may come concurrently.
type saveProgress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *saveProgress) Observe(e backup.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case backup.Started:
		fmt.Fprintf(p.w, "backup %s of cluster %s started\n", e.ID, e.Cluster)
	case backup.Progress:
		fmt.Fprintf(p.w, "  %s read, %s stored, %s/s\n", size(e.RawBytes), size(e.StoredBytes), size(int64(e.Rate)))
	case backup.Uploaded:
		m := e.Manifest
		if m == nil {
			return
		}
		how := string(m.Compression)
		if m.Encrypted() {
			how += ", encrypted"
		}
		fmt.Fprintf(p.w, "  stored on %s: %s (%s) from a %s snapshot of %s at revision %s\n",
			e.Destination, size(e.StoredBytes), how, size(e.RawBytes), m.Etcd.MemberName, revision(m.Etcd.Revision))
	case backup.Completed:
		fmt.Fprintf(p.w, "backup %s completed in %s\n", e.ID, e.Elapsed.Round(time.Millisecond))
	}
}

// revision describes a snapshot's revision, exact or bounded.
func revision(r backup.RevisionInfo) string {
	switch {
	case r.Exact():
		return fmt.Sprint(r.High)
	case r.High == 0:
		return "unknown"
	}
	return fmt.Sprintf("%d..%d", r.Low, r.High)
}
