package alerts

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

const dashboardFile = "../grafana/etcdbackup-dashboard.json"

// TestDashboard: the Grafana dashboard parses, every panel queries, and
// every query names only metrics and labels the library exports (the
// check the alerting rules pass).
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Title)
	require.NotEmpty(t, dash.UID)
	require.GreaterOrEqual(t, len(dash.Panels), 8)
	exported := exportedMetrics(t)
	seen := map[string]bool{}
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, q := range p.Targets {
			require.NotEmpty(t, q.Expr, "panel %q", p.Title)
			require.Empty(t, check(q.Expr, exported), "panel %q: %s", p.Title, q.Expr)
			for _, name := range metricName.FindAllString(q.Expr, -1) {
				seen[name] = true
			}
		}
	}
	// What a seed's dashboard is for.
	for _, name := range []string{
		"etcdbackup_destination_newest_backup_timestamp_seconds", "etcdbackup_backup_failures_total",
		"etcdbackup_backup_duration_seconds_bucket", "etcdbackup_destination_available",
		"etcdbackup_destination_inventory_entries", "etcdbackup_follower_lag_seconds",
	} {
		require.True(t, seen[name], "no panel shows %s", name)
	}
	require.NotEmpty(t, check("etcdbackup_no_such_metric", exported), "the check can fail")
}
