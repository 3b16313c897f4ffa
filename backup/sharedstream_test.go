package backup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

// slowUploader reads its stream a few KiB at a time, yielding between
// reads, as a slow destination does, and stops once its context ends;
// with cancel set, it ends the run's context once it has read cancelAt
// bytes.
type slowUploader struct {
	*memUploader
	cancel   context.CancelFunc
	cancelAt int
}

func (u *slowUploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- u.memUploader.Upload(ctx, m, pr) }()
	buf := make([]byte, 3<<10)
	read := 0
	for {
		if err := ctx.Err(); err != nil {
			pw.CloseWithError(err)
			<-done
			return err
		}
		n, err := r.Read(buf)
		read += n
		if _, werr := pw.Write(buf[:n]); werr != nil {
			<-done
			return werr
		}
		if u.cancel != nil && read >= u.cancelAt {
			u.cancel()
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			pw.CloseWithError(err)
			if uerr := <-done; err == nil {
				err = uerr
			}
			return err
		}
		runtime.Gosched()
	}
}

// TestConcurrentFullBackupsStreamsNeverMix: full backups of several
// pipelines run at once, round after round, on the shared streaming
// compressors (zstd of one setting, gzip, under age encryption), each to
// two slow destinations; in each round some are cancelled mid-stream and
// some fail reading their snapshot. Every backup that succeeds decodes,
// on each destination, to exactly its own snapshot: no compressor given
// back after a cancelled or failed stream carries it into another.
func TestConcurrentFullBackupsStreamsNeverMix(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	const pipelines, rounds = 6, 3
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range pipelines {
			stream := fakeSnapshot(t, 400+i*37+round*11, uint64(round*pipelines+i+1))
			p := &backup.Pipeline{Compression: []backup.Compression{backup.Zstd, backup.Gzip, backup.Zstd}[i%3], MemoryBudget: 1 << 20}
			if i%3 == 2 {
				p.Encryption.Recipients = []string{id.Recipient().String()}
			}
			ctx, cancel := context.WithCancel(t.Context())
			a, b := &slowUploader{memUploader: newMemUploader()}, &slowUploader{memUploader: newMemUploader()}
			switch (i + round) % 4 {
			case 1: // cancelled mid-stream
				b.cancel, b.cancelAt = cancel, 4<<10
			case 3: // the snapshot fails mid-stream
				stream = stream[:len(stream)/2]
			}
			p.Snapshotter = newSnapshotter(stream)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer cancel()
				name := fmt.Sprintf("round %d pipeline %d", round, i)
				res, err := p.Run(ctx, backup.Request{Cluster: "prod", Name: "daily",
					Targets: []backup.Target{{Destination: "a", Uploader: a}, {Destination: "b", Uploader: b}}})
				if (i+round)%4 == 1 || (i+round)%4 == 3 {
					assert.Error(t, err, name)
					return
				}
				if !assert.NoError(t, err, name) || !assert.Equal(t, []string{"a", "b"}, res.Succeeded(), name) {
					return
				}
				for _, u := range []*slowUploader{a, b} {
					m, stored := u.only(t)
					var ids []age.Identity
					if m.Encryption != nil {
						ids = []age.Identity{id}
					}
					assert.Equal(t, stream, decode(t, m, stored, ids...), name)
				}
			}()
		}
		wg.Wait()
	}
}
