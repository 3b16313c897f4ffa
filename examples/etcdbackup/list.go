package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
)

// listedBackup is one line of `list --output=json`.
type listedBackup struct {
	ID          string `json:"id"`
	Cluster     string `json:"cluster"`
	Destination string `json:"destination"`
	Kind        string `json:"kind"`
	// Name is the backup (config) name the manifest records.
	Name    string    `json:"name,omitempty"`
	Key     string    `json:"key"`
	Created time.Time `json:"created"`
	// Size and SHA256 are the stored object's; SHA256 is empty for legacy
	// objects, which have no manifest to record it.
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	RawSize     int64  `json:"rawSize,omitempty"`
	RawSHA256   string `json:"rawSha256,omitempty"`
	Compression string `json:"compression"`
	Encrypted   bool   `json:"encrypted"`
	Legacy      bool   `json:"legacy"`
	EtcdVersion string `json:"etcdVersion,omitempty"`
	Revision    int64  `json:"revision,omitempty"`
	Problem     string `json:"problem,omitempty"`
	// FirstRevision and LastRevision are a delta segment's.
	FirstRevision int64 `json:"firstRevision,omitempty"`
	LastRevision  int64 `json:"lastRevision,omitempty"`
	// Synthetic marks a full backup made by compact from a chain; Base and
	// Chain say which.
	Synthetic bool   `json:"synthetic,omitempty"`
	Base      string `json:"base,omitempty"`
	Chain     string `json:"chain,omitempty"`
}

func runList(ctx context.Context, s *streams, args []string) error {
	fs := newFlagSet("list", "--destination=URL|NAME --cluster=NAME [--output=table|json] [--all]")
	var (
		dest   destinationFlags
		output string
		all    bool
	)
	dest.register(fs)
	fs.StringVar(&output, "output", "table", "table or json")
	fs.BoolVar(&all, "all", false, "also list what cannot be restored: orphans, invalid manifests, foreign objects (delta segments are always listed)")
	if err := fs.parse(s, args); err != nil {
		return err
	}
	if err := dest.validate(); err != nil {
		return err
	}
	if output != "table" && output != "json" {
		return usagef("--output %q: want table or json", output)
	}

	reg, d, err := openDestination(ctx, &dest, destination.Options{Logger: fs.logger(s)})
	if err != nil {
		return err
	}
	defer reg.Close()
	entries, err := backup.ListBackups(ctx, d, dest.cluster)
	if err != nil {
		return err
	}

	list := []listedBackup{} // so that json says [] rather than null
	for _, e := range entries {
		if all || e.Restorable() || e.Kind == backup.KindDelta || e.Kind.Logical() {
			list = append(list, listed(d.Name(), e))
		}
	}
	if len(list) == 0 {
		// An empty table reads like an answer; a typo in the cluster's
		// name should not.
		fmt.Fprintf(s.stderr, "no backups of cluster %q on %s\n", dest.cluster, d.Name())
	}
	if output == "json" {
		enc := json.NewEncoder(s.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(s.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tSIZE\tCOMPRESSION\tENCRYPTED\tKIND\tREVISION")
	for _, b := range list {
		rev := "-"
		if b.Revision != 0 {
			rev = fmt.Sprint(b.Revision)
		}
		kind := b.Kind
		if b.Synthetic {
			kind += " (synthetic)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.ID, b.Created.UTC().Format(time.RFC3339), size(b.Size),
			b.Compression, yesNo(b.Encrypted), kind, rev)
	}
	return tw.Flush()
}

func listed(dest string, e backup.Entry) listedBackup {
	b := listedBackup{
		ID:          e.ID,
		Cluster:     e.Cluster,
		Destination: dest,
		Kind:        string(e.Kind),
		Key:         e.Key,
		Created:     e.Created.UTC(),
		Size:        e.Size,
		Compression: string(e.Compression),
		Legacy:      e.Kind == backup.KindLegacy,
	}
	if e.Compression == "" {
		b.Compression = string(backup.None)
	}
	if e.Problem != nil {
		b.Problem = oneLine(e.Problem)
	}
	if m := e.Manifest; m != nil {
		b.Name = m.Name
		b.SHA256 = m.Stored.SHA256
		b.RawSize, b.RawSHA256 = m.Raw.Size, m.Raw.SHA256
		b.Compression = string(m.Compression.OrDefault())
		b.Encrypted = m.Encrypted()
		b.EtcdVersion = m.Etcd.Version
		b.Revision = m.Etcd.Revision.High
		if m.IsDelta() {
			b.FirstRevision, b.LastRevision, b.Revision = m.FirstRevision, m.LastRevision, m.LastRevision
			b.Chain = m.Chain
		}
		if sy := m.Synthetic; sy != nil {
			b.Synthetic, b.Base, b.Chain = true, sy.Base, sy.Chain
		}
	} else if strings.HasSuffix(e.Key, ".age") {
		b.Encrypted = true
	}
	return b
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
