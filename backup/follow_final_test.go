package backup

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
)

// TestFinalFlushRefusedNamesPendingRevisions: a follower whose cleanups
// were ended (its lock lost) holds only a segment handed to its targets:
// the error names that segment's revisions, not the empty builder's.
func TestFinalFlushRefusedNamesPendingRevisions(t *testing.T) {
	st := &followState{f: &Follower{Cluster: "prod-a"}, builder: newSegmentBuilder(),
		pending: &pendingSegment{sum: SegmentSummary{FirstRevision: 10, LastRevision: 19, Revisions: 10}}}
	errLost := errors.New("lock lost")
	ctx, end := cleanup.Bound(context.Background())
	end(errLost)
	err := st.finalFlush(ctx)
	require.ErrorIs(t, err, errLost)
	require.ErrorContains(t, err, "revisions 10..19")
}
