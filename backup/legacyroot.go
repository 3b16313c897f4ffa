package backup

import (
	"context"
	"fmt"
	"strings"
)

// LegacyNames attributes the objects at the top of a destination to the
// clusters they belong to. Before cluster folders, backups were stored at
// the top of the bucket as "<cluster>-<backup name>", with "-<timestamp>"
// for scheduled ones. The name alone is ambiguous ("prod-a-daily" may be
// cluster prod-a's daily backup or cluster prod's "a-daily"), so the host
// says what it knows: its clusters and the backup (config) names of each.
// An object is attributed to a cluster only when exactly one cluster has
// a config whose "<cluster>-<name>" starts the object's name (followed by
// its end, '-' or '.'); otherwise it is left unattributed.
type LegacyNames map[string][]string

// Attribute returns the cluster the object called name (a key at the top
// of a destination, with no '/') belongs to, and how it was attributed.
// ok is false when no cluster, or more than one, matches.
func (n LegacyNames) Attribute(name string) (cluster, how string, ok bool) {
	var matches []string
	best := map[string]string{}
	for c, configs := range n {
		for _, cfg := range configs {
			base := c + "-" + cfg
			rest, found := strings.CutPrefix(name, base)
			if !found || (rest != "" && rest[0] != '-' && rest[0] != '.') {
				continue
			}
			if _, seen := best[c]; !seen {
				matches = append(matches, c)
			}
			if len(cfg) > len(best[c]) {
				best[c] = cfg
			}
		}
	}
	if len(matches) != 1 {
		return "", "", false
	}
	c := matches[0]
	return c, fmt.Sprintf("at the top of the destination, named after config %q of cluster %q (%s-%s)", best[c], c, c, best[c]), true
}

// ListLegacyRoot returns the objects at the top of c that names attributes
// to cluster, as KindLegacy entries whose Attribution says why: they are
// restorable like any legacy snapshot, and retention, which sees cluster
// folders only, never deletes them.
func ListLegacyRoot(ctx context.Context, c Catalog, cluster string, names LegacyNames) ([]Entry, error) {
	if err := ValidateName("cluster", cluster); err != nil {
		return nil, err
	}
	if len(names[cluster]) == 0 {
		return nil, nil
	}
	var out []Entry
	for info, err := range c.List(ctx, cluster+"-") {
		if err != nil {
			return nil, fmt.Errorf("list legacy objects of %s: %w", cluster, err)
		}
		if strings.Contains(info.Key, "/") || strings.HasSuffix(info.Key, ManifestSuffix) {
			continue // in another cluster's folder, or ours
		}
		owner, how, ok := names.Attribute(info.Key)
		if !ok || owner != cluster {
			continue
		}
		out = append(out, Entry{Kind: KindLegacy, Cluster: cluster, ID: info.Key, Key: info.Key, Created: info.ModTime,
			Size: info.Size, Compression: legacyCompression(info.Key), Attribution: how})
	}
	return out, nil
}
