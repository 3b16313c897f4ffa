package retention_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// TestPruneCollectsStaleFileTemps: on a file:// destination, the hidden
// "<key>.<hex>.tmp" a put killed after its link leaves (a second name of
// the object, which keeps its space) is collected once older than the
// upload grace, as a stale multipart upload is on S3; a young one is left.
func TestPruneCollectsStaleFileTemps(t *testing.T) {
	dir := t.TempDir()
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "file://"+dir+"?metadata=skip", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	m := fullAt(t, b, "hourly", time.Now().Add(-time.Hour), 1)
	data := filepath.Join(dir, backup.ClusterPrefix("prod-a"), filepath.FromSlash(m.DataKey))
	stale := data + ".0123456789abcdef.tmp"
	young := data + ".fedcba9876543210.tmp"
	require.NoError(t, os.Link(data, stale))
	require.NoError(t, os.WriteFile(young, []byte("a put in flight"), 0o600))
	old := time.Now().Add(-48 * time.Hour) // a link shares the object's times
	require.NoError(t, os.Chtimes(stale, old, old))
	p := &retention.Pruner{Store: b, Destination: "store", Policy: retention.KeepLast(1)}
	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Len(t, report.AbortedUploads, 1, "%+v", report.AbortedUploads)
	require.Equal(t, backup.ClusterPrefix("prod-a")+m.DataKey, report.AbortedUploads[0].Key)
	require.NoFileExists(t, stale)
	require.FileExists(t, young)
}
