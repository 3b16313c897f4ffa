//go:build unix

package compact

import (
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSweepNeverTakesAWorkDirBeingMade: a sweep beside compactions that
// are making their work directories removes none of them (the lock file
// appears only once locked).
func TestSweepNeverTakesAWorkDirBeingMade(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	stop := make(chan struct{})
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		for {
			select {
			case <-stop:
				return
			default:
				sweepStale(dir, log)
			}
		}
	}()
	for range 300 {
		w, err := newWorkDir(dir)
		require.NoError(t, err)
		_, err = os.Stat(w.path)
		require.NoError(t, err, "a sweep removed a work directory that was being made")
		require.NoError(t, w.remove())
	}
	close(stop)
	<-swept
}
