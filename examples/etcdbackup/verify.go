package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"filippo.io/age"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/restore"
)

// selectFlags choose a backup and the keys to decrypt it.
type selectFlags struct {
	backup     string
	identities fileList
	quiet      bool
}

func (f *selectFlags) register(fs *flagSet) {
	fs.StringVar(&f.backup, "backup", "latest", "backup `ID` (or data or manifest file name), or latest")
	fs.Var(&f.identities, "identity", "age identity `file` to decrypt with (- for stdin); repeatable")
	fs.BoolVar(&f.quiet, "quiet", false, "print no progress")
}

// restorer returns a Restorer with the identities of the flags. Identity
// files that cannot be read or parsed are usage errors; their content is
// never repeated.
func (f *selectFlags) restorer(s *streams, fs *flagSet) (*restore.Restorer, error) {
	r := &restore.Restorer{Logger: fs.logger(s)}
	for _, name := range f.identities {
		in, err := openInput(s, name)
		if err != nil {
			return nil, err
		}
		ids, err := age.ParseIdentities(in)
		in.Close()
		if err != nil {
			// age's parse errors may quote the line they failed on: a key.
			return nil, usagef("identity file %s holds no valid age identity", name)
		}
		r.Identities = append(r.Identities, ids...)
	}
	if !f.quiet {
		r.Observer = &restoreProgress{w: s.stderr}
	}
	return r, nil
}

// find returns the backup of cluster the flags select among sources.
func (f *selectFlags) find(ctx context.Context, sources []restore.Source, cluster string) (restore.Backup, error) {
	q := restore.Query{Cluster: cluster}
	if f.backup != "latest" {
		q.ID = f.backup
	}
	return restore.Find(ctx, sources, q)
}

func runVerify(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("verify", "--destination=URL|NAME --cluster=NAME [--backup=ID|latest] [--identity=FILE]").withOutput()
	var (
		dest    destinationFlags
		sel     selectFlags
		tempDir string
	)
	dest.register(fs)
	sel.register(fs)
	fs.StringVar(&tempDir, "temp-dir", "", "`directory` for the scratch restore (default: the system's)")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	r, err := sel.restorer(s, fs)
	if err != nil {
		return err
	}
	r.TempDir = tempDir

	reg, d, err := openDestination(ctx, &dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return err
	}
	defer reg.Close()
	b, err := sel.find(ctx, restoreSources(d), dest.cluster)
	if err != nil {
		return err
	}
	// A drill is the strongest proof short of starting etcd: every digest
	// and etcd's trailer checked as the bytes stream, then etcd's own
	// restore, whose database must hold the snapshot's revision and keys.
	res, err := r.Drill(ctx, b)
	if err != nil {
		return fmt.Errorf("backup %s: %w", b.ID, err)
	}
	if !res.Passed() {
		return fmt.Errorf("backup %s: drill did not restore it", b.ID)
	}
	return fs.emit(s.stdout, verifyOutput{ID: res.ID, Kind: string(res.Kind), Created: res.Created, Destination: res.Source, Key: res.Key,
		StoredSize: res.Stored.Size, StoredSHA256: res.Stored.SHA256, RawSize: res.Raw.Size, RawSHA256: res.Raw.SHA256,
		ManifestChecked: res.ManifestChecked, Revision: res.Status.Revision, Keys: int64(res.Status.TotalKeys), Duration: res.Duration.Seconds()},
		func(w io.Writer) error {
			fmt.Fprintf(w, "backup      %s (%s, created %s)\n", res.ID, res.Kind, res.Created.UTC().Format(time.RFC3339))
			fmt.Fprintf(w, "destination %s, key %s\n", res.Source, res.Key)
			if res.ManifestChecked {
				fmt.Fprintf(w, "stored      %s, sha256 %s: matches the manifest\n", size(res.Stored.Size), res.Stored.SHA256)
				fmt.Fprintf(w, "snapshot    %s, sha256 %s: matches the manifest and etcd's trailer\n", size(res.Raw.Size), res.Raw.SHA256)
			} else {
				fmt.Fprintf(w, "stored      %s, sha256 %s: no manifest to compare with (legacy object)\n", size(res.Stored.Size), res.Stored.SHA256)
				fmt.Fprintf(w, "snapshot    %s, sha256 %s: matches etcd's trailer\n", size(res.Raw.Size), res.Raw.SHA256)
			}
			fmt.Fprintf(w, "etcd        revision %d, %d keys, hash %08x\n", res.Status.Revision, res.Status.TotalKeys, res.Status.Hash)
			fmt.Fprintf(w, "restore     etcd restored a data directory holding the same revision and keys in %s\n", res.Duration.Round(time.Millisecond))
			fmt.Fprintf(w, "verified %s\n", res.ID)
			return nil
		})
}

// verifyOutput is verify's result as JSON.
type verifyOutput struct {
	ID              string    `json:"id"`
	Kind            string    `json:"kind"`
	Created         time.Time `json:"created"`
	Destination     string    `json:"destination"`
	Key             string    `json:"key"`
	StoredSize      int64     `json:"storedSize"`
	StoredSHA256    string    `json:"storedSha256"`
	RawSize         int64     `json:"rawSize"`
	RawSHA256       string    `json:"rawSha256"`
	ManifestChecked bool      `json:"manifestChecked"`
	Revision        int64     `json:"revision"`
	Keys            int64     `json:"keys"`
	Duration        float64   `json:"durationSeconds"`
}

// restoreProgress prints the events of a fetch or restore to stderr.
type restoreProgress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *restoreProgress) Observe(e restore.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case restore.Started:
		fmt.Fprintf(p.w, "reading %s from %s\n", e.ID, e.Source)
	case restore.Progress:
		of := ""
		if e.StoredSize > 0 {
			of = " of " + size(e.StoredSize)
		}
		fmt.Fprintf(p.w, "  %s%s downloaded, %s/s\n", size(e.StoredBytes), of, size(int64(e.Rate)))
	case restore.Fetched:
		fmt.Fprintf(p.w, "  downloaded and verified: %s stored, %s snapshot\n", size(e.StoredBytes), size(e.RawBytes))
	case restore.Restored:
		fmt.Fprintf(p.w, "  restored member %s\n", e.Member)
	}
}
