package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The scheduler tells a continuous job's prune the other continuous jobs
// of its cluster: their chains are theirs.
func TestContinuousPeers(t *testing.T) {
	s, err := New(Config{Runner: RunnerFuncs{}})
	require.NoError(t, err)
	job := func(id, cluster string, continuous bool) Job {
		j := Job{ID: id, Cluster: cluster, Name: id}
		if continuous {
			j.Continuous = &Continuous{Window: time.Hour}
		}
		return j
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range []Job{job("cont-a", "c", true), job("cont-b", "c", true), job("hourly", "c", false), job("cont-x", "x", true)} {
		s.jobs[j.ID] = &entry{job: j}
	}
	require.Equal(t, []string{"cont-b"}, s.continuousPeers(s.jobs["cont-a"].job))
	require.Equal(t, []string{"cont-a", "cont-b"}, s.continuousPeers(s.jobs["hourly"].job))
	require.Empty(t, s.continuousPeers(s.jobs["cont-x"].job))
}
