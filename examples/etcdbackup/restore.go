package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/restore"
)

func runRestore(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("restore", "--destination=URL|NAME --cluster=NAME --data-dir=DIR [--backup=ID|latest | --to-revision=N | --to-time=RFC3339 [--nearest-earlier]] [--bump-revision=N [--mark-compacted]] [--identity=FILE] [member flags]").withOutput()
	var (
		dest                   destinationFlags
		sel                    selectFlags
		dataDir, name, initial string
		token                  string
		peerURLs               stringList
		bump                   uint64
		toRevision             int64
		toTime, from           string
		nearest, markCompacted bool
	)
	dest.register(fs)
	sel.register(fs)
	fs.StringVar(&dataDir, "data-dir", "", "`directory` to create the member's data in; it must not exist or be empty (required)")
	fs.StringVar(&name, "name", "default", "the member's `name`, as etcd's --name")
	fs.Var(&peerURLs, "initial-advertise-peer-urls", "the member's peer `URLs`, as etcd's flag (default http://localhost:2380)")
	fs.StringVar(&initial, "initial-cluster", "", "every member as `NAME=URL,...`, as etcd's flag (default: this member alone)")
	fs.StringVar(&token, "initial-cluster-token", restore.DefaultClusterToken, "the new cluster's `token`, as etcd's flag")
	fs.Uint64Var(&bump, "bump-revision", 0, "raise the revision by `N` and mark it compacted, so that watchers relist (Kubernetes)")
	fs.BoolVar(&markCompacted, "mark-compacted", false, "mark the bumped revision compacted, as etcdutl's flag; --bump-revision always does")
	fs.BoolVar(&nearest, "nearest-earlier", false, "when the point lies in a gap of the backups, restore the nearest earlier point instead of failing (the output says which revision)")
	fs.Int64Var(&toRevision, "to-revision", 0, "restore the cluster as it was at store revision `N`, from a full backup and its delta segments")
	fs.StringVar(&toTime, "to-time", "", "restore the last revision received at or before `TIME` (RFC 3339)")
	fs.StringVar(&from, "from", "", "read the stored snapshot from stdin (-), as save --destination=- wrote it, instead of a destination")
	maxRaw := registerMaxRawSize(fs)
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if from != "" && from != "-" {
		return usagef("--from takes - (stdin) only")
	}
	if from == "-" {
		// No destination is opened: the cluster names nothing stored.
		dest.destination = streamDestination
		if dest.cluster == "" {
			dest.cluster = "stdin"
		}
	}
	point, err := pointFlags(fs, dest.cluster, toRevision, toTime)
	if err != nil {
		return err
	}
	if markCompacted && bump == 0 {
		return usagef("--mark-compacted needs --bump-revision")
	}
	if nearest {
		if point == nil {
			return usagef("--nearest-earlier needs --to-revision or --to-time")
		}
		point.NearestEarlier = true
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if dataDir == "" {
		return usagef("--data-dir is required")
	}
	if len(peerURLs) == 0 {
		peerURLs = stringList{"http://localhost:2380"}
	}
	member := restore.Member{
		Name: name, DataDir: dataDir, PeerURLs: peerURLs,
		InitialCluster: initial, ClusterToken: token, RevisionBump: bump,
	}
	if err := member.Validate(); err != nil {
		return invalidInput(err)
	}
	if err := emptyOrMissing(dataDir); err != nil {
		return err
	}
	r, err := sel.restorer(s, fs)
	if err != nil {
		return err
	}
	if r.MaxRawSize, err = maxRaw(); err != nil {
		return err
	}
	if from == "-" {
		if point != nil {
			return usagef("--from=- restores the snapshot it reads; --to-revision and --to-time need a destination")
		}
		return restoreStream(ctx, s, fs, r, member)
	}

	reg, d, err := openDestination(ctx, &dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return err
	}
	defer reg.Close()
	if point == nil {
		point = newestPoint(ctx, fs, restoreSources(d), dest.cluster)
	}
	if point != nil {
		return restorePoint(ctx, s, fs, r, restoreSources(d), *point, member)
	}
	b, err := sel.find(ctx, restoreSources(d), dest.cluster)
	if err != nil {
		return err
	}
	m, err := r.Restore(ctx, b, member)
	if err != nil {
		return fmt.Errorf("backup %s: %w", b.ID, err)
	}
	return fs.emit(s.stdout, restoreOutput{ID: b.ID, DataDir: m.DataDir, Member: m.Name, MemberID: fmt.Sprintf("%x", m.MemberID), ClusterID: fmt.Sprintf("%x", m.ClusterID)},
		func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "restored %s into %s: member %s, member ID %x, cluster ID %x\n", b.ID, m.DataDir, m.Name, m.MemberID, m.ClusterID)
			return err
		})
}

// restoreStream restores a member from stored snapshot bytes on stdin.
// Without a manifest, etcd's sha256 trailer is the check: the snapshot is
// decoded into a file beside the data directory and restored from it.
func restoreStream(ctx context.Context, s *streams, fs *flagSet, r *restore.Restorer, member restore.Member) error {
	dec, err := restore.DecodeStream(s.stdin, r.Identities)
	if err != nil {
		return err
	}
	defer dec.Close()
	f, err := os.CreateTemp(filepath.Dir(filepath.Clean(member.DataDir)), ".etcdbackup-stream-*")
	if err != nil {
		return fmt.Errorf("create snapshot file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// No manifest bounds the stream: --max-raw-size does.
	limit := r.RawLimit(0)
	tr := backup.VerifyTrailer(io.LimitReader(dec, limit+1))
	n, err := io.Copy(f, tr)
	if err != nil {
		return fmt.Errorf("read snapshot from stdin: %w", err)
	}
	if n > limit {
		return fmt.Errorf("%w: the snapshot on stdin decodes to more than %d bytes (--max-raw-size)", restore.ErrIntegrity, limit)
	}
	m, err := r.RestoreFile(ctx, f.Name(), member)
	if err != nil {
		return err
	}
	out := restoreOutput{DataDir: m.DataDir, Member: m.Name, MemberID: fmt.Sprintf("%x", m.MemberID), ClusterID: fmt.Sprintf("%x", m.ClusterID)}
	if err := fs.emit(s.stdout, out, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "restored the snapshot from stdin into %s: member %s, member ID %x, cluster ID %x\n", m.DataDir, m.Name, m.MemberID, m.ClusterID)
		return err
	}); err != nil {
		return err
	}
	return nil
}

// emptyOrMissing refuses a data directory that holds anything before a
// byte is downloaded: restore never overwrites, and a wrong --data-dir is
// the user's to fix.
func emptyOrMissing(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		// It is created beside its parent's other entries: that parent
		// must be a directory already.
		parent := filepath.Dir(filepath.Clean(dir))
		if st, err := os.Stat(parent); err != nil || !st.IsDir() {
			return usagef("data directory %s: its parent %s is not an existing directory", dir, parent)
		}
		return nil
	}
	if err != nil {
		return invalidInput(fmt.Errorf("data directory: %w", err))
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err != io.EOF {
		if err == nil {
			return usagef("data directory %s is not empty", dir)
		}
		return invalidInput(fmt.Errorf("data directory: %w", err))
	}
	return nil
}

// pointFlags returns the point --to-revision or --to-time selects, or nil.
func pointFlags(fs *flagSet, cluster string, rev int64, at string) (*restore.Point, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case !set["to-revision"] && !set["to-time"]:
		return nil, nil
	case set["to-revision"] && set["to-time"]:
		return nil, usagef("--to-revision and --to-time exclude each other")
	case set["backup"]:
		return nil, usagef("--backup excludes --to-revision and --to-time")
	}
	p := &restore.Point{Cluster: cluster, Revision: rev}
	if set["to-revision"] && rev <= 0 {
		return nil, usagef("--to-revision %d: want a positive revision", rev)
	}
	if set["to-time"] {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return nil, usagef("--to-time %q: want RFC 3339, such as 2026-01-02T15:04:05Z", at)
		}
		p.Time = t
	}
	return p, nil
}

// restorePoint restores a revision or a time.
func restorePoint(ctx context.Context, s *streams, fs *flagSet, r *restore.Restorer, sources []restore.Source, p restore.Point, m restore.Member) error {
	plan, err := restore.FindPoint(ctx, sources, p)
	if err != nil {
		return err
	}
	res, err := r.RestorePoint(ctx, plan, m)
	if err != nil {
		return err
	}
	out := restoreOutput{ID: plan.Full.ID, DataDir: res.DataDir, Member: res.Name, MemberID: fmt.Sprintf("%x", res.MemberID),
		ClusterID: fmt.Sprintf("%x", res.ClusterID), Revision: res.Revision, Segments: res.Segments, Events: res.Events,
		RevisionBump: res.RevisionBump}
	if plan.Gap != nil {
		out.Gap = plan.Gap.Error()
	}
	return fs.emit(s.stdout, out, func(w io.Writer) error {
		if plan.Gap != nil {
			if _, err := fmt.Fprintf(w, "%s asked for lies in a gap (%v): restoring the nearest earlier point\n", plan.Gap.Point, plan.Gap); err != nil {
				return err
			}
		}
		if res.RevisionBump > 0 {
			if _, err := fmt.Fprintf(w, "revision bumped by %d and marked compacted: the member serves revision %d\n", res.RevisionBump, res.Revision+res.RevisionBump); err != nil {
				return err
			}
		}
		_, err := fmt.Fprintf(w, "restored revision %d into %s from %s (revision %d) and %d delta segments (%d events in %s): member %s, member ID %x, cluster ID %x\n",
			res.Revision, res.DataDir, plan.Full.ID, res.FullRevision, res.Segments, res.Events, res.Replay.Round(time.Millisecond),
			res.Name, res.MemberID, res.ClusterID)
		return err
	})
}

// restoreOutput is restore's result as JSON.
type restoreOutput struct {
	ID        string `json:"id,omitempty"`
	DataDir   string `json:"dataDir"`
	Member    string `json:"member"`
	MemberID  string `json:"memberID"`
	ClusterID string `json:"clusterID"`
	Revision  int64  `json:"revision,omitempty"`
	Segments  int64  `json:"segments,omitempty"`
	Events    int64  `json:"events,omitempty"`
	// RevisionBump is the bump applied after a point's replay.
	RevisionBump int64 `json:"revisionBump,omitempty"`
	// Gap says why the nearest earlier point was restored instead of the
	// one asked for (--nearest-earlier).
	Gap string `json:"gap,omitempty"`
}
