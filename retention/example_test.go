package retention_test

import (
	"fmt"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

func ExampleMakePlan() {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	var entries []backup.Entry
	for i := 4; i >= 0; i-- { // oldest first, one a day
		created := now.AddDate(0, 0, -i)
		id := backup.BackupID("prod-a", "daily", created, true)
		entries = append(entries, backup.Entry{
			Kind: backup.KindBackup, Cluster: "prod-a", ID: id, Created: created,
			Key:      "prod-a/" + backup.DataKey(id, created, backup.Zstd, false),
			Manifest: &backup.Manifest{ID: id, Cluster: "prod-a", Created: created},
		})
	}
	entries = append(entries, backup.Entry{Kind: backup.KindLegacy, Cluster: "prod-a", ID: "snapshot.db"})

	plan, err := retention.MakePlan("prod-a", entries, retention.KeepLast(2), now, retention.PlanOptions{})
	if err != nil {
		panic(err)
	}
	for _, d := range plan.Decisions {
		fmt.Printf("%-6s %-36s %s\n", d.Action, d.Entry.ID, d.Reason)
	}
	// Output:
	// delete prod-a-daily-20261118T120000.000Z    selected by no keep rule of keep-last=2
	// delete prod-a-daily-20261119T120000.000Z    selected by no keep rule of keep-last=2
	// delete prod-a-daily-20261120T120000.000Z    selected by no keep rule of keep-last=2
	// keep   prod-a-daily-20261121T120000.000Z    keep-last 2: number 2
	// keep   prod-a-daily-20261122T120000.000Z    newest backup: always kept
	// keep   snapshot.db                          legacy object: never deleted by retention
}
