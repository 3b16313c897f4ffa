package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/zapslog"
)

// DefaultClusterToken is the initial cluster token when none is given:
// etcd's own default.
const DefaultClusterToken = "etcd-cluster"

// Member describes the data directory of one member of the cluster being
// restored, with the flags of `etcdutl snapshot restore`. A restored
// cluster is a new cluster: its member IDs and cluster ID derive from the
// peer URLs and the token, so every member of it must be restored with the
// same InitialCluster and ClusterToken.
type Member struct {
	// Name is the member's name (--name). Required.
	Name string
	// DataDir is the data directory to create (--data-dir). It must not
	// exist, or be an empty directory; its parent must exist. Required.
	DataDir string
	// PeerURLs are the member's initial advertise peer URLs
	// (--initial-advertise-peer-urls). Required.
	PeerURLs []string
	// InitialCluster lists every member as "name=peerURL,..."
	// (--initial-cluster). Empty means this member alone.
	InitialCluster string
	// ClusterToken is the initial cluster token (--initial-cluster-token).
	// Empty means DefaultClusterToken.
	ClusterToken string
	// RevisionBump, when not zero, raises the store's revision by that much
	// and marks the new revision compacted (--bump-revision with
	// --mark-compacted): clients that saw revisions newer than the
	// snapshot's, such as Kubernetes watch caches, then get "compacted"
	// and relist instead of silently missing changes. etcd wants the bump
	// larger than the number of writes since the snapshot.
	RevisionBump uint64
}

// Validate checks the member's configuration without touching the disk or
// the network.
func (m Member) Validate() error {
	if err := validateMemberName(m.Name); err != nil {
		return err
	}
	if m.DataDir == "" {
		return fmt.Errorf("member %q: empty data directory", m.Name)
	}
	if len(m.PeerURLs) == 0 {
		return fmt.Errorf("member %q: no peer URLs", m.Name)
	}
	peers, err := types.NewURLs(m.PeerURLs)
	if err != nil {
		return fmt.Errorf("member %q: peer URLs: %w", m.Name, err)
	}
	cluster, err := types.NewURLsMap(m.initialCluster())
	if err != nil {
		return fmt.Errorf("member %q: initial cluster: %w", m.Name, err)
	}
	own, ok := cluster[m.Name]
	if !ok {
		return fmt.Errorf("member %q is not in its initial cluster %q", m.Name, m.InitialCluster)
	}
	if !slices.Equal(own.StringSlice(), peers.StringSlice()) {
		return fmt.Errorf("member %q: peer URLs %s differ from those of the initial cluster, %s", m.Name, peers, own)
	}
	seen := map[string]string{}
	for name, urls := range cluster {
		for _, u := range urls {
			if other, dup := seen[u.String()]; dup {
				return fmt.Errorf("initial cluster: peer URL %s belongs to %q and %q", u.String(), other, name)
			}
			seen[u.String()] = name
		}
	}
	return nil
}

func validateMemberName(name string) error {
	if name == "" {
		return errors.New("empty member name")
	}
	if strings.ContainsAny(name, "=,") || strings.TrimSpace(name) != name {
		return fmt.Errorf("member name %q may not contain '=' or ',' or surrounding spaces", name)
	}
	return nil
}

func (m Member) initialCluster() string {
	if m.InitialCluster != "" {
		return m.InitialCluster
	}
	parts := make([]string, len(m.PeerURLs))
	for i, u := range m.PeerURLs {
		parts[i] = m.Name + "=" + u
	}
	return strings.Join(parts, ",")
}

func (m Member) token() string {
	if m.ClusterToken != "" {
		return m.ClusterToken
	}
	return DefaultClusterToken
}

// Cluster describes every member of a cluster to restore from one
// snapshot; the members' initial cluster is built from their peer URLs.
type Cluster struct {
	// Token is the initial cluster token. Empty means DefaultClusterToken.
	Token string
	// Members are the members to restore: at least one, with distinct
	// names, data directories and peer URLs.
	Members []ClusterMember
	// RevisionBump is applied to every member; see Member.RevisionBump.
	RevisionBump uint64
}

// ClusterMember is one member of a Cluster; see Member for the fields.
type ClusterMember struct {
	// Name is the member's name.
	Name string
	// DataDir is the data directory to create for it.
	DataDir string
	// PeerURLs are its initial advertise peer URLs.
	PeerURLs []string
}

// Validate checks the cluster's configuration.
func (c Cluster) Validate() error {
	if len(c.Members) == 0 {
		return errors.New("cluster has no members")
	}
	members := c.members()
	dirs := map[string]string{}
	names := map[string]bool{}
	for _, m := range members {
		if err := validateMemberName(m.Name); err != nil {
			return err
		}
		if names[m.Name] {
			return fmt.Errorf("member name %q is used twice", m.Name)
		}
		names[m.Name] = true
		if m.DataDir != "" {
			dir := filepath.Clean(m.DataDir)
			if other, dup := dirs[dir]; dup {
				return fmt.Errorf("members %q and %q share the data directory %s", other, m.Name, dir)
			}
			dirs[dir] = m.Name
		}
	}
	for _, m := range members {
		if err := m.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// members returns the Member of every ClusterMember.
func (c Cluster) members() []Member {
	var parts []string
	for _, cm := range c.Members {
		for _, u := range cm.PeerURLs {
			parts = append(parts, cm.Name+"="+u)
		}
	}
	initial := strings.Join(parts, ",")
	out := make([]Member, len(c.Members))
	for i, cm := range c.Members {
		out[i] = Member{Name: cm.Name, DataDir: cm.DataDir, PeerURLs: cm.PeerURLs,
			InitialCluster: initial, ClusterToken: c.Token, RevisionBump: c.RevisionBump}
	}
	return out
}

// RestoredMember describes a data directory that was restored.
type RestoredMember struct {
	// Name is the member's name and DataDir its data directory.
	Name    string
	DataDir string
	// MemberID and ClusterID are the IDs the member will have when it
	// starts, derived by etcd from the peer URLs and the token.
	MemberID, ClusterID uint64
}

// RestoreFile restores the data directory of m from a snapshot file, such
// as one written by Fetch or by `etcdctl snapshot save`, with etcd's own
// restore. The file's sha256 trailer is checked first: a damaged file
// fails with ErrIntegrity, and so does a database file copied out of a data
// directory, which has no trailer.
//
// The restore is done in a temporary directory next to m.DataDir, which is
// renamed to m.DataDir at the end, or whose entries move into m.DataDir
// when it is an existing empty directory (a mount point keeps its owner
// and mode): a failure leaves no data behind. A data directory that exists and is not empty is refused with
// ErrTargetExists.
func (r *Restorer) RestoreFile(ctx context.Context, snapshotPath string, m Member) (*RestoredMember, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	o := r.start(Backup{Source: "file", Entry: backup.Entry{ID: filepath.Base(snapshotPath), Key: snapshotPath}}, "restore", "data_dir", m.DataDir)
	out, err := r.restoreMembers(ctx, o, snapshotPath, false, []Member{m})
	if err != nil {
		return nil, o.fail(err)
	}
	return &out[0], nil
}

// RestoreClusterFile restores the data directory of every member of c from
// one snapshot file, as RestoreFile does for one. Either every data
// directory is created or none is.
func (r *Restorer) RestoreClusterFile(ctx context.Context, snapshotPath string, c Cluster) ([]RestoredMember, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	o := r.start(Backup{Source: "file", Entry: backup.Entry{ID: filepath.Base(snapshotPath), Key: snapshotPath}}, "restore", "members", len(c.Members))
	out, err := r.restoreMembers(ctx, o, snapshotPath, false, c.members())
	if err != nil {
		return nil, o.fail(err)
	}
	return out, nil
}

// Restore fetches b and restores the data directory of m from it, as Fetch
// and RestoreFile do; the snapshot is staged in a temporary directory next
// to m.DataDir and removed at the end. A process killed meanwhile leaves a
// ".etcdbackup-fetch-*" or ".<data dir>.restore-*" directory next to
// m.DataDir, which may be removed; never a partial data directory.
func (r *Restorer) Restore(ctx context.Context, b Backup, m Member) (*RestoredMember, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	out, err := r.fetchAndRestore(ctx, b, []Member{m})
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// RestoreCluster fetches b once and restores the data directory of every
// member of c from it. Either every data directory is created or none is.
func (r *Restorer) RestoreCluster(ctx context.Context, b Backup, c Cluster) ([]RestoredMember, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return r.fetchAndRestore(ctx, b, c.members())
}

func (r *Restorer) fetchAndRestore(ctx context.Context, b Backup, members []Member) ([]RestoredMember, error) {
	if !b.Restorable() {
		return nil, fmt.Errorf("%w: %s is %s, not a snapshot", ErrNotRestorable, b.Key, b.Kind)
	}
	unpin, err := r.pin(ctx, b)
	if err != nil {
		return nil, err
	}
	defer unpin()
	o := r.start(b, "restore", "members", len(members), "data_dir", members[0].DataDir)
	out, err := func() ([]RestoredMember, error) {
		// Refuse a taken data directory before downloading anything.
		for _, m := range members {
			if err := checkDataDir(m.DataDir); err != nil {
				return nil, err
			}
		}
		work, err := os.MkdirTemp(filepath.Dir(filepath.Clean(members[0].DataDir)), ".etcdbackup-fetch-")
		if err != nil {
			return nil, fmt.Errorf("create staging directory: %w", err)
		}
		defer os.RemoveAll(work)
		snap := filepath.Join(work, "snapshot.db")
		f, err := os.OpenFile(snap, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create staging file: %w", err)
		}
		// The staged file is read back at once and then removed: it needs
		// no fsync.
		res, err := r.stream(ctx, o, b, f)
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close staging file: %w", cerr)
		}
		if err != nil {
			return nil, err
		}
		o.event(Event{Kind: Fetched, Path: snap, StoredBytes: res.Stored.Size, RawBytes: res.Raw.Size})
		return r.restoreMembers(ctx, o, snap, true, members)
	}()
	if err != nil {
		return nil, o.fail(err)
	}
	return out, nil
}

// checkDataDir refuses a data directory that exists and is not an empty
// directory, and one whose parent does not exist.
func checkDataDir(dir string) error {
	dir = filepath.Clean(dir)
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		parent := filepath.Dir(dir)
		if pfi, perr := os.Stat(parent); perr != nil || !pfi.IsDir() {
			return fmt.Errorf("parent of data directory %s: not a directory or missing", dir)
		}
		return nil
	case err != nil:
		return fmt.Errorf("check data directory: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrTargetExists, dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("check data directory: %w", err)
	}
	defer d.Close()
	if _, err := d.Readdirnames(1); err != io.EOF {
		if err != nil {
			return fmt.Errorf("check data directory: %w", err)
		}
		return fmt.Errorf("%w: data directory %s is not empty", ErrTargetExists, dir)
	}
	return nil
}

// restoreMembers restores every member from snapshotPath into a temporary
// directory next to its data directory, then renames them all into place.
// verified says the file's trailer was checked while it was written.
func (r *Restorer) restoreMembers(ctx context.Context, o *operation, snapshotPath string, verified bool, members []Member) ([]RestoredMember, error) {
	for _, m := range members {
		if err := checkDataDir(m.DataDir); err != nil {
			return nil, err
		}
	}
	if !verified {
		if err := verifyFile(ctx, snapshotPath); err != nil {
			return nil, err
		}
	}
	if err := checkDatabase(ctx, snapshotPath); err != nil {
		return nil, err
	}

	var all []staged
	defer func() {
		for _, s := range all {
			_ = os.RemoveAll(s.work)
		}
	}()
	out := make([]RestoredMember, len(members))
	for i, m := range members {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dir := filepath.Clean(m.DataDir)
		work, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".restore-")
		if err != nil {
			return nil, fmt.Errorf("create temporary data directory: %w", err)
		}
		all = append(all, staged{work: work, dir: dir})
		out[i], err = r.restoreOne(snapshotPath, m, filepath.Join(work, "data"))
		if err != nil {
			return nil, fmt.Errorf("restore member %q: %w", m.Name, err)
		}
		out[i].DataDir = dir
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Every member is restored: move them into place. Into an empty data
	// directory that exists (a mount point, a volume), the restored
	// entries move one by one, so that the directory keeps its owner and
	// mode and a mount point is never removed; one that filled up
	// meanwhile is refused.
	rollback := func(done []staged) {
		for _, d := range done {
			if !d.existed {
				_ = os.RemoveAll(d.dir)
				continue
			}
			for _, name := range d.moved {
				_ = os.RemoveAll(filepath.Join(d.dir, name))
			}
		}
	}
	for i := range all {
		if err := moveIntoPlace(&all[i]); err != nil {
			rollback(all[:i+1])
			return nil, err
		}
	}
	for _, s := range all {
		if err := syncDir(filepath.Dir(s.dir)); err != nil {
			rollback(all)
			return nil, err
		}
	}
	for _, m := range out {
		o.event(Event{Kind: Restored, Path: m.DataDir, Member: m.Name})
		o.log.Info("member restored", "member", m.Name, "data_dir", m.DataDir,
			"member_id", fmt.Sprintf("%x", m.MemberID), "cluster_id", fmt.Sprintf("%x", m.ClusterID))
	}
	return out, nil
}

// staged is a member's data directory restored into work, to be moved to
// dir; existed says dir was an empty directory, and moved lists the
// entries moved into it.
type staged struct {
	work, dir string
	existed   bool
	moved     []string
}

// moveIntoPlace moves the restored data directory of s to s.dir: renamed
// there when s.dir does not exist, its entries moved in when it is an
// empty directory.
func moveIntoPlace(s *staged) error {
	src := filepath.Join(s.work, "data")
	if _, err := os.Lstat(s.dir); err != nil {
		if err := os.Rename(src, s.dir); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%w: data directory %s appeared during the restore", ErrTargetExists, s.dir)
			}
			return fmt.Errorf("move restored data directory into place: %w", err)
		}
		return nil
	}
	s.existed = true
	if err := checkDataDir(s.dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("read restored data directory: %w", err)
	}
	for _, e := range entries {
		target := filepath.Join(s.dir, e.Name())
		if _, err := os.Lstat(target); err == nil {
			return fmt.Errorf("%w: %s appeared during the restore", ErrTargetExists, target)
		}
		if err := os.Rename(filepath.Join(src, e.Name()), target); err != nil {
			return fmt.Errorf("move restored data into %s: %w", s.dir, err)
		}
		s.moved = append(s.moved, e.Name())
	}
	return syncDir(s.dir)
}

// restoreOne runs etcd's restore of m into dataDir.
func (r *Restorer) restoreOne(snapshotPath string, m Member, dataDir string) (_ RestoredMember, err error) {
	// etcd's restore panics (through zap's Panic) on a database it cannot
	// open, which a file whose trailer matches can still be: a snapshot of
	// something else. checkDatabase refused what would panic on etcd's own
	// goroutines; what is left panics here, on this one. Its deferred
	// closes run while the panic unwinds, so turning it into an error
	// leaks nothing.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: etcd restore: %v", ErrIntegrity, p)
		}
	}()
	lg := zapslog.New(r.Logger)
	initial := m.initialCluster()
	urls, err := types.NewURLsMap(initial)
	if err != nil {
		return RestoredMember{}, err
	}
	cl, err := membership.NewClusterFromURLsMap(lg, m.token(), urls)
	if err != nil {
		return RestoredMember{}, err
	}
	var id uint64
	for _, mem := range cl.Members() {
		if mem.Name == m.Name {
			id = uint64(mem.ID)
		}
	}
	err = snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{
		SnapshotPath:        snapshotPath,
		Name:                m.Name,
		OutputDataDir:       dataDir,
		PeerURLs:            m.PeerURLs,
		InitialCluster:      initial,
		InitialClusterToken: m.token(),
		// The trailer was checked by Fetch or verifyFile, while the bytes
		// were read anyway; etcd would read the whole file once more.
		SkipHashCheck: true,
		RevisionBump:  m.RevisionBump,
		MarkCompacted: m.RevisionBump > 0,
	})
	if err != nil {
		return RestoredMember{}, err
	}
	return RestoredMember{Name: m.Name, MemberID: id, ClusterID: uint64(cl.ID())}, nil
}

// verifyFile checks the sha256 trailer of a snapshot file.
func verifyFile(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open snapshot: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open snapshot: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("snapshot %s is not a regular file", path)
	}
	tr := backup.VerifyTrailer(f)
	buf := make([]byte, copyBufferSize)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := tr.Read(buf)
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, backup.ErrSnapshotIntegrity) {
			return fmt.Errorf("%w: snapshot %s: %w", ErrIntegrity, path, err)
		}
		if err != nil {
			return fmt.Errorf("read snapshot: %w", err)
		}
	}
}
