package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/etcdbackup/etcdbackup/restore"
)

func runRestore(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("restore", "--destination=URL|NAME --cluster=NAME --data-dir=DIR [--backup=ID|latest] [--identity=FILE] [member flags]")
	var (
		dest                   destinationFlags
		sel                    selectFlags
		dataDir, name, initial string
		token                  string
		peerURLs               stringList
		bump                   uint64
	)
	dest.register(fs)
	sel.register(fs)
	fs.StringVar(&dataDir, "data-dir", "", "`directory` to create the member's data in; it must not exist or be empty (required)")
	fs.StringVar(&name, "name", "default", "the member's `name`, as etcd's --name")
	fs.Var(&peerURLs, "initial-advertise-peer-urls", "the member's peer `URLs`, as etcd's flag (default http://localhost:2380)")
	fs.StringVar(&initial, "initial-cluster", "", "every member as `NAME=URL,...`, as etcd's flag (default: this member alone)")
	fs.StringVar(&token, "initial-cluster-token", restore.DefaultClusterToken, "the new cluster's `token`, as etcd's flag")
	fs.Uint64Var(&bump, "bump-revision", 0, "raise the revision by `N` and mark it compacted, so that watchers relist (Kubernetes)")
	if err := fs.parse(s, args); err != nil {
		return err
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

	reg, d, err := openDestination(ctx, &dest, fs.logger(s))
	if err != nil {
		return err
	}
	defer reg.Close()
	b, err := sel.find(ctx, restoreSources(d), dest.cluster)
	if err != nil {
		return err
	}
	m, err := r.Restore(ctx, b, member)
	if err != nil {
		return fmt.Errorf("backup %s: %w", b.ID, err)
	}
	fmt.Fprintf(s.stdout, "restored %s into %s: member %s, member ID %x, cluster ID %x\n", b.ID, m.DataDir, m.Name, m.MemberID, m.ClusterID)
	return nil
}

// emptyOrMissing refuses a data directory that holds anything before a
// byte is downloaded: restore never overwrites, and a wrong --data-dir is
// the user's to fix.
func emptyOrMissing(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
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
