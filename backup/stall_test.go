package backup_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

// stalledUploader takes the first bytes of the stream, then stops reading,
// as a destination whose connection hangs does, until its context ends.
type stalledUploader struct{}

func (stalledUploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	if _, err := io.ReadFull(r, make([]byte, 1024)); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

func (stalledUploader) Commit(ctx context.Context, m *backup.Manifest) error { return nil }

// TestStallTimeout: a destination that stops taking the stream is dropped
// with ErrDestinationStalled after StallTimeout, and the other destination
// commits the backup instead of waiting for it.
func TestStallTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, _ := newFile(t)
	p := &backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 8<<20/512, 21)), Compression: backup.None,
		StallTimeout: 200 * time.Millisecond}
	res, err := p.Run(ctx, backup.Request{Cluster: "c", Name: "n", Scheduled: true, Targets: []backup.Target{
		{Destination: "stalled", Uploader: stalledUploader{}},
		{Destination: "file", Uploader: &backup.BucketUploader{Bucket: b}},
	}})
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the run ended long before its context")
	require.ErrorIs(t, res.Outcomes[0].Err, backup.ErrDestinationStalled)
	require.NoError(t, res.Outcomes[1].Err)
	require.Len(t, listKeys(t, b), 2, "the other destination committed")
}
